"""``flexkit compare`` reports: the results table, ``results.md``, ``results.json``, the accuracy plot and the
progress lines."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from flexkit.compare.results import ReportInfo, SettingResult
from flexkit.compare.statistics import interpolated_curve, mean_curve, mean_interval

__all__ = ["render_markdown", "render_table", "say", "summary_rows", "write_plot", "write_reports"]


def say(stream: IO[str] | None, text: str) -> None:
    """Write one progress line to ``stream`` (nothing when it is ``None``)."""
    if stream is not None:
        stream.write(text + "\n")
        stream.flush()


def _fmt(values: Sequence[float], digits: int = 3, thousands: bool = False) -> str:
    mean, half = mean_interval(values)
    spec = f",.{digits}f" if thousands else f".{digits}f"
    return f"{mean:{spec}}" if half is None else f"{mean:{spec}} ± {half:{spec}}"


def _levels(results: Sequence[SettingResult]) -> list[str]:
    keys: list[str] = []
    for res in results:
        for r in res.runs:
            keys += [k for k in r.final if k.startswith("eval_accuracy/") and k not in keys]
    return keys


def _reached(res: SettingResult, attr: str = "steps_to_target") -> tuple[list[int], str]:
    values = [getattr(r, attr) for r in res.runs if getattr(r, attr) is not None]
    n = len(res.runs)
    return values, "" if len(values) == n else f" ({len(values)}/{n} reached)"


def _cell(res: SettingResult, attr: str, digits: int, thousands: bool = False) -> str:
    values, note = _reached(res, attr)
    return _fmt(values, digits, thousands=thousands) + note if values else f"not reached (0/{len(res.runs)})"


def summary_rows(results: Sequence[SettingResult]) -> tuple[list[str], list[list[str]]]:
    """The results table: header and one row per setting (strings)."""
    levels = _levels(results)
    header = ["setting", "final accuracy", "accuracy at budget", "rollouts to target", "steps to target",
              "seconds per run", *[f"level {k.split('/', 1)[1]}" for k in levels]]
    rows = []
    for res in results:
        row = [res.setting.name, _fmt([r.final["eval_accuracy"] for r in res.runs]),
               _cell(res, "accuracy_at_budget", 3), _cell(res, "rollouts_to_target", 0, thousands=True),
               _cell(res, "steps_to_target", 0), _fmt([r.seconds for r in res.runs], 0)]
        for key in levels:
            values = [r.final[key] for r in res.runs if key in r.final]
            row.append(_fmt(values) if values else "–")
        rows.append(row)
    return header, rows


def render_table(results: Sequence[SettingResult]) -> str:
    """The results as a markdown table."""
    header, rows = summary_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(results: Sequence[SettingResult], info: ReportInfo, *, plot: Path | None,
                    out_dir: Path | None = None) -> str:
    """``results.md``: command, pipeline, seeds, target, the table, the settings' overrides, the plot and (with
    ``out_dir``, where the markdown goes) links to each run's ``plots/overview.png``."""
    n = len(info.seeds)
    lines = [
        f"# flexkit compare: {Path(info.path).name}", "",
        "```sh", info.command, "```", "",
        f"- pipeline: `{info.path}`",
        f"- seeds: {', '.join(map(str, info.seeds))} ({n} per setting; {len(results) * n} runs, "
        f"{info.seconds:.0f} s)",
        f"- target eval accuracy: {info.rule}",
        f"- rollout budget: {info.budget_rule}",
        "- cells: mean ± half-width of the 95% Student-t interval over seeds" + (" (one seed: no interval)"
                                                                                  if n == 1 else ""),
        "- rollouts: responses generated, refills included, counted by the run (`rollouts` in metrics.jsonl); "
        "rollouts / steps to target: at the first evaluation at or above the target (resolution: `[run] "
        "eval_every`); accuracy at budget: the last evaluation at or before the budget (a run that stopped "
        "before it counts as not reached); seconds per run: wall clock", "",
        render_table(results), "",
        "Settings:", "",
    ]
    for res in results:
        ovs = ", ".join(f"`{ov.key} = {_toml(ov.value)}`" for ov in res.setting.overrides) or "the file as is"
        lines.append(f"- **{res.setting.name}**: {ovs}")
    if plot is not None:
        lines += ["", f"![eval accuracy vs step and vs rollouts]({plot.name})"]
    lines += _run_plot_links(results, out_dir)
    return "\n".join(lines) + "\n"


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


