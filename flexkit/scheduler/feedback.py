"""Feedback: from rollout experiences to the per-task values adaptive selectors learn from.

The payload shape follows Trinity-RFT's task-selection module::

    {SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}}

A feedback operator (:class:`FeedbackOperator`) turns experiences into that payload; the built-in
``pass_rate_calculator`` groups experiences by (taskset_id, index) and reports each task's mean reward.
:func:`task_triples` reads ``(taskset_id, index, reward)`` from experiences (rows or columns) by the operator's
rule, for code that handles experiences itself (e.g. the distributed pipeline).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeGuard, runtime_checkable

import attrs
import numpy as np

from flexkit._lazy import is_tensor
from flexkit.errors import FeedbackError
from flexkit.plugins._contract import Configurable, FeedbackSource
from flexkit.plugins._contract import (
    FeedbackOperator as FeedbackOperator,  # its home; named here too, beside its built-in
)

#: The metrics key under which feedback for selectors travels (Trinity-RFT's name).
SELECTOR_METRIC = "selector_metric"


@attrs.frozen(kw_only=True)
class Experience:
    """One rollout's outcome: its reward and the task it came from (``taskset_id``, ``index``)."""

    reward: float
    taskset_id: int
    index: int
    info: Mapping[str, Any] = attrs.field(factory=dict)


@runtime_checkable
class _HasInfo(Protocol):
    """An experience object with an ``info`` mapping (Trinity-RFT's ``Experience``: ``info["task_index"]``)."""

    info: Any


def task_of(exp: Any) -> tuple[Any, Any, Any]:
    """``(taskset_id, index, reward)`` of one experience, as stored (not validated).

    Accepts an :class:`Experience`; a plain dict, flat (``{"reward", "taskset_id", "index"}``) or with the task
    under ``"task_index"`` (``{"reward": r, "task_index": {"taskset_id": t, "index": i}}``, also inside
    ``"info"``); or a Trinity-RFT-style object (``exp.info["task_index"]``, ``exp.reward``; else attributes
    ``taskset_id``, ``index``, ``reward``). A missing field raises ``KeyError``, ``AttributeError`` or
    ``TypeError``.
    """
    if isinstance(exp, Experience):
        return exp.taskset_id, exp.index, exp.reward
    if isinstance(exp, Mapping):
        if "task_index" in exp:  # {"reward": r, "task_index": {"taskset_id": t, "index": i}}
            task = exp["task_index"]
            return task["taskset_id"], task["index"], exp["reward"]
        if "info" in exp and "task_index" in exp["info"]:
            task = exp["info"]["task_index"]
            return task["taskset_id"], task["index"], exp["reward"]
        return exp["taskset_id"], exp["index"], exp["reward"]
    info = exp.info if isinstance(exp, _HasInfo) else None  # Trinity's Experience: exp.info["task_index"], exp.reward
    if isinstance(info, Mapping) and "task_index" in info:
        task = info["task_index"]
        return task["taskset_id"], task["index"], exp.reward
    return exp.taskset_id, exp.index, exp.reward


def snapshot_experiences(experiences: Iterable[Any] | Mapping[str, Any]) -> list[Any] | dict[str, Any]:
    """A copy of ``experiences`` that later in-place writes to the rollout's arrays cannot change.

    The runner feeds back from this snapshot, taken right after the rollout, so a trainer whose
    ``compute_advantages`` centres a reward array it shares with its experiences still feeds its selectors the
    rewards, not the advantages. Columns (a mapping) get each array copied (numpy arrays, torch tensors, lists:
    one (B·G) copy each); rows get each mapping copied the same way and each other object copied shallowly
    (``copy.copy``; frozen :class:`Experience` objects are kept as they are)."""
    if isinstance(experiences, Mapping):
        return {key: _copied(value) for key, value in experiences.items()}
    return [_copied_row(exp) for exp in experiences]


