"""Validation of the saved ``α̃``, ``β̃`` of ``difficulty_based`` (:mod:`._store`), in either checkpoint format.

* The sparse format (:meth:`TaskStore.state <flexkit.selectors.difficulty_based._store.TaskStore.state>`):
  ``num_tasks``, ``task_ids`` (strictly increasing task indices), ``alpha_tilde`` and ``beta_tilde`` of those tasks, and
  ``untouched`` (``m0``, ``mp``, ``mq``, ``n0``: the model that gives every other task's values).
* The dense format of earlier versions: ``alpha_tilde`` and ``beta_tilde`` of every task, no ``task_ids``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from flexkit.errors import StateMismatchError


class StoredTasks(NamedTuple):
    """Validated saved values: ``dense`` (earlier format: ``ids`` is None) or the sparse store's parts."""

    dense: bool
    ids: np.ndarray | None
    alpha: np.ndarray
    beta: np.ndarray
    untouched: tuple[float, float, float, float] | None


def _finite_array(state: Mapping[str, Any], key: str, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.array(state[key], dtype=np.float64)
    if arr.shape != shape:
        raise StateMismatchError(f"saved {key} has shape {arr.shape}, expected {shape}")
    if not np.isfinite(arr).all():
        raise StateMismatchError(f"saved {key} holds non-finite values")
    return arr


def load_stored_tasks(state: Mapping[str, Any], size: int) -> StoredTasks:
    """Check and convert the saved ``α̃``, ``β̃`` of a selector over ``size`` tasks
    (:class:`~flexkit.errors.StateMismatchError` naming the key when they are malformed)."""
    if "task_ids" not in state:  # the dense format
        alpha, beta = (_finite_array(state, key, (size,)) for key in ("alpha_tilde", "beta_tilde"))
        return StoredTasks(True, None, alpha, beta, None)
    num_tasks = state.get("num_tasks")
    if num_tasks != size:
        raise StateMismatchError(f"saved state is for {num_tasks!r} tasks: shape ({num_tasks},), expected ({size},)")
    ids = np.array(state["task_ids"])
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise StateMismatchError(f"saved task_ids must be a list of task indices, got shape {ids.shape}, dtype "
                                 f"{ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.size and (ids[0] < 0 or ids[-1] >= size or not (np.diff(ids) > 0).all()):
        raise StateMismatchError(f"saved task_ids must be strictly increasing task indices in [0, {size})")
    alpha, beta = (_finite_array(state, key, ids.shape) for key in ("alpha_tilde", "beta_tilde"))
    raw = state.get("untouched")
    if not isinstance(raw, Mapping):
        raise StateMismatchError("saved untouched model is missing (it gives every task not in task_ids)")
    m0, mp, mq, n0 = (float(raw[k]) for k in ("m0", "mp", "mq", "n0"))
    untouched = (m0, mp, mq, n0)
    if not all(math.isfinite(v) for v in untouched):
        raise StateMismatchError(f"saved untouched model holds non-finite values: {untouched!r}")
    return StoredTasks(False, ids, alpha, beta, untouched)
