"""Per-group numbers of the selectors' summaries in a run's records, as ``flexkit plot`` draws them: ``frontier``'s
floor share (``flexkit/selector/<taskset>/floor_share/<group>``) and the guard's share
(``.../guard_share/<group>``) of each group over the steps, and with ``text_key`` each quantile group's predicted
against observed pass rate (``.../predicted/<group>``, ``.../pass_rate/<group>``), and on the validation split's
rows (``.../val_predicted/<group>``, ``.../val_observed/<group>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit._metric_names import PREFIX

__all__ = ["SELECTOR_PREFIX", "draw_calibration", "draw_group_shares", "group_series"]

#: The prefix of the selectors' summary numbers in a record (``flexkit/selector/<taskset>/<key>``).
SELECTOR_PREFIX = PREFIX + "selector/"


def group_series(records: Sequence[Mapping[str, Any]], kind: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Steps done (``step + 1``) and values of ``flexkit/selector/<taskset>/<kind>/<group>`` per group of the step
    records (``step >= 0``), named by the group (``<taskset>: <group>`` when several tasksets have it)."""
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for record in records:
        if not isinstance(record.get("step"), int) or record["step"] < 0:
            continue
        for key, value in record.items():
            if not key.startswith(SELECTOR_PREFIX) or not isinstance(value, (int, float)):
                continue
            taskset, sep, rest = key.removeprefix(SELECTOR_PREFIX).partition(f"/{kind}/")
            if sep and "/" not in taskset:
                points.setdefault((taskset, rest), []).append((record["step"] + 1, float(value)))
    several = len({taskset for taskset, _group in points}) > 1
    return {(f"{taskset}: {group}" if several else group): (np.array([p[0] for p in pairs], dtype=float),
                                                           np.array([p[1] for p in pairs], dtype=float))
            for (taskset, group), pairs in sorted(points.items())}


def draw_group_shares(ax: Any, series: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str, label: str) -> None:
    """One row per group, coloured by its share in [0, 1] at each step (a colour bar beside it): every group stays
    visible where lines of equal shares would hide each other."""
    steps = np.unique(np.concatenate([xs for xs, _ys in series.values()]))
    grid = np.full((len(series), len(steps)), np.nan)
    for row, (xs, ys) in enumerate(series.values()):
        grid[row, np.searchsorted(steps, xs)] = ys
    edges = np.concatenate([steps - 0.5, [steps[-1] + 0.5]])
    mesh = ax.pcolormesh(edges, np.arange(len(series) + 1), grid, vmin=0.0, vmax=1.0, cmap="viridis",
                         shading="flat")
    ax.set_yticks(np.arange(len(series)) + 0.5, [name.replace("level=", "level ") for name in series], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("steps")
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(mesh, ax=ax, label=label, shrink=0.9)


def draw_calibration(ax: Any, predicted: Mapping[str, tuple[np.ndarray, np.ndarray]],
                     observed: Mapping[str, tuple[np.ndarray, np.ndarray]],
                     val_predicted: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
                     val_observed: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
    """Each group's last predicted pass rate (x) against its last observed one (y), with the diagonal: a prompt
    model that ranks the pool puts its groups near the diagonal and spread along it; groups bunched at one rate
    mean it tells the tasks apart no better than one group would. With ``val_predicted`` and ``val_observed``
    (the validation split's rows, put in the same groups), their points too, as open squares: agreement on rows
    the model never learnt from."""
    _calibration_points(ax, predicted, observed, "o", "feedback")
    if val_predicted and val_observed:
        _calibration_points(ax, val_predicted, val_observed, "s", "validation rows")
        ax.legend(fontsize=7, loc="upper left")
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("predicted pass rate (prompt model)")
    ax.set_ylabel("observed pass rate" + (" / validation score" if val_predicted and val_observed else " (feedback)"))
    ax.set_title("prompt model per quantile group, at the end", fontsize=10)
    ax.grid(alpha=0.3)


def _calibration_points(ax: Any, predicted: Mapping[str, tuple[np.ndarray, np.ndarray]],
                        observed: Mapping[str, tuple[np.ndarray, np.ndarray]], marker: str, label: str) -> None:
    """The predicted (x) and observed (y) value of each group at the last step any group has both, labelled by the
    group's number (a group with no value at that step is left out, not drawn from an older one)."""
    names = [name for name in predicted if name in observed]
    if names:
        latest = max(float(predicted[name][0][-1]) for name in names)
        names = [name for name in names
                 if float(predicted[name][0][-1]) == latest and float(observed[name][0][-1]) == latest]
    xs = np.array([predicted[name][1][-1] for name in names])
    ys = np.array([observed[name][1][-1] for name in names])
    if marker == "o":
        ax.scatter(xs, ys, c=np.arange(len(names)), cmap="viridis", s=24, zorder=3, marker=marker, label=label)
    else:
        ax.scatter(xs, ys, facecolors="none", edgecolors="0.2", s=30, zorder=3, marker=marker, label=label)
    for name, x, y in zip(names, xs, ys, strict=True):
        ax.annotate(name.rsplit("_", 1)[-1], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
