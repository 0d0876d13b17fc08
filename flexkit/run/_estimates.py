"""What ``flexkit run`` records about the selectors' beliefs and the drawn tasks, cheaply, for ``flexkit plot``.

* **Predicted pass rates.** A selector that keeps a pass-rate estimate per task reports it through one of
  (first found): ``predicted_pass_rates()`` (the way for a plugin selector: an array of every task's estimate in
  [0, 1]), ``estimates()`` (``learnability``), ``posterior()`` returning ``(alpha, beta)`` (``difficulty_based``;
  the estimate is the posterior mean), or ``posterior_mean()`` (``thompson_target``). The runner takes a
  :class:`EstimateSnapshot` between steps (no prefetch is running then), and records, for the next step, a
  histogram of the drawn tasks' estimates and one of the whole pool's over :data:`PASS_RATE_BINS` equal bins of
  [0, 1]. With ``[run] prefetch = true`` a batch is selected one feedback earlier than the snapshot, so the drawn
  tasks' estimates are those the selector holds just before their rollout.
* **Level mix.** When the drawn tasks' rows carry an integer ``level``, how many of each level were drawn.
* **Selector summaries.** Each selector's ``summary()`` numbers as ``flexkit/selector/<taskset>/<key>``, the names
  the host adapters log them under (:func:`summary_metrics`): ``frontier``'s pass rate, informative rate, floor
  share and guard share per group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit._metric_names import selector_metric
from flexkit.selectors import _members as members

__all__ = ["PASS_RATE_BINS", "EstimateSnapshot", "level_mix", "predicted_pass_rates", "selector_summaries",
           "summary_metrics"]

#: Equal-width bins of [0, 1] of the recorded pass-rate histograms.
PASS_RATE_BINS = 20


def predicted_pass_rates(selector: Any, size: int) -> np.ndarray | None:
    """A copy of every task's pass-rate estimate held by ``selector`` (``size`` tasks), or ``None`` when it keeps
    none (or reports something that is not ``size`` finite numbers in [0, 1]). The copy is flexkit's: the selector
    may return its own state array and go on updating it."""
    values = members.predicted_pass_rates(selector)
    if values is None:
        return None
    arr = np.array(values, dtype=np.float64, copy=True)  # a selector may return (and later change) its own state
    if arr.shape != (size,) or not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        return None
    return arr


def _histogram(values: np.ndarray) -> list[int]:
    counts, _edges = np.histogram(values, bins=PASS_RATE_BINS, range=(0.0, 1.0))
    return [int(c) for c in counts]


class EstimateSnapshot:
    """The selectors' pass-rate estimates at one moment, per taskset id (tasksets whose selector keeps none are
    left out)."""

    def __init__(self, estimates: Mapping[int, np.ndarray]) -> None:
        self.estimates = dict(estimates)

    @classmethod
    def take(cls, scheduler: Any) -> EstimateSnapshot:
        """Read every selector of ``scheduler`` (holding it :meth:`~flexkit.TasksetScheduler.idle`,
        so a
        running prefetch finishes first and none starts meanwhile)."""
        found: dict[int, np.ndarray] = {}
        with scheduler.idle():
            for tid, entry in enumerate(scheduler.entries):
                values = predicted_pass_rates(entry.selector, int(entry.size))
                if values is not None:
                    found[tid] = values
        return cls(found)

    def record(self, tasks: Sequence[Any]) -> dict[str, list[int]] | None:
        """``{"selected": histogram of the drawn tasks' estimates, "pool": histogram of every task's}`` over the
        tasksets with estimates; ``None`` when no selector keeps any."""
        if not self.estimates:
            return None
        picked = [self.estimates[t.taskset_id][t.index] for t in tasks if t.taskset_id in self.estimates]
        pool = np.concatenate(list(self.estimates.values()))
        return {"selected": _histogram(np.asarray(picked, dtype=np.float64)), "pool": _histogram(pool)}


def level_mix(tasks: Sequence[Any]) -> dict[str, int] | None:
    """How many drawn tasks of each integer ``level`` (keys in level order); ``None`` when no row has one."""
    counts: dict[int, int] = {}
    for task in tasks:
        row = task.data
        level = row.get("level") if isinstance(row, Mapping) else None
        if isinstance(level, (int, np.integer)) and not isinstance(level, bool):
            counts[int(level)] = counts.get(int(level), 0) + 1
    return {str(k): counts[k] for k in sorted(counts)} if counts else None


def summary_metrics(taskset: str, selector: Any) -> dict[str, float]:
    """The numbers of ``selector``'s ``summary()`` as ``flexkit/selector/<taskset>/<key>`` (values that are not
    numbers, and bools, are left out)."""
    return {selector_metric(taskset, key): float(value) for key, value in dict(members.summary(selector)).items()
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)}


def selector_summaries(scheduler: Any) -> dict[str, float]:
    """Every selector's finite :func:`summary_metrics`, for a ``metrics.jsonl`` record (holding ``scheduler`` idle:
    no prefetch selects meanwhile)."""
    out: dict[str, float] = {}
    with scheduler.idle():
        for entry in scheduler.entries:
            out.update(summary_metrics(entry.name, entry.selector))
    return {key: value for key, value in out.items() if math.isfinite(value)}
