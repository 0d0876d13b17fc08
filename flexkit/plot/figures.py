"""``flexkit plot RUN_DIR``: pictures of one run from its ``metrics.jsonl`` (needs matplotlib: ``pip install
"flexkit-rft[plot]"``).

Written into ``RUN_DIR/plots/`` (or ``--out``):

* ``overview.png`` — one panel of each below, for a first look;
* ``accuracy.png`` — held-out accuracy, overall and per level, against steps and against rollouts (responses
  generated), from the evaluation records (the ``"step": -1`` record is the evaluation before training);
* ``mix.png`` — the share of each taskset and of each level among the drawn tasks over time
  (``flexkit/taskset_mix``, ``flexkit/level_mix``; a moving average over a few steps);
* ``pass_rates.png`` — the distribution of the selectors' predicted pass rates of the drawn tasks against the
  whole pool's, early, midway and late in the run (``flexkit/predicted_pass_rate``; the selector's
  ``target_reward`` as a dashed line when it has one). Selectors that keep no estimate (``random``, ``shuffle``)
  get a note;
* ``filtering.png`` — the fraction of responses kept by the sample stage and the filter rounds per step
  (``flexkit/sample/kept_fraction``, ``flexkit/sample/filter_rounds``).

The records are read under the current names (:mod:`flexkit.metric_names`; older run folders included). Values a
plot cannot draw (a string where a number belongs, a malformed count table or histogram) are left out, with a
note naming the key (:func:`flexkit.plot.records.drawable_records`); the rest is drawn.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from flexkit.errors import ConfigError, FlexkitError
from flexkit.metric_names import (
    EVAL_ACCURACY,
    FILTER_ROUNDS,
    KEPT_FRACTION,
    LEVEL_MIX,
    PREDICTED_PASS_RATE,
    RUN_ROLLOUTS,
    TASKSET_MIX,
)
from flexkit.plot.records import drawable_records
from flexkit.run.folder import METRICS_FILE, read_metrics

log = structlog.get_logger("flexkit.plot")

__all__ = ["PLOT_FILES", "plot_run"]

#: The files :func:`plot_run` writes, in order.
PLOT_FILES: tuple[str, ...] = ("overview.png", "accuracy.png", "mix.png", "pass_rates.png", "filtering.png")

_INSTALL = 'pip install "flexkit-rft[plot]"'


def plot_run(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, *,
             dpi: int = 100, files: Sequence[str] = PLOT_FILES,
             on_skip: Callable[[str], None] | None = None) -> list[Path]:
    """Write ``files`` (some of :data:`PLOT_FILES`, default all) for the run in ``run_dir`` into ``out_dir``
    (default ``run_dir/plots``); return their paths. Raises :class:`~flexkit.FlexkitError` without matplotlib or
    without metrics.

    Values the plots cannot draw are left out; ``on_skip`` is called with a note naming each such key (default:
    a logged warning)."""
    unknown = sorted(set(files) - set(PLOT_FILES))
    if unknown:
        raise ConfigError(f"unknown plot file(s) {unknown}; known: {', '.join(PLOT_FILES)}")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise FlexkitError(f"flexkit plot needs matplotlib: {_INSTALL}") from None
    run_dir = Path(run_dir)
    records = [record for _line, record in read_metrics(run_dir / METRICS_FILE)]
    if not records:
        raise FlexkitError(f"{run_dir / METRICS_FILE}: no metrics to plot (is {run_dir} a flexkit run folder?)")
    records, notes = drawable_records(records)
    for note in notes:
        if on_skip is not None:
            on_skip(note)
        else:
            log.warning("left out of the plots", what=note, path=str(run_dir / METRICS_FILE))
    run = _Run(run_dir, records)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    layouts: dict[str, tuple[tuple[int, int], list[Any]]] = {
        "overview.png": ((2, 3), [_accuracy_by_step, _accuracy_by_rollouts, _taskset_mix, _level_mix,
                                  _pass_rates_late, _kept_fraction]),
        "accuracy.png": ((1, 2), [_accuracy_by_step, _accuracy_by_rollouts]),
        "mix.png": ((1, 2), [_taskset_mix, _level_mix]),
        "pass_rates.png": ((1, 3), [_pass_rates_early, _pass_rates_middle, _pass_rates_late]),
        "filtering.png": ((1, 2), [_kept_fraction, _filter_rounds]),
    }
    written = []
    for name in [f for f in PLOT_FILES if f in files]:
        (rows, cols), panels = layouts[name]
        fig = Figure(figsize=(4.2 * cols, 3.3 * rows), layout="constrained")
        for ax, panel in zip(fig.subplots(rows, cols, squeeze=False).flat, panels, strict=True):
            panel(ax, run)
        fig.suptitle(f"{run_dir.name}: {run.steps} steps, {run.rollouts:,} rollouts", fontsize=11)
        fig.savefig(out / name, dpi=dpi)
        written.append(out / name)
    return written


class _Run:
    """The series a run's plots draw, read once from its records."""

    def __init__(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> None:
        self.steps_records = [r for r in records if r["step"] >= 0]
        self.evals = [r for r in records if isinstance(r.get(EVAL_ACCURACY), (int, float))]
        self.steps = len(self.steps_records)
        self.rollouts = int(self.steps_records[-1].get(RUN_ROLLOUTS) or 0) if self.steps_records else 0
        self.targets = _targets(run_dir)

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps done (``step + 1``) and values of the step records that have ``key``."""
        pairs = [(r["step"] + 1, r[key]) for r in self.steps_records if isinstance(r.get(key), (int, float))]
        return np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs], dtype=float)

    def mix(self, key: str) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Steps done, the names, and each step's share of each name (rows: names) of a count table ``key``."""
        rows = [r for r in self.steps_records if isinstance(r.get(key), dict)]
        names = sorted({n for r in rows for n in r[key]}, key=_natural)
        counts = np.array([[float(r[key].get(n, 0)) for r in rows] for n in names]).reshape(len(names), len(rows))
        totals = counts.sum(axis=0)
        shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
        return np.array([r["step"] + 1 for r in rows], dtype=float), names, shares

    def histograms(self, part: slice) -> tuple[np.ndarray, np.ndarray, str] | None:
        """Summed ``flexkit/predicted_pass_rate`` histograms (selected, pool) of the steps in ``part`` of the run."""
        rows = [r for r in self.steps_records if isinstance(r.get(PREDICTED_PASS_RATE), dict)][part]
        if not rows:
            return None
        selected = np.sum([r[PREDICTED_PASS_RATE]["selected"] for r in rows], axis=0).astype(float)
        pool = np.sum([r[PREDICTED_PASS_RATE]["pool"] for r in rows], axis=0).astype(float)
        return selected, pool, f"steps {rows[0]['step'] + 1}–{rows[-1]['step'] + 1}"


def _natural(name: str) -> tuple[int, float, str]:
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def _targets(run_dir: Path) -> list[float]:
    """The ``target_reward`` of every selector in the run's ``resolved.json`` (none when unreadable)."""
    try:
        resolved = json.loads((run_dir / "resolved.json").read_text(encoding="utf-8"))
        configs = [ts["selector"]["config"] for ts in resolved["tasksets"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return sorted({float(c["target_reward"]) for c in configs
                   if isinstance(c, dict) and isinstance(c.get("target_reward"), (int, float))
                   and not isinstance(c["target_reward"], bool) and math.isfinite(c["target_reward"])})


def _note(ax: Any, title: str, text: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, color="0.35", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (shorter at the start), so each point only uses steps up to it."""
    if window <= 1 or values.shape[-1] == 0:
        return values
    csum = np.cumsum(values, axis=-1)
    out = csum.copy()
    out[..., window:] = csum[..., window:] - csum[..., :-window]
    counts = np.minimum(np.arange(1, values.shape[-1] + 1), window)
    return out / counts


def _accuracy(ax: Any, run: _Run, x_key: str, xlabel: str) -> None:
    title = f"held-out accuracy vs {xlabel.split(' ')[0]}"
    points = [r for r in run.evals if x_key == "steps" or isinstance(r.get(RUN_ROLLOUTS), (int, float))]
    if not points:
        _note(ax, title, "no evaluations: set [run] eval_every > 0")
        return
    xs = np.array([r["step"] + 1 if x_key == "steps" else r[RUN_ROLLOUTS] for r in points], dtype=float)
    prefix = EVAL_ACCURACY + "/"
    levels = sorted({k.removeprefix(prefix) for r in points for k in r if k.startswith(prefix)}, key=_natural)
    colors = _colors(len(levels))
    for level, color in zip(levels, colors, strict=True):
        ys = [r.get(prefix + level, np.nan) for r in points]
        ax.plot(xs, ys, marker=".", color=color, linewidth=1.3, label=f"level {level}")
    ax.plot(xs, [r[EVAL_ACCURACY] for r in points], color="black", linewidth=2.2, label="all")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def _accuracy_by_step(ax: Any, run: _Run) -> None:
    _accuracy(ax, run, "steps", "steps")


def _accuracy_by_rollouts(ax: Any, run: _Run) -> None:
    _accuracy(ax, run, "rollouts", "rollouts (responses generated)")


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.9 * i / max(1, n - 1)) for i in range(n)]


def _stacked_mix(ax: Any, run: _Run, key: str, title: str, label: str, missing: str) -> None:
    xs, names, shares = run.mix(key)
    if len(names) < 2:
        _note(ax, title, f"every drawn task: {label}{names[0]}" if names else missing)
        return
    window = max(1, len(xs) // 20)
    ax.stackplot(xs, _smooth(shares, window), labels=[f"{label}{n}" for n in names], colors=_colors(len(names)),
                 alpha=0.85)
    if len(xs) > 1:
        ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(0, 1)
    ax.set_xlabel("steps")
    ax.set_ylabel("share of drawn tasks")
    ax.set_title(title + (f" (mean of {window} steps)" if window > 1 else ""), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", reverse=True)


def _taskset_mix(ax: Any, run: _Run) -> None:
    _stacked_mix(ax, run, TASKSET_MIX, "taskset mix", "", f"no {TASKSET_MIX} in the metrics")


def _level_mix(ax: Any, run: _Run) -> None:
    _stacked_mix(ax, run, LEVEL_MIX, "level mix", "level ",
                 "the drawn tasks' rows carry no integer 'level'")


def _pass_rates(ax: Any, run: _Run, part: slice, when: str) -> None:
    title = f"predicted pass rates, {when}"
    found = run.histograms(part)
    if found is None:
        _note(ax, title, "the selectors keep no pass-rate estimate (random, shuffle, ...); difficulty_based, "
                         "learnability and thompson_target do")
        return
    selected, pool, steps = found
    width = 1.0 / len(pool)
    centers = (np.arange(len(pool)) + 0.5) * width
    ax.bar(centers, pool / max(pool.sum(), 1.0), width=width, color="0.82", edgecolor="0.55", label="pool")
    ax.bar(centers, selected / max(selected.sum(), 1.0), width=width * 0.55, color="tab:orange", alpha=0.9,
           label="drawn tasks")
    for target in run.targets:
        ax.axvline(target, color="0.2", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("selector's estimate before the step")
    ax.set_ylabel("share")
    ax.set_title(f"{title} ({steps})", fontsize=10)
    ax.legend(fontsize=7, loc="best")


def _thirds(run: _Run) -> list[slice]:
    n = sum(1 for r in run.steps_records if isinstance(r.get(PREDICTED_PASS_RATE), dict))
    third = max(1, n // 3)
    return [slice(0, third), slice(third, 2 * third), slice(max(0, n - third), n)]


def _pass_rates_early(ax: Any, run: _Run) -> None:
    _pass_rates(ax, run, _thirds(run)[0], "early")


def _pass_rates_middle(ax: Any, run: _Run) -> None:
    _pass_rates(ax, run, _thirds(run)[1], "midway")


def _pass_rates_late(ax: Any, run: _Run) -> None:
    _pass_rates(ax, run, _thirds(run)[2], "late")


def _line(ax: Any, run: _Run, key: str, title: str, ylabel: str, missing: str, *,
          ylim: tuple[float, float] | None = None) -> None:
    xs, ys = run.series(key)
    if not len(xs):
        _note(ax, title, missing)
        return
    window = max(1, len(xs) // 40)
    ax.plot(xs, ys, color="0.75", linewidth=0.8, label="per step")
    if window > 1:
        ax.plot(xs, _smooth(ys, window), color="tab:blue", linewidth=1.8, label=f"mean of {window} steps")
        ax.legend(fontsize=7, loc="best")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel("steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def _kept_fraction(ax: Any, run: _Run) -> None:
    _line(ax, run, KEPT_FRACTION, "kept fraction (sample stage)", "kept responses / generated",
          "no sample stage: every response is trained on", ylim=(-0.02, 1.02))


def _filter_rounds(ax: Any, run: _Run) -> None:
    _line(ax, run, FILTER_ROUNDS, "filter rounds per step", "rollout rounds",
          f"no {FILTER_ROUNDS} in the metrics")