def _json_results(results: Sequence[SettingResult], info: ReportInfo) -> dict[str, Any]:
    out: dict[str, Any] = {**attrs.asdict(info), "settings": []}

    def summary(values: Sequence[float]) -> dict[str, Any] | None:
        if not values:
            return None
        mean, half = mean_interval(values)
        return {"mean": mean, "ci95": half, "n": len(values)}

    for res in results:
        steps, _ = _reached(res)

        finals = {key: summary([r.final[key] for r in res.runs if key in r.final])
                  for key in ["eval_accuracy", *_levels([res])]}
        out["settings"].append({
            "name": res.setting.name,
            "spec": res.setting.spec,
            "overrides": {ov.key: ov.value for ov in res.setting.overrides},
            "rollouts_per_step": res.rollouts_per_step,
            "final": finals,
            "steps_to_target": summary(steps),
            "rollouts_to_target": summary(_reached(res, "rollouts_to_target")[0]),
            "accuracy_at_budget": summary(_reached(res, "accuracy_at_budget")[0]),
            "seconds": summary([r.seconds for r in res.runs]),
            "reached": f"{len(steps)}/{len(res.runs)}",
            "runs": [{"seed": r.seed, "run_dir": str(r.run_dir), "seconds": r.seconds, "final": r.final,
                      "steps_to_target": r.steps_to_target, "rollouts_to_target": r.rollouts_to_target,
                      "accuracy_at_budget": r.accuracy_at_budget, "rollouts": r.rollouts, "curve": r.curve,
                      "rollout_curve": r.rollout_curve} for r in res.runs],
        })
    return out


def write_plot(
    results: Sequence[SettingResult],
    target: float,
    path: Path,
    *,
    title: str = "",
    progress: IO[str] | None = sys.stderr,
) -> Path | None:
    """Plot mean eval accuracy per setting with a 95% band, against steps (left) and against rollouts (right);
    ``None`` (and a note) without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        say(progress, 'note: accuracy.png skipped: matplotlib is not installed (pip install "flexkit-rft[plot]")')
        return None
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    by_step, by_rollouts = fig.subplots(1, 2, sharey=True)
    for res in results:
        label = f"{res.setting.name} (n={len(res.runs)})"
        color = _band(by_step, *mean_curve(res.runs), label=label)
        _band(by_rollouts, *interpolated_curve(res.runs), label=label, color=color)
    for ax, xlabel in ((by_step, "step"), (by_rollouts, "rollouts (responses generated)")):
        ax.axhline(target, color="0.4", linestyle="--", linewidth=1, label=f"target {target:.3f}")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    by_step.set_ylabel("held-out eval accuracy")
    by_rollouts.legend(loc="lower right")
    fig.suptitle(f"{title}: mean over seeds, shaded 95% interval" if title else "mean over seeds, 95% interval")
    fig.savefig(path, dpi=120)
    return path


def _band(ax: Any, xs: Sequence[float], means: Sequence[float], halves: Sequence[float | None], *, label: str,
          color: Any = None) -> Any:
    """One mean curve with its shaded 95% band; returns the line's colour."""
    (line,) = ax.plot(xs, means, label=label, color=color)
    if xs and all(h is not None for h in halves):
        lo = [m - h for m, h in zip(means, halves, strict=True)]  # type: ignore[operator]
        hi = [m + h for m, h in zip(means, halves, strict=True)]  # type: ignore[operator]
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    return line.get_color()


def write_reports(
    results: Sequence[SettingResult], out_dir: Path, info: ReportInfo, *, progress: IO[str] | None
) -> tuple[str, Path | None]:
    """Write ``accuracy.png``, ``results.md`` and ``results.json`` into ``out_dir``; return the markdown and the
    plot's path (``None`` without matplotlib)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = write_plot(results, info.target, out_dir / "accuracy.png", title=Path(info.path).name, progress=progress)
    markdown = render_markdown(results, info, plot=plot, out_dir=out_dir)
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    (out_dir / "results.json").write_text(json.dumps(_json_results(results, info), indent=2) + "\n", encoding="utf-8")
    return markdown, plot
