"""``flexkit compare``'s ``levels.png``: held-out accuracy per difficulty level, one panel per level, the mean over
seeds of each setting against rollouts (a shaded 95% band from :data:`MIN_INTERVAL_VALUES` runs on)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from flexkit.compare._plot_parts import band, legend_label, say, thousands_axis
from flexkit.compare._results import RunOutcome, SettingResult
from flexkit.compare._statistics import MIN_INTERVAL_VALUES, interpolated_curve

__all__ = ["level_keys", "write_level_plot"]


def level_keys(results: Sequence[SettingResult]) -> list[str]:
    """The per-level curves' keys (``eval_accuracy/<level>``) of every run, in the order first seen."""
    keys: list[str] = []
    for res in results:
        for run in res.runs:
            keys += [k for k in run.level_curves if k not in keys]
    return keys


def write_level_plot(results: Sequence[SettingResult], path: Path, *, title: str = "",
                     progress: IO[str] | None = sys.stderr, dpi: int = 100) -> Path | None:
    """Write ``path`` with one panel per level; ``None`` without per-level evaluations, or (with a note)
    without matplotlib."""
    keys = level_keys(results)
    if not keys:
        return None
    try:
        from matplotlib.figure import Figure
    except ImportError:
        say(progress, 'note: levels.png skipped: matplotlib is not installed (pip install "flexkit-rft[plot]")')
        return None
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = Figure(figsize=(4.5 * cols, 3.4 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    colors: dict[str, object] = {}
    for ax, key in zip(axes, keys, strict=False):
        for res in results:
            runs = [r for r in res.runs if key in r.level_curves]
            if not runs:
                continue
            def level_curve(run: RunOutcome, key: str = key) -> list[tuple[int, float]]:
                return run.level_curves[key]

            curve = interpolated_curve(runs, curve=level_curve)
            colors[res.setting.name] = band(ax, *curve, label=legend_label(res.setting.name, len(runs)),
                                             color=colors.get(res.setting.name),
                                             shade=len(runs) >= MIN_INTERVAL_VALUES)
        ax.set_title(f"level {key.split('/', 1)[1]}")
        ax.grid(alpha=0.3)
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    for col in range(cols):  # the lowest visible panel of each column carries the x axis
        lowest = axes[max(i for i in range(len(keys)) if i % cols == col)]
        lowest.xaxis.set_tick_params(labelbottom=True)
        lowest.set_xlabel("rollouts (responses generated)")
        thousands_axis(lowest.xaxis)
    for ax in axes[::cols]:
        ax.set_ylabel("held-out eval accuracy")
    axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"{title}: accuracy per level, mean over seeds" if title else "accuracy per level, mean over seeds")
    fig.savefig(path, dpi=dpi)
    return path
