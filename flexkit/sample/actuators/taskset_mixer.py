"""Bases of the mix actuators that keep per-taskset statistics, and the statistics they share.

:class:`TasksetMixer` holds the number of tasksets (fixed by :meth:`~TasksetMixer.bind`, else grown as ids
appear) and sums scores per taskset (:func:`taskset_sums`); :class:`BanditMixer` adds one value per taskset;
:class:`WindowMixer` keeps those per-call sums for the last ``window`` training steps (:class:`StepWindow`), the
statistics of ``reward_gap``, ``dump_ucb`` and ``tscl``. Plugins writing a mixer can subclass any of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit._lazy import is_tensor
from flexkit.errors import ConfigError, SampleError, StateMismatchError
from flexkit.plugins._contract import display_name
from flexkit.sample._actuator import Actuator
from flexkit.sample._batch import RolloutBatch


def taskset_sums(scores: Any, batch: RolloutBatch, *, who: str, bound: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``(sum, count)`` of the scores per taskset id, as float64 arrays (length: largest id + 1).

    Per-sample scores are grouped by the batch's ``taskset_id``; domain scores (``{taskset_id: value}``) count
    as one sample per taskset. Raises :class:`SampleError` for negative ids or ids at or above ``bound``.
    """
    if isinstance(scores, Mapping):
        ids = np.asarray(list(scores.keys()), dtype=np.int64)
        values = np.asarray(list(scores.values()), dtype=np.float64)
    else:
        batch.require(["taskset_id"], who=f"{who} with per-sample scores")
        raw = batch["taskset_id"]
        raw = raw.detach().cpu().numpy() if is_tensor(raw) else np.asarray(raw)
        if raw.size and (raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer)):
            raise SampleError(f"taskset_id must hold integer taskset ids, got {raw.dtype}")
        ids = raw.astype(np.int64, copy=False).reshape(-1)
        values = scores.detach().to("cpu").double().numpy().reshape(-1)
    if ids.size and ids.min() < 0:
        raise SampleError(f"taskset ids must be >= 0, got {int(ids.min())}")
    top = int(ids.max()) + 1 if ids.size else 0
    if bound is not None and top > bound:
        raise SampleError(f"taskset id {top - 1} is out of range: the pipeline has {bound} tasksets")
    return (np.bincount(ids, weights=values, minlength=top).astype(np.float64),
            np.bincount(ids, minlength=top).astype(np.float64))


