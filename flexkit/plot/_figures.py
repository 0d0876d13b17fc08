"""``flexkit plot RUN_DIR``: pictures of one run from its ``metrics.jsonl`` (needs matplotlib: ``pip install
"flexkit-rft[plot]"``).

Written into ``RUN_DIR/plots/`` (or ``--out``), each only when the run has something for it:

* ``overview.png`` — one panel of each below, for a first look;
* ``accuracy.png`` — held-out test accuracy, overall and per level, against steps and against rollouts
  (responses generated), from the evaluation records (the ``"step": -1`` record is the evaluation before
  training), with the validation accuracy dashed beside it when the trainer has a validation split;
* ``mix.png`` — the share of each taskset (several tasksets) and of each level among the drawn tasks over time
  (``flexkit/taskset_mix``, ``flexkit/level_mix``; a moving average over a few steps);
* ``pass_rates.png`` — the distribution of the selectors' predicted pass rates of the drawn tasks against the
  whole pool's, early, midway and late in the run (``flexkit/predicted_pass_rate``; the selector's
  ``target_reward`` as a dashed line when it has one), and for ``frontier`` with ``text_key`` each quantile
  group's predicted against observed pass rate at the end (``.../predicted/<group>``, ``.../pass_rate/<group>``:
  near the diagonal and spread along it when the prompt model ranks the pool), with the validation split's rows
  in the same groups beside them (``.../val_predicted/<group>``, ``.../val_observed/<group>``, for a trainer that
  gives them: out of sample); not drawn for selectors that keep no estimate;
* ``filtering.png`` — the fraction of responses kept by the sample stage and the filter rounds per step
  (``flexkit/sample/kept_fraction``, ``flexkit/sample/filter_rounds``); not drawn without a ``[sample]`` stage;
* ``replay.png`` — the groups and responses ``[replay]`` trained on again per step (``flexkit/replay/groups``,
  ``flexkit/replay/responses``);
* ``floor.png`` — per group, the share of its uniform draws ``frontier``'s floor keeps (``retain``: 0 while the
  group is not learnt) and the share its held-out guard holds (``guard_metric``), from the selectors' summaries
  (``flexkit/selector/<taskset>/floor_share/<group>``, ``.../guard_share/<group>``); not drawn without a floor,
  or while no group was ever learnt.

A panel without data is left out (a figure with none is not written, and ``on_skip`` says why). Each level has
the same colour in every panel; legends sit below their panel, off the data; per-group shares are drawn as one
row per group. The records are read under the current names (:mod:`flexkit._metric_names`; older run folders
included). Values a plot cannot draw (a string where a number belongs, a malformed count table or histogram) are
left out, with a note naming the key (:func:`flexkit.plot._records.drawable_records`); the rest is drawn.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from flexkit._metric_names import (
    EVAL_ACCURACY,
    FILTER_ROUNDS,
    KEPT_FRACTION,
    LEVEL_MIX,
    PREDICTED_PASS_RATE,
    REPLAY_GROUPS,
    REPLAY_RESPONSES,
    RUN_ROLLOUTS,
    TASKSET_MIX,
    VAL_ACCURACY,
)
from flexkit.errors import ConfigError, FlexkitError
from flexkit.plot._groups import draw_calibration, draw_group_shares, group_series
from flexkit.plot._records import drawable_records
from flexkit.run._folder import METRICS_FILE, read_metrics

log = structlog.get_logger("flexkit.plot")

__all__ = ["PLOT_FILES", "TITLE_CHARS_PER_COLUMN", "compact_count", "plot_run", "set_title"]

#: The files :func:`plot_run` may write, in order.
PLOT_FILES: tuple[str, ...] = ("overview.png", "accuracy.png", "mix.png", "pass_rates.png", "filtering.png",
                               "replay.png", "floor.png")

_INSTALL = 'pip install "flexkit-rft[plot]"'


def plot_run(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, *,
             dpi: int = 100, files: Sequence[str] = PLOT_FILES,
             on_skip: Callable[[str], None] | None = None) -> list[Path]:
    """Write those of ``files`` (some of :data:`PLOT_FILES`, default all) the run in ``run_dir`` has data for into
    ``out_dir`` (default ``run_dir/plots``); return their paths. Raises :class:`~flexkit.FlexkitError` without
    matplotlib or without metrics.

    Values the plots cannot draw, and figures without data (``filtering.png: the run has no [sample] stage``), are
    left out; ``on_skip`` is called with a note naming each (default: a logged warning)."""
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

    def skip(note: str) -> None:
        if on_skip is not None:
            on_skip(note)
        else:
            log.warning("left out of the plots", what=note, path=str(run_dir / METRICS_FILE))

    for note in notes:
        skip(note)
    run = _Run(run_dir, records)
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    written = []
    for name in [f for f in PLOT_FILES if f in files]:
        panels = _FIGURES[name]
        drawn = [panel for panel in panels if panel.missing(run) is None]
        if not drawn:
            reasons = dict.fromkeys(str(panel.missing(run)) for panel in panels)
            skip(f"{name}: " + "; ".join(reasons))
            continue
        cols = len(drawn) if len(drawn) <= 3 else 2 if len(drawn) == 4 else 3
        rows = math.ceil(len(drawn) / cols)
        fig = Figure(figsize=(4.2 * cols, 3.3 * rows), layout="constrained")
        axes = list(fig.subplots(rows, cols, squeeze=False).flat)
        for ax, panel in zip(axes, drawn, strict=False):
            panel.draw(ax, run)
        for ax in axes[len(drawn):]:
            ax.remove()
        set_title(fig, f"{run_dir.name}: {run.steps} steps, {run.rollouts:,} rollouts", columns=cols)
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(out / name, dpi=dpi)
        written.append(out / name)
    return written


#: Characters of an 11-point figure title per 4.2-inch panel column (what fits, with a margin).
TITLE_CHARS_PER_COLUMN = 44


def set_title(fig: Any, title: str, *, columns: int) -> None:
    """``title`` over ``fig`` (``columns`` panels wide), wrapped to lines that fit its width (a run folder's name
    and counts overflowed a one-panel figure on both sides); a ``$`` in it is text."""
    fig.suptitle(textwrap.fill(title, width=TITLE_CHARS_PER_COLUMN * columns, break_long_words=True), fontsize=11,
                 parse_math=False)  # a folder name with "$" is text, not matplotlib's math


def compact_count(value: float) -> str:
    """A count as a short tick label: ``0``, ``950``, ``1.5k``, ``100k``, ``1.2M``, ``3G``."""
    rounded = float(f"{value:.3g}")  # 999,999 is 1M, not 1e+03k
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(rounded) >= scale:
            return f"{rounded / scale:g}{suffix}"
    return f"{rounded:g}"


class _Run:
    """The series a run's plots draw, read once from its records."""

    def __init__(self, run_dir: Path, records: Sequence[dict[str, Any]]) -> None:
        self.steps_records = [r for r in records if r["step"] >= 0]
        self.evals = [r for r in records if isinstance(r.get(EVAL_ACCURACY), (int, float))]
        self.steps = len(self.steps_records)
        self.rollouts = int(self.steps_records[-1].get(RUN_ROLLOUTS) or 0) if self.steps_records else 0
        resolved = _resolved(run_dir)
        self.targets = _targets(resolved)
        self.has_sample_stage = _has_sample_stage(resolved, self.steps_records)
        prefixes = (EVAL_ACCURACY + "/", VAL_ACCURACY + "/")
        levels = {k.removeprefix(p) for r in records for k in r for p in prefixes if k.startswith(p)}
        levels |= {str(n) for r in self.steps_records if isinstance(r.get(LEVEL_MIX), dict) for n in r[LEVEL_MIX]}
        #: Every level the run names (evaluations and drawn tasks), in order: each keeps its colour everywhere.
        self.levels = sorted(levels, key=_natural)
        #: Per group: the floor share and the guard's share of the selectors' summaries over the steps.
        self.floor = group_series(self.steps_records, "floor_share")
        self.guard = group_series(self.steps_records, "guard_share")
        #: ``frontier`` with ``text_key``: each quantile group's predicted and observed pass rate over the steps.
        self.predicted = group_series(self.steps_records, "predicted")
        self.observed = group_series(self.steps_records, "pass_rate") if self.predicted else {}
        #: The same groups' predictions of the validation split's rows against those rows' scores
        #: (``.../val_predicted/<group>``, ``.../val_observed/<group>``; a trainer that gives its validation rows).
        self.val_predicted = group_series(self.steps_records, "val_predicted") if self.predicted else {}
        self.val_observed = group_series(self.steps_records, "val_observed") if self.val_predicted else {}

    def level_color(self, level: str) -> Any:
        """The colour of ``level`` in every panel."""
        return _palette(len(self.levels))[self.levels.index(level)]

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


