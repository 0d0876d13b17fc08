"""``flexkit compare`` reports: the results, cost and compute-to-target tables, ``results.md``, ``results.json``,
the accuracy plot and the progress lines (the per-level plot is :mod:`flexkit.compare._level_plot`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from flexkit.compare._plot_parts import band, legend_label, say, thousands_axis
from flexkit.compare._results import ReportInfo, RunOutcome, SettingResult
from flexkit.compare._statistics import (
    FORGETTING_MARGIN,
    FORGETTING_MEASURES,
    MIN_INTERVAL_VALUES,
    interpolated_curve,
    mean_curve,
    reported_interval,
)

__all__ = ["compute_rows", "cost_rows", "level_shares", "render_compute_table", "render_cost_table", "render_markdown",
           "render_table", "say", "summary_rows", "trained_per_rollout", "write_plot", "write_reports"]

#: What a table cell reads from each run: one of :class:`RunOutcome`'s fields.
Measure = Callable[[RunOutcome], Any]


def _fmt(values: Sequence[float], digits: int = 3, thousands: bool = False, *, count: bool = True) -> str:
    """``mean ± half-width`` from :data:`MIN_INTERVAL_VALUES` values on; below that the mean, with ``(n=2)``
    for two values unless ``count`` is off (the cell names its count another way)."""
    mean, half = reported_interval(values)
    spec = f",.{digits}f" if thousands else f".{digits}f"
    if half is not None:
        return f"{mean:{spec}} ± {half:{spec}}"
    return f"{mean:{spec}}" + (f" (n={len(values)})" if count and len(values) > 1 else "")


def _levels(results: Sequence[SettingResult]) -> list[str]:
    keys: list[str] = []
    for res in results:
        for r in res.runs:
            keys += [k for k in r.final if k.startswith("eval_accuracy/") and k not in keys]
    return keys


def _values(res: SettingResult, measure: Measure, index: int | None = None) -> list[Any]:
    """The runs' non-``None`` values of ``measure`` (item ``index`` of it when given)."""
    picked = [measure(r) if index is None else _item(measure(r), index) for r in res.runs]
    return [v for v in picked if v is not None]


