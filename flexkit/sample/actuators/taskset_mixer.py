"""Bases of the mix actuators that keep per-taskset statistics, and the statistics of one call.

:class:`TasksetMixer` holds the number of tasksets (fixed by :meth:`~TasksetMixer.bind`, else grown as ids
appear) and sums scores per taskset (:func:`taskset_sums`); :class:`BanditMixer` adds one value per taskset.
Plugins writing a mixer can subclass either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit.sample.actuator import Actuator
from flexkit.sample.batch import RolloutBatch, SampleError


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
        raw = raw.detach().cpu().numpy() if hasattr(raw, "detach") else np.asarray(raw)
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

    def __init__(self, config: Any) -> None:
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
            raise ValueError("a mixer needs at least one taskset")
        if k < self.num_tasksets:
            raise ValueError(f"cannot bind {k} tasksets: taskset id {self.num_tasksets - 1} was already seen")
        self._bound = k
        self._grow(k)

    def stats(self, scores: Any, batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
        """This call's per-taskset ``(sum, count)``, padded to :attr:`num_tasksets` (which grows to fit)."""
        sums, counts = taskset_sums(scores, batch, who=f"mix actuator {self.display_name()}", bound=self._bound)
        self._grow(len(sums))
        k = self.num_tasksets
        return np.pad(sums, (0, k - len(sums))), np.pad(counts, (0, k - len(counts)))


class BanditMixer(TasksetMixer):
    """Base of mixers that keep one value per taskset (``self.values``), grown as tasksets appear."""

    def __init__(self, config: Any) -> None:
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
        """Saved per-taskset values, checked against the bound (``ValueError`` when they do not fit)."""
        arr = np.array(values, dtype=np.float64).reshape(-1)
        if self._bound is not None and len(arr) > self._bound:
            raise ValueError(f"saved state has {len(arr)} tasksets but the pipeline has {self._bound}")
        if not np.isfinite(arr).all():
            raise ValueError("saved mixer values must be finite")
        if self._bound is not None and len(arr) < self._bound:
            arr = np.concatenate([arr, np.full(self._bound - len(arr), self._initial_value())])
        return arr


def softmax(logits: np.ndarray) -> np.ndarray:
    """A numerically stable softmax."""
    z = np.exp(logits - logits.max())
    return z / z.sum()