class TasksetMixer(Actuator):
    """Base of mixers with per-taskset statistics: :attr:`num_tasksets` and :meth:`stats` per call.

    :meth:`bind` fixes the number of tasksets; unbound, it is one more than the largest id seen.
    """

    mechanism = "mix"
    accepts = ("domain", "prompt", "response")

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._bound: int | None = None
        self._num_tasksets = 0

    @property
    def num_tasksets(self) -> int:
        """The number of tasksets known so far."""
        return self._num_tasksets

    def _grow(self, k: int) -> None:
        """Know at least ``k`` tasksets."""
        self._num_tasksets = max(self._num_tasksets, k)

    def bind(self, taskset_names: Sequence[str]) -> None:
        """Fix the number of tasksets (ids ``0 .. len(taskset_names)-1``)."""
        k = len(taskset_names)
        if k < 1:
            raise ConfigError("a mixer needs at least one taskset")
        if k < self.num_tasksets:
            raise ConfigError(f"cannot bind {k} tasksets: taskset id {self.num_tasksets - 1} was already seen")
        self._bound = k
        self._grow(k)

    def stats(self, scores: Any, batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
        """This call's per-taskset ``(sum, count)``, padded to :attr:`num_tasksets` (which grows to fit)."""
        sums, counts = taskset_sums(scores, batch, who=f"mix actuator {display_name(self)}", bound=self._bound)
        self._grow(len(sums))
        k = self.num_tasksets
        return np.pad(sums, (0, k - len(sums))), np.pad(counts, (0, k - len(counts)))


class BanditMixer(TasksetMixer):
    """Base of mixers that keep one value per taskset (``self.values``), grown as tasksets appear."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.values = np.zeros(0)

    @property
    def num_tasksets(self) -> int:
        """The number of tasksets known so far (the length of ``values``)."""
        return len(self.values)

    def _grow(self, k: int) -> None:
        if k > len(self.values):
            self.values = np.concatenate([self.values, np.full(k - len(self.values), self._initial_value())])

    def _initial_value(self) -> float:
        return 0.0

    def load_values(self, values: Any) -> np.ndarray:
        """Saved per-taskset values, checked against the bound (:class:`~flexkit.errors.StateMismatchError` when
        they do not fit)."""
        arr = np.array(values, dtype=np.float64).reshape(-1)
        if self._bound is not None and len(arr) > self._bound:
            raise StateMismatchError(f"saved state has {len(arr)} tasksets but the pipeline has {self._bound}")
        if not np.isfinite(arr).all():
            raise StateMismatchError("saved mixer values must be finite")
        if self._bound is not None and len(arr) < self._bound:
            arr = np.concatenate([arr, np.full(self._bound - len(arr), self._initial_value())])
        return arr


class StepWindow:
    """Per-taskset ``(sum, count)`` of each of the last ``size`` training steps.

    A step ``s`` leaves the window once a step ``>= s + size`` is recorded; several records for one step add up.
    Arrays are float64, indexed by taskset id, and may be shorter than the number of tasksets (missing ids: 0).
    """

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self.entries: deque[tuple[int, np.ndarray, np.ndarray]] = deque()
        self.last_step: int | None = None

    def check_step(self, step: int) -> None:
        """Raise :class:`SampleError` when ``step`` is before the last recorded step."""
        if self.last_step is not None and step < self.last_step:
            raise SampleError(f"steps must not go backwards: got step {step} after step {self.last_step}")

    def record(self, step: int, sums: np.ndarray, counts: np.ndarray) -> None:
        """Add one call's statistics at ``step`` and drop the steps that left the window."""
        if self.entries and self.entries[-1][0] == step:
            _, old_sums, old_counts = self.entries.pop()
            sums, counts = pad(old_sums, len(sums)) + pad(sums, len(old_sums)), \
                pad(old_counts, len(counts)) + pad(counts, len(old_counts))
        self.entries.append((step, sums, counts))
        self.last_step = step
        while self.entries and self.entries[0][0] <= step - self.size:
            self.entries.popleft()

    def series(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps (S,), sums (S, k), counts (S, k))`` of the steps in the window, oldest first."""
        steps = np.array([s for s, _, _ in self.entries], dtype=np.float64)
        sums = np.array([pad(v, k)[:k] for _, v, _ in self.entries]).reshape(len(steps), k)
        counts = np.array([pad(c, k)[:k] for _, _, c in self.entries]).reshape(len(steps), k)
        return steps, sums, counts

    def totals(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(sum, count)`` per taskset over the window, length ``k`` (added step by step, oldest first)."""
        sums, counts = np.zeros(k), np.zeros(k)
        for _, v, c in self.entries:
            sums += pad(v, k)[:k]
            counts += pad(c, k)[:k]
        return sums, counts

    def means(self, k: int) -> np.ndarray:
        """Window mean per taskset (a mean over samples, not of step means); NaN without data in the window."""
        sums, counts = self.totals(k)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)

    def state(self) -> dict[str, Any]:
        """``last_step`` and the window as plain lists."""
        return {"last_step": self.last_step,
                "window": [{"step": s, "sums": v.tolist(), "counts": c.tolist()} for s, v, c in self.entries]}

    @classmethod
    def from_state(cls, size: int, state: Mapping[str, Any], k: int) -> StepWindow:
        """A window restored from :meth:`state` output with at most ``k`` tasksets
        (:class:`~flexkit.errors.StateMismatchError` if invalid)."""
        out = cls(size)
        for entry in state["window"]:
            sums = np.asarray(entry["sums"], dtype=np.float64)
            counts = np.asarray(entry["counts"], dtype=np.float64)
            if sums.shape != counts.shape or sums.ndim != 1 or len(sums) > k:
                raise StateMismatchError("saved mixer window has inconsistent shapes")
            if not (np.isfinite(sums).all() and np.isfinite(counts).all() and (counts >= 0).all()):
                raise StateMismatchError("saved mixer window holds invalid values")
            out.entries.append((int(entry["step"]), sums, counts))
        steps = [s for s, _, _ in out.entries]
        if steps != sorted(set(steps)):
            raise StateMismatchError("saved mixer window steps must be strictly increasing")
        last = state["last_step"]
        out.last_step = None if last is None else int(last)
        if steps and (out.last_step is None or out.last_step < steps[-1]):
            raise StateMismatchError("saved mixer window is newer than its last step")
        return out


class WindowMixer(TasksetMixer):
    """Base of mixers whose statistics are the per-taskset sums of the last ``config.window`` steps.

    :meth:`observe` checks the step, sums this call's scores per taskset and records them in
    :attr:`recent` (a :class:`StepWindow`). The window is in :meth:`state_dict` (subclasses add their own keys).
    """

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.recent = StepWindow(self.config.window)

    def observe(self, scores: Any, batch: RolloutBatch, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Record this call's per-taskset ``(sum, count)`` at ``step`` (steps never go backwards); return them."""
        step = int(step)
        self.recent.check_step(step)
        sums, counts = self.stats(scores, batch)
        self.recent.record(step, sums, counts)
        return sums, counts

    def state_dict(self) -> dict[str, Any]:
        """The number of tasksets, the last step and the window (plain lists)."""
        return {"num_tasksets": self.num_tasksets, **self.recent.state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        k = self.check_num_tasksets(state)
        recent = StepWindow.from_state(self.config.window, state, k)
        self._num_tasksets = max(k, self._bound or 0)
        self.recent = recent

    def check_num_tasksets(self, state: Mapping[str, Any]) -> int:
        """The saved number of tasksets, checked against the bound (:class:`~flexkit.errors.StateMismatchError`
        when it does not fit)."""
        k = int(state["num_tasksets"])
        if k < 0 or (self._bound is not None and k > self._bound):
            raise StateMismatchError(f"saved state has {k} tasksets but the pipeline has {self._bound}")
        return k


def pad(a: np.ndarray, k: int) -> np.ndarray:
    """``a`` extended with zeros to length ``k`` (unchanged when already that long)."""
    return a if len(a) >= k else np.concatenate([a, np.zeros(k - len(a))])


def softmax(logits: np.ndarray) -> np.ndarray:
    """A numerically stable softmax."""
    z = np.exp(logits - logits.max())
    probabilities: np.ndarray = z / z.sum()
    return probabilities


def with_floor(soft: np.ndarray, floor: float) -> np.ndarray:
    """``floor/K + (1 − floor)·soft``: a share ``floor`` spread uniformly over the ``K`` tasksets."""
    return floor / len(soft) + (1.0 - floor) * soft