def _item(values: Sequence[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def _reached(res: SettingResult, measure: Measure = lambda r: r.steps_to_target,
             index: int | None = None) -> tuple[list[Any], str]:
    values = _values(res, measure, index)
    n = len(res.runs)
    return values, "" if len(values) == n else f" ({len(values)}/{n} reached)"


def _cell(res: SettingResult, measure: Measure, digits: int, thousands: bool = False, index: int | None = None) -> str:
    if not res.runs:
        return "–"
    values, note = _reached(res, measure, index)
    if not values:
        return f"not reached (0/{len(res.runs)})"
    return _fmt(values, digits, thousands=thousands, count=not note) + note


def _targets_and_budgets(results: Sequence[SettingResult]) -> tuple[int, int]:
    """How many targets and budgets the runs were measured against."""
    runs = [r for res in results for r in res.runs]
    return (max((len(r.steps_to_targets) for r in runs), default=0),
            max((len(r.accuracy_at_budgets) for r in runs), default=0))


def summary_rows(results: Sequence[SettingResult], targets: Sequence[float] = (),
                 budgets: Sequence[int] = ()) -> tuple[list[str], list[list[str]]]:
    """The results table: header and one row per setting (strings).

    With one target and one budget (or none given) the columns are "accuracy at budget", "rollouts to target"
    and "steps to target"; with several, one column per budget ("accuracy at 400,000") and per target
    ("rollouts to 0.3", "steps to 0.3"). A "failed" column appears when a run did not finish.
    """
    levels = _levels(results)
    several = len(targets) > 1 or len(budgets) > 1
    # (header, (what each run gives, index into it or None))
    budget_cols: list[tuple[str, tuple[Measure, int | None]]]
    rollout_cols: list[tuple[str, tuple[Measure, int | None]]]
    step_cols: list[tuple[str, tuple[Measure, int | None]]]
    if several:
        budget_cols = [(f"accuracy at {b:,}", (lambda r: r.accuracy_at_budgets, i)) for i, b in enumerate(budgets)]
        rollout_cols = [(f"rollouts to {t:g}", (lambda r: r.rollouts_to_targets, i)) for i, t in enumerate(targets)]
        step_cols = [(f"steps to {t:g}", (lambda r: r.steps_to_targets, i)) for i, t in enumerate(targets)]
    else:
        budget_cols = [("accuracy at budget", (lambda r: r.accuracy_at_budget, None))]
        rollout_cols = [("rollouts to target", (lambda r: r.rollouts_to_target, None))]
        step_cols = [("steps to target", (lambda r: r.steps_to_target, None))]
    failed = any(res.failures for res in results)
    header = ["setting", "final accuracy", *[c for c, _ in budget_cols], *[c for c, _ in rollout_cols],
              *[c for c, _ in step_cols], "seconds per run", *[f"level {k.split('/', 1)[1]}" for k in levels],
              *(["failed"] if failed else [])]
    rows = []
    for res in results:
        row = [res.setting.name, _fmt([r.final["eval_accuracy"] for r in res.runs]) if res.runs else "–"]
        row += [_cell(res, measure, 3, index=i) for _, (measure, i) in budget_cols]
        row += [_cell(res, measure, 0, thousands=True, index=i) for _, (measure, i) in rollout_cols]
        row += [_cell(res, measure, 0, index=i) for _, (measure, i) in step_cols]
        row.append(_fmt([r.seconds for r in res.runs], 0) if res.runs else "–")
        for key in levels:
            values = [r.final[key] for r in res.runs if key in r.final]
            row.append(_fmt(values) if values else "–")
        if failed:
            row.append(f"{len(res.failures)}/{len(res.runs) + len(res.failures)}")
        rows.append(row)
    return header, rows


#: The cost table's columns: header and what each shows of a run.
_COST_COLUMNS: tuple[tuple[str, Measure], ...] = (
    ("steps", lambda r: r.steps), ("optimizer steps", lambda r: r.optimizer_steps),
    ("trained samples", lambda r: r.trained_samples), ("rollouts", lambda r: r.rollouts),
    ("seconds", lambda r: r.seconds))


def trained_per_rollout(res: SettingResult) -> float | None:
    """The setting's trained samples per rollout over the whole runs: all its runs' trained samples (replayed ones
    included) over all their rollouts (``None`` without a rollout)."""
    rollouts = sum(r.rollouts for r in res.runs)
    return sum(r.trained_samples for r in res.runs) / rollouts if rollouts else None


def cost_rows(results: Sequence[SettingResult]) -> tuple[list[str], list[list[str]]]:
    """The cost table: per setting, the mean per run of steps, optimizer steps, trained samples (samples that
    entered the loss), rollouts generated and wall seconds, and the trained samples per rollout
    (:func:`trained_per_rollout`)."""
    header = ["setting", *[name for name, _ in _COST_COLUMNS], "trained samples per rollout"]
    rows = []
    for res in results:
        ratio = trained_per_rollout(res)
        rows.append([res.setting.name, *[_fmt([float(measure(r)) for r in res.runs], 0, thousands=True)
                                         if res.runs else "–" for _, measure in _COST_COLUMNS],
                     f"{ratio:.2f}" if ratio is not None else "–"])
    return header, rows


#: The compute-to-target table's columns per target: header, what each shows of a run (a list per target), digits
#: and whether thousands are separated.
_COMPUTE_COLUMNS: tuple[tuple[str, Measure, int, bool], ...] = (
    ("rollouts", lambda r: r.rollouts_to_targets, 0, True),
    ("trained samples", lambda r: r.trained_samples_to_targets, 0, True),
    ("optimizer steps", lambda r: r.optimizer_steps_to_targets, 0, False),
    ("seconds", lambda r: r.seconds_to_targets, 1, False))


def compute_rows(results: Sequence[SettingResult], targets: Sequence[float] = ()) -> tuple[list[str], list[list[str]]]:
    """The compute-to-target table: per setting and target, the rollouts, trained samples, optimizer steps and
    wall seconds at the first evaluation reaching it, over the runs that reached it (see :func:`_target_cell`).
    With one target (or none given) the columns are "rollouts to target", ...; with several, "rollouts to 0.3",
    ... for each target in turn."""
    names = [f"to {t:g}" for t in targets] if len(targets) > 1 else ["to target"]
    header = ["setting", *[f"{what} {name}" for name in names for what, *_ in _COMPUTE_COLUMNS]]
    rows = [[res.setting.name, *[_target_cell(res, measure, i, digits, thousands)
                                 for i in range(len(names)) for _, measure, digits, thousands in _COMPUTE_COLUMNS]]
            for res in results]
    return header, rows


def _target_cell(res: SettingResult, measure: Measure, index: int, digits: int, thousands: bool) -> str:
    """Item ``index`` of ``measure`` over the runs that reached target ``index`` (``rollouts_to_targets``), as
    :func:`_cell` shows it ("k/n reached" when not all did); "not logged" when none of them holds a value (the
    seconds of run folders from before ``flexkit/run/seconds``), "k logged" when only some do."""
    if not res.runs:
        return "–"
    n = len(res.runs)
    reached = [r for r in res.runs if _item(r.rollouts_to_targets, index) is not None]
    if not reached:
        return f"not reached (0/{n})"
    values = [v for v in (_item(measure(r), index) for r in reached) if v is not None]
    if not values:
        return "not logged"
    notes = [f"{len(reached)}/{n} reached"] if len(reached) < n else []
    notes += [f"{len(values)} logged"] if len(values) < len(reached) else []
    return _fmt(values, digits, thousands=thousands, count=not notes) + (f" ({', '.join(notes)})" if notes else "")


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_table(results: Sequence[SettingResult], targets: Sequence[float] = (),
                 budgets: Sequence[int] = ()) -> str:
    """The results as a markdown table (see :func:`summary_rows`)."""
    return _markdown_table(*summary_rows(results, targets, budgets))


def render_cost_table(results: Sequence[SettingResult]) -> str:
    """The cost per run as a markdown table (see :func:`cost_rows`)."""
    return _markdown_table(*cost_rows(results))


def render_compute_table(results: Sequence[SettingResult], targets: Sequence[float] = ()) -> str:
    """The compute to each target as a markdown table (see :func:`compute_rows`)."""
    return _markdown_table(*compute_rows(results, targets))


def render_markdown(results: Sequence[SettingResult], info: ReportInfo, *, plot: Path | None,
                    out_dir: Path | None = None, level_plot: Path | None = None) -> str:
    """``results.md``: command, pipeline, seeds, targets, budgets, the results, cost and compute-to-target tables,
    the settings' overrides, failed runs, the plots and (with ``out_dir``, where the markdown goes) links to each run's
    ``plots/overview.png``."""
    n = len(info.seeds)
    targets, budgets = list(info.targets) or [info.target], list(info.budgets) or [info.budget]
    several = len(targets) > 1 or len(budgets) > 1
    lines = [
        f"# flexkit compare: {Path(info.path).name}", "",
        "```sh", info.command, "```", "",
        f"- pipeline: `{info.path}`",
        f"- seeds: {', '.join(map(str, info.seeds))} ({n} per setting; {len(results) * n} runs, "
        f"{info.seconds:.0f} s)",
        f"- target eval accuracy: {info.rule}" if len(targets) == 1 else
        f"- target eval accuracies: {', '.join(f'{t:g}' for t in targets)} (--target)",
        f"- rollout budget: {info.budget_rule}" if len(budgets) == 1 else
        f"- rollout budgets: {', '.join(f'{b:,}' for b in budgets)} (--budget)",
        f"- cells: mean ± half-width of the 95% Student-t interval over seeds, from {MIN_INTERVAL_VALUES} "
        f"values on; with fewer, the mean (and n=2 for two values: no interval is shown)",
        "- rollouts: responses generated, refills included, counted by the run "
        "(`flexkit/run/rollouts` in metrics.jsonl); "
        f"rollouts / steps to {'each target' if several else 'target'}: at the first evaluation at or above it "
        f"(resolution: `[run] eval_every`); accuracy at {'each budget' if several else 'budget'}: the last "
        "evaluation at or before it (a run that stopped before it counts as not reached); \"not reached (k/n)\": "
        "k of the n finished runs got there; seconds per run: wall clock", "",
        render_table(results, targets, budgets), "",
        "Cost per run (mean over the finished runs; trained samples: responses that entered the loss, after any "
        "filter, replayed ones included; optimizer steps: steps whose update trained on at least one sample; "
        "trained samples per rollout: all the setting's trained samples over all its rollouts):", "",
        render_cost_table(results), "",
        f"Compute to {'each target' if several else 'target'} (at the first evaluation at or above it, over the runs "
        "that reached it: the rollouts generated, samples trained on and optimizer steps by then, and the run's wall "
        "seconds then, `flexkit/run/seconds` in metrics.jsonl, from the start of its step loop; \"not logged\": a "
        "run folder from before that record):", "",
        render_compute_table(results, targets), "",
        *_forgetting_lines(results),
        *_draw_lines(results),
        "Settings:", "",
    ]
    for res in results:
        ovs = ", ".join(f"`{ov.key} = {_toml(ov.value)}`" for ov in res.setting.overrides) or "the file as is"
        lines.append(f"- **{res.setting.name}**: {ovs}")
    lines += _failure_lines(results)
    if plot is not None:
        lines += ["", f"![eval accuracy vs step and vs rollouts]({plot.name})"]
    if level_plot is not None:
        lines += ["", f"![eval accuracy per level vs rollouts]({level_plot.name})"]
    lines += _run_plot_links(results, out_dir)
    return "\n".join(lines) + "\n"


def _forgetting_lines(results: Sequence[SettingResult]) -> list[str]:
    """Per setting and level, the worst run's value of each of :data:`FORGETTING_MEASURES`: the largest drop of
    held-out accuracy below its best earlier value (dips that recover included), how far the level ends below its
    best (forgetting that lasts), and the share of evaluations it spends more than :data:`FORGETTING_MARGIN` below
    its best so far; nothing without per-level evaluations."""
    levels = _levels(results)
    if not levels:
        return []
    header = ["setting", "drop", *[f"level {key.split('/', 1)[1]}" for key in levels]]
    rows = []
    for res in results:
        for _, measure, label in FORGETTING_MEASURES:
            cells = []
            for key in levels:
                drops = [measure(r.level_curves[key]) for r in res.runs if key in r.level_curves]
                cells.append(f"{max(drops):.3f}" if drops else "–")
            rows.append([res.setting.name, label, *cells])
    return ["Forgetting: per level, the largest drop of held-out accuracy below its best earlier value (a dip that "
            "recovers counts), how far it ends below its best, and the share of evaluations at which it is more than "
            f"{FORGETTING_MARGIN} below its best so far (a slide that lasts), worst run:",
            "", _markdown_table(header, rows), ""]


def level_shares(runs: Sequence[RunOutcome]) -> dict[str, float]:
    """Each level's share of the tasks ``runs`` drew, all runs together (levels in numeric order; empty when no
    run logged a level mix)."""
    totals: dict[str, int] = {}
    for run in runs:
        for level, count in run.level_draws.items():
            totals[level] = totals.get(level, 0) + count
    whole = sum(totals.values())
    if not whole:
        return {}
    return {level: totals[level] / whole for level in sorted(totals, key=_level_order)}


def _level_order(level: str) -> tuple[int, int, str]:
    """Sort key: integer levels in numeric order, then any other label alphabetically."""
    return (0, int(level), "") if level.lstrip("-").isdigit() else (1, 0, level)


def _draw_lines(results: Sequence[SettingResult]) -> list[str]:
    """Per setting, each level's share of the tasks drawn (:func:`level_shares`); nothing when no run logged a
    level mix."""
    shares = {res.setting.name: level_shares(res.runs) for res in results}
    levels = list(dict.fromkeys(level for table in shares.values() for level in table))
    if not levels:
        return []
    rows = [[name, *[f"{table[level]:.1%}" if level in table else "–" for level in levels]]
            for name, table in shares.items()]
    return ["Where the draws went: each level's share of the tasks drawn, all runs of a setting together:", "",
            _markdown_table(["setting", *[f"level {level}" for level in levels]], rows), ""]


def _failure_lines(results: Sequence[SettingResult]) -> list[str]:
    """The "Failed runs" section: each failed run's setting, seed, exit status and the end of its stderr."""
    failed = [(res.setting.name, f) for res in results for f in res.failures]
    if not failed:
        return []
    lines = ["", f"Failed runs ({len(failed)}; not in the tables; the same command runs them again and "
                 "reuses the finished ones):", ""]
    for name, f in failed:
        status = "unknown" if f.exit_status is None else str(f.exit_status)
        lines += [f"- **{name}** seed {f.seed} (`{f.run_dir}`): exit status {status}", "", "  ```text",
                  *[f"  {line}" for line in f.stderr_tail.splitlines()], "  ```"]
    return lines


def _run_plot_links(results: Sequence[SettingResult], out_dir: Path | None) -> list[str]:
    """One line per setting linking each seed's ``plots/overview.png`` (runs without one are left out)."""
    if out_dir is None:
        return []
    lines = []
    for res in results:
        links = [f"[seed {r.seed}]({Path(os.path.relpath(r.run_dir / 'plots' / 'overview.png', out_dir)).as_posix()})"
                 for r in res.runs if (r.run_dir / "plots" / "overview.png").is_file()]
        if links:
            lines.append(f"- **{res.setting.name}**: {', '.join(links)}")
    if not lines:
        return []
    return ["", "Each run's plots (accuracy per level, task and level mix, predicted pass rates, kept fraction; "
                "`flexkit plot RUN_DIR` draws them larger, one file per topic):", "", *lines]


def _toml(value: Any) -> str:
    """A TOML rendering of an override value, for display."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _summary(values: Sequence[float]) -> dict[str, Any] | None:
    """``{"mean", "ci95", "n", "values"}`` (``ci95`` is ``None`` below :data:`MIN_INTERVAL_VALUES` values);
    ``None`` without values."""
    if not values:
        return None
    mean, half = reported_interval(values)
    return {"mean": mean, "ci95": half, "n": len(values), "values": list(values)}


def _json_run(r: RunOutcome) -> dict[str, Any]:
    return {"seed": r.seed, "run_dir": str(r.run_dir), "seconds": r.seconds, "final": r.final,
            "steps_to_target": r.steps_to_target, "rollouts_to_target": r.rollouts_to_target,
            "accuracy_at_budget": r.accuracy_at_budget, "rollouts": r.rollouts, "steps": r.steps,
            "optimizer_steps": r.optimizer_steps, "trained_samples": r.trained_samples,
            "steps_to_targets": r.steps_to_targets, "rollouts_to_targets": r.rollouts_to_targets,
            "accuracy_at_budgets": r.accuracy_at_budgets, "trained_samples_to_targets": r.trained_samples_to_targets,
            "optimizer_steps_to_targets": r.optimizer_steps_to_targets, "seconds_to_targets": r.seconds_to_targets,
            "curve": r.curve, "rollout_curve": r.rollout_curve,
            "level_curves": r.level_curves, "level_draws": r.level_draws,
            **{name: {key: measure(curve) for key, curve in r.level_curves.items()}
               for name, measure, _ in FORGETTING_MEASURES}}


def _json_results(results: Sequence[SettingResult], info: ReportInfo) -> dict[str, Any]:
    """``results.json``: ``info``'s keys, ``settings`` and ``failed`` (documented in docs/results.md)."""
    out: dict[str, Any] = {**attrs.asdict(info), "settings": [], "failed": []}
    targets, budgets = list(info.targets) or [info.target], list(info.budgets) or [info.budget]
    for res in results:
        steps, _ = _reached(res)
        n = len(res.runs)
        finals = {key: _summary([r.final[key] for r in res.runs if key in r.final])
                  for key in ["eval_accuracy", *_levels([res])]}
        failed = [{"setting": res.setting.name, "seed": f.seed, "run_dir": str(f.run_dir),
                   "exit_status": f.exit_status, "stderr_tail": f.stderr_tail} for f in res.failures]
        out["failed"] += failed
        out["settings"].append({
            "name": res.setting.name,
            "spec": res.setting.spec,
            "overrides": {ov.key: ov.value for ov in res.setting.overrides},
            "rollouts_per_step": res.rollouts_per_step,
            "final": finals,
            "steps_to_target": _summary(steps),
            "rollouts_to_target": _summary(_reached(res, lambda r: r.rollouts_to_target)[0]),
            "accuracy_at_budget": _summary(_reached(res, lambda r: r.accuracy_at_budget)[0]),
            "seconds": _summary([r.seconds for r in res.runs]),
            "reached": f"{len(steps)}/{n}",
            "targets": [{"target": t, "steps": _summary(_values(res, lambda r: r.steps_to_targets, i)),
                         "rollouts": _summary(_values(res, lambda r: r.rollouts_to_targets, i)),
                         "trained_samples": _summary(_values(res, lambda r: r.trained_samples_to_targets, i)),
                         "optimizer_steps": _summary(_values(res, lambda r: r.optimizer_steps_to_targets, i)),
                         "seconds": _summary(_values(res, lambda r: r.seconds_to_targets, i)),
                         "reached": f"{len(_values(res, lambda r: r.rollouts_to_targets, i))}/{n}"}
                        for i, t in enumerate(targets)],
            "budgets": [{"budget": b, "accuracy": _summary(_values(res, lambda r: r.accuracy_at_budgets, i)),
                         "reached": f"{len(_values(res, lambda r: r.accuracy_at_budgets, i))}/{n}"}
                        for i, b in enumerate(budgets)],
            "steps": _summary([r.steps for r in res.runs]),
            "optimizer_steps": _summary([r.optimizer_steps for r in res.runs]),
            "trained_samples": _summary([r.trained_samples for r in res.runs]),
            "rollouts": _summary([r.rollouts for r in res.runs]),
            "trained_samples_per_rollout": trained_per_rollout(res),
            **{name: {key: max((measure(r.level_curves[key]) for r in res.runs if key in r.level_curves),
                                default=None) for key in _levels([res])}
               for name, measure, _ in FORGETTING_MEASURES},
            "level_shares": level_shares(res.runs),
            "finished": n,
            "failed": failed,
            "runs": [_json_run(r) for r in res.runs],
        })
    return out


def write_plot(
    results: Sequence[SettingResult],
    target: float | Sequence[float],
    path: Path,
    *,
    title: str = "",
    progress: IO[str] | None = sys.stderr,
    dpi: int = 120,
) -> Path | None:
    """Plot mean eval accuracy per setting with a 95% band (settings with at least :data:`MIN_INTERVAL_VALUES`
    runs), against steps (left) and against rollouts (right), with a dashed line at each target; ``None`` (and a
    note) without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        say(progress, 'note: accuracy.png skipped: matplotlib is not installed (pip install "flexkit-rft[plot]")')
        return None
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    by_step, by_rollouts = fig.subplots(1, 2, sharey=True)
    for res in results:
        if not res.runs:
            continue
        label = legend_label(res.setting.name, len(res.runs))
        shade = len(res.runs) >= MIN_INTERVAL_VALUES
        color = band(by_step, *mean_curve(res.runs), label=label, shade=shade)
        band(by_rollouts, *interpolated_curve(res.runs), label=label, color=color, shade=shade)
    for ax, xlabel in ((by_step, "step"), (by_rollouts, "rollouts (responses generated)")):
        for i, line in enumerate([target] if isinstance(target, float | int) else target):
            ax.axhline(line, color="0.4", linestyle="--", linewidth=1,
                       label=f"target {line:.3f}" if i == 0 else f"{line:.3f}")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    thousands_axis(by_rollouts.xaxis)
    by_step.set_ylabel("held-out eval accuracy")
    by_rollouts.legend(loc="lower right")
    fig.suptitle(f"{title}: mean over seeds, shaded 95% interval" if title else "mean over seeds, 95% interval")
    fig.savefig(path, dpi=dpi)
    return path


def write_reports(
    results: Sequence[SettingResult], out_dir: Path, info: ReportInfo, *, progress: IO[str] | None
) -> tuple[str, Path | None, Path | None]:
    """Write ``accuracy.png``, ``levels.png``, ``results.md`` and ``results.json`` into ``out_dir``; return the
    markdown and the plots' paths (``None`` without matplotlib, or without per-level evaluations)."""
    from flexkit.compare._level_plot import write_level_plot

    out_dir.mkdir(parents=True, exist_ok=True)
    plot = write_plot(results, list(info.targets) or info.target, out_dir / "accuracy.png",
                      title=Path(info.path).name, progress=progress)
    level_plot = write_level_plot(results, out_dir / "levels.png", title=Path(info.path).name, progress=progress)
    markdown = render_markdown(results, info, plot=plot, out_dir=out_dir, level_plot=level_plot)
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    (out_dir / "results.json").write_text(json.dumps(_json_results(results, info), indent=2) + "\n", encoding="utf-8")
    return markdown, plot, level_plot
