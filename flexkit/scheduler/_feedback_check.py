"""Checking a feedback payload against the tasksets it names, changing nothing.

Used by :meth:`flexkit.TasksetScheduler.check_feedback` (and through it by ``feedback``) before any
selector sees the payload; :mod:`flexkit.scheduler._feedback_apply` then applies the checked parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexkit.config._converter import did_you_mean
from flexkit.errors import FeedbackError
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.selectors._base import OutOfRange, validate_feedback

if TYPE_CHECKING:
    from flexkit.scheduler._tasks import TasksetEntry


def taskset_id(entries: Sequence[TasksetEntry], key: Any) -> int:
    """The id (position in ``entries``) of the taskset ``key`` names, by id or by name; a
    :class:`~flexkit.errors.FeedbackError` lists the tasksets when it names none."""
    names = [e.name for e in entries]
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= key < len(entries):
        return int(key)
    if isinstance(key, str) and key in names:
        return names.index(key)
    raise FeedbackError(f"feedback for unknown taskset {key!r}; tasksets: "
                        + ", ".join(f"{i} ({n})" for i, n in enumerate(names)))


def check_feedback_payload(entries: Sequence[TasksetEntry], metrics: Mapping[str, Any], out_of_range: OutOfRange,
                           *, clipped: list[str] | None = None) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Validate a feedback payload for the tasksets ``entries``, changing nothing: ``(taskset id, int64 indices,
    float64 values)`` per taskset, values clipped by ``out_of_range`` (each taskset whose values were clipped is
    appended to ``clipped`` when given, with its first such value). Raises
    :class:`~flexkit.errors.FeedbackError` naming the first problem, also for a top-level key that looks like a
    misspelt ``selector_metric`` (other top-level keys are left alone)."""
    if not isinstance(metrics, Mapping):
        raise FeedbackError(f"feedback must be a mapping, got {type(metrics).__name__}")
    for key in metrics:
        if key != SELECTOR_METRIC and isinstance(key, str) and did_you_mean(key, [SELECTOR_METRIC]):
            raise FeedbackError(f"unknown feedback key {key!r}{did_you_mean(key, [SELECTOR_METRIC])}: selector "
                                f"feedback travels under {SELECTOR_METRIC!r}, so this payload would be ignored")
    payload = metrics.get(SELECTOR_METRIC, {})
    if not isinstance(payload, Mapping):
        raise FeedbackError(f"{SELECTOR_METRIC} must map taskset ids to {{'indices', 'values'}}")
    checked: list[tuple[int, np.ndarray, np.ndarray]] = []
    seen: set[int] = set()
    for key, part in payload.items():
        tid = taskset_id(entries, key)
        if tid in seen:
            raise FeedbackError(f"feedback names taskset {key!r} twice")
        seen.add(tid)
        if not isinstance(part, Mapping) or "indices" not in part or "values" not in part:
            raise FeedbackError(f"feedback for taskset {key!r} needs 'indices' and 'values'")
        outside: list[float] = []
        try:
            idx, vals = validate_feedback(part["indices"], part["values"], entries[tid].size,
                                          out_of_range=out_of_range, clipped=outside)
        except FeedbackError as exc:
            raise FeedbackError(f"taskset {entries[tid].name!r}: {exc}") from None
        if clipped is not None and outside:
            clipped.append(f"{outside[0]!r} for taskset {entries[tid].name!r}")
        checked.append((tid, idx, vals))
    return checked