def _copied(value: Any) -> Any:
    """A copy of an array-like value (numpy array, torch tensor, list); other values as they are."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return list(value)
    if is_tensor(value):
        return value.detach().clone()
    return value


def _copied_row(exp: Any) -> Any:
    if isinstance(exp, (Experience, int, float, str)) or exp is None:
        return exp
    if isinstance(exp, Mapping):
        return {key: _copied(value) for key, value in exp.items()}
    try:
        return copy.copy(exp)
    except Exception:  # an object that cannot be copied is fed back as it is
        return exp


#: The fields of columnar experiences (see :meth:`PassRateCalculator.process`).
COLUMNS = frozenset({"reward", "taskset_id", "index"})


def is_columnar(experiences: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``experiences`` are columns: a mapping holding (at least) the :data:`COLUMNS` arrays."""
    return isinstance(experiences, Mapping) and set(experiences) >= COLUMNS


def task_triples(experiences: Iterable[Any] | Mapping[str, Any]) -> list[tuple[Any, Any, Any]]:
    """``(taskset_id, index, reward)`` of each experience, in order: the one rule feedback operators and the
    distributed pipeline share for reading experiences.

    ``experiences`` is what :meth:`PassRateCalculator.process` accepts: an iterable of experiences (each read by
    :func:`task_of`, values as stored) or columns (:func:`is_columnar`; values become Python numbers, rewards
    floats). Raises :class:`~flexkit.errors.FeedbackError` when a field is missing, the input is not iterable,
    or columns have unequal lengths or non-numeric rewards. Ids are not validated here (the operator does).
    """
    if is_columnar(experiences):
        tids, idxs, rewards = _columns(experiences)
        return list(zip(tids.tolist(), idxs.tolist(), rewards.tolist(), strict=True))
    try:
        exps = list(experiences)
    except TypeError:
        raise FeedbackError(f"experiences must be an iterable, got {type(experiences).__name__}") from None
    try:
        return [task_of(e) for e in exps]
    except (KeyError, AttributeError, TypeError) as exc:
        raise FeedbackError(f"an experience lacks reward/taskset_id/index: {exc!r}") from None


def _rewards(values: Any) -> np.ndarray:
    """``values`` as float64 rewards; :class:`~flexkit.errors.FeedbackError` for text, ``None`` or other values
    that are not numbers (``"1"`` is not read as 1.0)."""
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"experience rewards must be numbers: {exc}") from None
    if raw.dtype.kind in "USV":
        raise FeedbackError("experience rewards must be numbers, got text")
    if raw.dtype.kind == "O":  # numbers mixed with other objects: name the first that is not a number
        bad = [v for v in raw.reshape(-1).tolist() if not isinstance(v, numbers.Real)][:1]
        if bad:
            raise FeedbackError(f"experience rewards must be numbers, got {type(bad[0]).__name__} {bad[0]!r}"[:120])
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FeedbackError(f"experience rewards must be numbers: {exc}") from None