@attrs.frozen
class _Panel:
    """One panel: how to draw it, and why a run has nothing for it (None: it has)."""

    draw: Callable[[Any, _Run], None]
    missing: Callable[[_Run], str | None]


def _natural(name: str) -> tuple[int, float, str]:
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def _resolved(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``resolved.json`` (None when unreadable)."""
    try:
        resolved = json.loads((run_dir / "resolved.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return resolved if isinstance(resolved, dict) else None


def _targets(resolved: dict[str, Any] | None) -> list[float]:
    """The ``target_reward`` of every selector in the run's ``resolved.json`` (none when unreadable)."""
    try:
        configs = [ts["selector"]["config"] for ts in (resolved or {})["tasksets"]]
    except (KeyError, TypeError):
        return []
    return sorted({float(c["target_reward"]) for c in configs
                   if isinstance(c, dict) and isinstance(c.get("target_reward"), (int, float))
                   and not isinstance(c["target_reward"], bool) and math.isfinite(c["target_reward"])})


def _has_sample_stage(resolved: dict[str, Any] | None, records: Sequence[dict[str, Any]]) -> bool:
    """Whether the run had a ``[sample]`` stage: its ``resolved.json`` says so, or (without one) its records hold a
    kept fraction or more than one filter round."""
    if resolved is not None and "sample" in resolved:
        return resolved["sample"] is not None
    return any(KEPT_FRACTION in r or (r.get(FILTER_ROUNDS) or 0) > 1 for r in records)


def _palette(n: int, name: str = "tab10") -> list[Any]:
    """``n`` colours told apart by hue (the qualitative map ``name``; tab20 beyond its colours, then a spaced
    sequential map)."""
    from matplotlib import colormaps

    if n <= colormaps[name].N:
        return [colormaps[name](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * i / (n - 1)) for i in range(n)]


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (shorter at the start), so each point only uses steps up to it."""
    if window <= 1 or values.shape[-1] == 0:
        return values
    csum = np.cumsum(values, axis=-1)
    out = csum.copy()
    out[..., window:] = csum[..., window:] - csum[..., :-window]
    counts = np.minimum(np.arange(1, values.shape[-1] + 1), window)
    return out / counts


def _legend_below(ax: Any, ncols: int) -> None:
    """The panel's legend under its x-axis label, where it hides no data."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=max(1, ncols), frameon=False)


def _count_axis(axis: Any) -> None:
    """Compact labels (``100k``, ``1.2M``) and at most five ticks on a count axis."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    axis.set_major_formatter(FuncFormatter(lambda value, _pos: compact_count(value)))


def _no_evaluations(run: _Run) -> str | None:
    return None if run.evals else "no evaluations: set [run] eval_every > 0"


def _accuracy(ax: Any, run: _Run, by_rollouts: bool) -> None:
    title = f"held-out accuracy vs {'rollouts' if by_rollouts else 'steps'}"
    points = [r for r in run.evals if not by_rollouts or isinstance(r.get(RUN_ROLLOUTS), (int, float))]
    xs = np.array([r[RUN_ROLLOUTS] if by_rollouts else r["step"] + 1 for r in points], dtype=float)
    validated = any(isinstance(r.get(VAL_ACCURACY), (int, float)) for r in points)
    for level in run.levels:
        color = run.level_color(level)
        for key, style, label in ((f"{EVAL_ACCURACY}/{level}", "-", f"level {level}"),
                                  (f"{VAL_ACCURACY}/{level}", "--", None)):
            ys = [r.get(key, np.nan) for r in points]
            if not all(np.isnan(ys)):
                ax.plot(xs, ys, linestyle=style, marker="." if style == "-" else None, color=color,
                        linewidth=1.3 if style == "-" else 1.0, label=label)
    ax.plot(xs, [r[EVAL_ACCURACY] for r in points], color="black", linewidth=2.2, label="all (test)")
    if validated:
        ax.plot(xs, [r.get(VAL_ACCURACY, np.nan) for r in points], color="black", linestyle="--", linewidth=1.2,
                label="dashed: validation")
    ax.set_ylim(-0.02, 1.02)
    if by_rollouts:
        ax.set_xlabel("rollouts (responses generated)")
        _count_axis(ax.xaxis)
    else:
        ax.set_xlabel("steps")
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if not by_rollouts:  # the same colours in the panel beside it; below the axes, off the lines
        _legend_below(ax, ncols=4)


def _accuracy_by_step(ax: Any, run: _Run) -> None:
    _accuracy(ax, run, by_rollouts=False)


def _accuracy_by_rollouts(ax: Any, run: _Run) -> None:
    _accuracy(ax, run, by_rollouts=True)


def _no_rollout_counts(run: _Run) -> str | None:
    if not run.evals:
        return _no_evaluations(run)
    has = any(isinstance(r.get(RUN_ROLLOUTS), (int, float)) for r in run.evals)
    return None if has else f"no {RUN_ROLLOUTS} in the evaluation records"


def _stacked_mix(ax: Any, run: _Run, key: str, title: str, label: str, colors: list[Any]) -> None:
    xs, names, shares = run.mix(key)
    window = max(1, len(xs) // 20)
    ax.stackplot(xs, _smooth(shares, window), labels=[f"{label}{n}" for n in names], colors=colors, alpha=0.85)
    if len(xs) > 1:
        ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(0, 1)
    ax.set_xlabel("steps")
    ax.set_ylabel("share of drawn tasks")
    ax.set_title(title + (f" (mean of {window} steps)" if window > 1 else ""), fontsize=10)
    _legend_below(ax, ncols=min(3, len(names)))  # three a row: the labels fit a single panel's width


def _taskset_mix(ax: Any, run: _Run) -> None:
    names = run.mix(TASKSET_MIX)[1]
    _stacked_mix(ax, run, TASKSET_MIX, "taskset mix", "", _palette(len(names), "Dark2"))


def _one_taskset(run: _Run) -> str | None:
    names = run.mix(TASKSET_MIX)[1]
    if len(names) >= 2:
        return None
    return f"one taskset ({names[0]})" if names else f"no {TASKSET_MIX} in the metrics"


def _level_mix(ax: Any, run: _Run) -> None:
    names = run.mix(LEVEL_MIX)[1]
    _stacked_mix(ax, run, LEVEL_MIX, "level mix", "level ", [run.level_color(n) for n in names])


def _one_level(run: _Run) -> str | None:
    names = run.mix(LEVEL_MIX)[1]
    if len(names) >= 2:
        return None
    return f"every drawn task has level {names[0]}" if names else "the drawn tasks' rows carry no integer 'level'"


def _pass_rates(ax: Any, run: _Run, part: slice, when: str) -> None:
    found = run.histograms(part)
    if found is None:  # drawn only for a run with histograms (_no_estimates)
        return
    selected, pool, steps = found
    width = 1.0 / len(pool)
    centers = (np.arange(len(pool)) + 0.5) * width
    ax.bar(centers, pool / max(pool.sum(), 1.0), width=width, color="0.82", edgecolor="0.55", label="pool")
    ax.bar(centers, selected / max(selected.sum(), 1.0), width=width * 0.55, color="0.3", alpha=0.9,
           label="drawn tasks")
    for target in run.targets:
        ax.axvline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("selector's estimate before the step")
    ax.set_ylabel("share")
    ax.set_title(f"predicted pass rates, {when} ({steps})", fontsize=10)
    ax.legend(fontsize=7, loc="best")


def _no_estimates(run: _Run) -> str | None:
    if run.histograms(slice(None)) is not None:
        return None
    return ("the selectors keep no pass-rate estimate (random, shuffle, ...); difficulty_based, learnability and "
            "thompson_target do")


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


def _line(ax: Any, run: _Run, key: str, title: str, ylabel: str, *,
          ylim: tuple[float, float] | None = None) -> None:
    xs, ys = run.series(key)
    window = max(1, len(xs) // 40)
    ax.plot(xs, ys, color="0.75", linewidth=0.8, label="per step")
    if window > 1:
        ax.plot(xs, _smooth(ys, window), color="black", linewidth=1.6, label=f"mean of {window} steps")
        ax.legend(fontsize=7, loc="best")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel("steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def _sample_series(key: str) -> Callable[[_Run], str | None]:
    def missing(run: _Run) -> str | None:
        if not run.has_sample_stage:
            return "the run has no [sample] stage"
        return None if len(run.series(key)[0]) else f"no {key} in the metrics"
    return missing


def _kept_fraction(ax: Any, run: _Run) -> None:
    _line(ax, run, KEPT_FRACTION, "kept fraction (sample stage)", "kept responses / generated", ylim=(-0.02, 1.02))


def _filter_rounds(ax: Any, run: _Run) -> None:
    _line(ax, run, FILTER_ROUNDS, "filter rounds per step", "rollout rounds")


def _replay_series(key: str) -> Callable[[_Run], str | None]:
    def missing(run: _Run) -> str | None:
        return None if len(run.series(key)[0]) else "the run has no [replay]"
    return missing


def _replay_groups(ax: Any, run: _Run) -> None:
    _line(ax, run, REPLAY_GROUPS, "replayed groups per step ([replay])", "groups trained on again")


def _replay_responses(ax: Any, run: _Run) -> None:
    _line(ax, run, REPLAY_RESPONSES, "replayed responses per step ([replay])", "responses trained on again")
    _count_axis(ax.yaxis)


def _floor_shares(ax: Any, run: _Run) -> None:
    draw_group_shares(ax, run.floor, "floor per group (selector's retain)", "share of its uniform draws kept")


def _no_floor(run: _Run) -> str | None:
    if not run.floor:
        return "the selectors keep no floor (frontier's retain)"
    if not any((ys > 0).any() for _xs, ys in run.floor.values()):
        return "no group was learnt: the floor was never used"
    return None


def _guard_shares(ax: Any, run: _Run) -> None:
    draw_group_shares(ax, run.guard, "held-out guard's share per group", "share of the floor it allows")


def _no_guard(run: _Run) -> str | None:
    return None if run.guard else "the selectors have no held-out guard (frontier's guard_metric)"


def _calibration(ax: Any, run: _Run) -> None:
    draw_calibration(ax, run.predicted, run.observed, run.val_predicted, run.val_observed)


def _no_prompt_model(run: _Run) -> str | None:
    return None if run.predicted else "the selectors have no pass-rate model over the prompts (frontier's text_key)"


_ACCURACY = [_Panel(_accuracy_by_step, _no_evaluations), _Panel(_accuracy_by_rollouts, _no_rollout_counts)]
_MIX = [_Panel(_taskset_mix, _one_taskset), _Panel(_level_mix, _one_level)]
_KEPT = _Panel(_kept_fraction, _sample_series(KEPT_FRACTION))
_REPLAY = _Panel(_replay_groups, _replay_series(REPLAY_GROUPS))
_FLOOR = _Panel(_floor_shares, _no_floor)
#: The panels of each file, in order.
_FIGURES: dict[str, list[_Panel]] = {
    "overview.png": [*_ACCURACY, *_MIX, _Panel(_pass_rates_late, _no_estimates), _KEPT, _REPLAY, _FLOOR],
    "accuracy.png": _ACCURACY,
    "mix.png": _MIX,
    "pass_rates.png": [*(_Panel(panel, _no_estimates) for panel in (_pass_rates_early, _pass_rates_middle,
                                                                      _pass_rates_late)),
                       _Panel(_calibration, _no_prompt_model)],
    "filtering.png": [_KEPT, _Panel(_filter_rounds, _sample_series(FILTER_ROUNDS))],
    "replay.png": [_REPLAY, _Panel(_replay_responses, _replay_series(REPLAY_RESPONSES))],
    "floor.png": [_FLOOR, _Panel(_guard_shares, _no_guard)],
}
