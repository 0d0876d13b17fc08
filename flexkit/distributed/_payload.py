"""Feedback payloads as plain data: validate one without applying it, merge several, fingerprint a state.

Shared by the data-parallel wrapper (:mod:`flexkit.distributed._torch_dist`) and the batch ledger
(:mod:`flexkit.distributed._ledger`): both hold feedback before a scheduler sees it, so they check it with the
scheduler's own rules first (the sender learns of a bad payload at once, and nothing changes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from flexkit.scheduler.feedback import SELECTOR_METRIC

#: A validated payload: ``{taskset_id: (indices, values)}`` as Python lists (picklable, JSON-friendly).
Payload = dict[int, tuple[list[int], list[float]]]


def normalize(scheduler: Any, metrics: Any) -> Payload:
    """Check ``metrics`` (``{SELECTOR_METRIC: {taskset: {"indices", "values"}}}``) with the scheduler's own
    :meth:`~flexkit.TasksetScheduler.check_feedback`, without touching any selector; return it keyed
    by taskset id with values clipped by the scheduler's ``out_of_range`` rule. Raises
    :class:`~flexkit.FeedbackError`."""
    return {tid: (idx.tolist(), vals.tolist()) for tid, idx, vals in scheduler.check_feedback(metrics)}


def as_metrics(payload: Payload) -> dict[str, Any]:
    """A validated payload back in the scheduler's ``{SELECTOR_METRIC: ...}`` form."""
    return {SELECTOR_METRIC: {tid: {"indices": list(idx), "values": list(vals)}
                              for tid, (idx, vals) in payload.items()}}


def merge(payloads: Sequence[Payload]) -> Payload:
    """One payload from several (e.g. one per rank, in rank order): tasks keep their first-seen order; a task
    reported by several payloads gets the mean of their values (each payload counts once)."""
    sums: dict[int, dict[int, list[float]]] = {}
    for payload in payloads:
        for tid, (idx, vals) in payload.items():
            seen = sums.setdefault(tid, {})
            for i, v in zip(idx, vals, strict=True):
                seen.setdefault(i, []).append(v)
    return {tid: (list(seen), [float(np.mean(v)) if len(v) > 1 else v[0] for v in seen.values()])
            for tid, seen in sorted(sums.items())}


def digest(state: Any) -> str:
    """A SHA-256 fingerprint of plain-data state (dicts, lists, numbers, strings, numpy arrays): equal states
    give equal digests, and a single differing bit of any array changes it."""
    h = hashlib.sha256()
    _feed(h, state)
    return h.hexdigest()


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, np.ndarray):
        h.update(f"A{obj.dtype.str}{obj.shape}".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, Mapping):
        items = sorted(obj.items(), key=lambda kv: repr(kv[0]))
        h.update(f"D{len(items)}".encode())
        for key, value in items:
            _feed(h, key)
            _feed(h, value)
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for value in obj:
            _feed(h, value)
    elif isinstance(obj, np.generic):
        _feed(h, obj.item())
    else:
        h.update(f"{type(obj).__name__}:{obj!r};".encode())


def task_pairs(tasks: Iterable[Any]) -> list[tuple[int, int]]:
    """``(taskset_id, index)`` of each task, in order."""
    return [(int(t.taskset_id), int(t.index)) for t in tasks]