def _rows(exps: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(taskset ids, indices, rewards) of a list of experiences."""
    triples = task_triples(exps)
    rewards = _rewards([t[2] for t in triples])
    if rewards.ndim != 1:
        raise FeedbackError("experience rewards must be numbers, got sequences")
    try:
        tids = np.asarray([t[0] for t in triples])
        idxs = np.asarray([t[1] for t in triples])
    except (TypeError, ValueError, OverflowError):
        tids = idxs = np.asarray([None])  # ragged or odd values: reported by _check_ids
    return tids, idxs, rewards


def _columns(columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(taskset ids, indices, rewards) of columnar experiences."""
    rewards = _rewards(columns["reward"])
    if rewards.ndim != 1:
        raise FeedbackError(f"the reward column must be one-dimensional, got shape {rewards.shape}")
    try:
        tids, idxs = np.asarray(columns["taskset_id"]), np.asarray(columns["index"])
    except (TypeError, ValueError, OverflowError):
        tids = idxs = np.asarray([None])
    if tids.shape != rewards.shape or idxs.shape != rewards.shape:
        raise FeedbackError(f"experience columns must have equal lengths: reward {rewards.shape}, taskset_id "
                            f"{tids.shape}, index {idxs.shape}")
    return tids, idxs, rewards


def _check_ids(tids: np.ndarray, idxs: np.ndarray, n: int) -> None:
    if not (np.issubdtype(tids.dtype, np.integer) and np.issubdtype(idxs.dtype, np.integer)) or (
        tids.ndim != 1 or idxs.ndim != 1 or len(tids) != n or len(idxs) != n
    ):
        raise FeedbackError("experience taskset_id and index must be integers")
    if any(a.size and a.dtype == np.uint64 and int(a.max()) > np.iinfo(np.int64).max for a in (tids, idxs)):
        raise FeedbackError("experience taskset_id and index must fit in 64-bit signed integers")


def _unique_tasks(tids: np.ndarray, idxs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (taskset_id, index) rows in lexicographic order, each one's first position, and each
    experience's row: ``np.unique(axis=0)``, through one int64 key when the ids allow (several times faster)."""
    if tids.min() >= 0 and idxs.min() >= 0:
        stride = int(idxs.max()) + 1
        if (int(tids.max()) + 1) * stride < 2**62:
            keys, first, inverse = np.unique(tids * stride + idxs, return_index=True, return_inverse=True)
            return np.stack([keys // stride, keys % stride], axis=1), first, inverse.reshape(-1)
    uniq, first, inverse = np.unique(np.stack([tids, idxs], axis=1), axis=0, return_index=True, return_inverse=True)
    return uniq, first, inverse.reshape(-1)


@attrs.frozen
class PassRateConfig:
    """``pass_rate_calculator`` takes no parameters."""


class PassRateCalculator(Configurable, FeedbackOperator):
    """Mean reward per task, grouped by (taskset_id, index) (Trinity-RFT's ``pass_rate_calculator``)."""

    Config = PassRateConfig

    def process(self, experiences: Iterable[Any] | Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Return ``(experiences, {SELECTOR_METRIC: {taskset_id: {"indices": ..., "values": ...}}})``, each
        taskset's ``indices`` an int64 array and ``values`` a float64 array (the scheduler validates them once and
        hands them on as they are).

        ``experiences`` is an iterable of experiences (:class:`Experience`, dicts, Trinity-style objects) or,
        cheaper for large batches, **columns**: a mapping with equal-length arrays ``reward``,
        ``taskset_id`` and ``index`` (one entry per response), or a :class:`~flexkit.sample.RolloutBatch`, read
        as its :meth:`~flexkit.sample.RolloutBatch.feedback_columns`. Tasks appear in order of first
        occurrence; experiences are passed through unchanged.
        """
        if isinstance(experiences, FeedbackSource):  # a RolloutBatch: its own columns
            return experiences, self.process(experiences.feedback_columns())[1]
        if is_columnar(experiences):
            exps: Any = experiences
            tids, idxs, rewards = _columns(experiences)
            if not len(rewards):
                return exps, {SELECTOR_METRIC: {}}
        else:
            try:
                exps = list(experiences)
            except TypeError:
                raise FeedbackError(f"experiences must be an iterable, got {type(experiences).__name__}") from None
            if not exps:
                return exps, {SELECTOR_METRIC: {}}
            tids, idxs, rewards = _rows(exps)
        _check_ids(tids, idxs, len(rewards))
        uniq, first, inverse = _unique_tasks(tids.astype(np.int64), idxs.astype(np.int64))
        sums = np.bincount(inverse, weights=rewards, minlength=len(uniq))
        counts = np.bincount(inverse, minlength=len(uniq))
        order = np.argsort(first, kind="stable")  # tasks in order of first occurrence
        return exps, {SELECTOR_METRIC: _per_taskset(uniq[order, 0], uniq[order, 1], (sums / counts)[order])}


def _per_taskset(tids: np.ndarray, idxs: np.ndarray, means: np.ndarray) -> dict[int, dict[str, np.ndarray]]:
    """``{taskset_id: {"indices": int64 array, "values": float64 array}}`` from tasks in first-occurrence order:
    tasksets in order of their first task, each one's tasks in the given order (the payload's one shape)."""
    keys, first, which = np.unique(tids, return_index=True, return_inverse=True)
    rank = np.empty(len(keys), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(keys))
    task_rank = rank[which.reshape(-1)]
    grouped = np.argsort(task_rank, kind="stable")
    bounds = np.cumsum(np.bincount(task_rank, minlength=len(keys)))[:-1]
    indices = np.split(idxs[grouped].astype(np.int64, copy=False), bounds)
    values = np.split(means[grouped].astype(np.float64, copy=False), bounds)
    return {int(tid): {"indices": i, "values": v}
            for tid, i, v in zip(keys[np.argsort(first, kind="stable")].tolist(), indices, values, strict=True)}

