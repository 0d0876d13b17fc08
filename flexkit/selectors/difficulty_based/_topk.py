"""Exact top-k helpers shared by ``difficulty_based``'s passes, index and samplers.

Every result is ordered by (key, index): ties go to the smaller index, so a top-k does not depend on how the
candidates were found (a float32 filter, a slab of the greedy index, a split across threads).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexkit.selectors.difficulty_based import tuning


class RunningBest:
    """The ``k`` smallest (key, index) pairs among candidates offered in increasing index order; the keys are
    computed by ``key_of`` on batches of candidates (at least ``2k`` at a time once ``k`` are kept)."""

    def __init__(self, k: int, key_of: Callable[[np.ndarray], np.ndarray]) -> None:
        self.wanted = k
        self.key_of = key_of
        self.idx = np.empty(0, dtype=np.int64)
        self.key = np.empty(0)
        self._pending: list[np.ndarray] = []
        self._num_pending = 0
        self.threshold = np.inf  # the k-th smallest key so far (inf until k keys are known)

    @property
    def full(self) -> bool:
        """Whether ``k`` pairs are kept (then :attr:`threshold` is the k-th smallest key)."""
        return self.idx.size == self.wanted

    def offer(self, idx: np.ndarray) -> None:
        """Offer candidates, all with larger indices than any offered before."""
        self._pending.append(idx)
        self._num_pending += idx.size
        if not self.full or self._num_pending >= 2 * self.wanted:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        idx = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._num_pending = [], 0
        key = self.key_of(idx)
        if self.full:  # a key equal to the threshold loses to the smaller indices already kept
            keep = key < self.threshold
            idx, key = idx[keep], key[keep]
            if not idx.size:
                return
        self.idx, self.key = smallest_pairs(
            np.concatenate([self.idx, idx]), np.concatenate([self.key, key]), self.wanted
        )
        if self.full:
            self.threshold = float(self.key.max())

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept (indices, keys), in no particular order."""
        self._flush()
        return self.idx, self.key


def smallest_pairs(idx: np.ndarray, key: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest (key, index) pairs (unordered): O(len) with a partition, ties to smaller indices."""
    if idx.size <= k:
        return idx, key
    kth = np.partition(key, k - 1)[k - 1]
    keep = np.flatnonzero(key < kth)
    ties = np.flatnonzero(key == kth)
    if ties.size > k - keep.size:
        ties = ties[np.argsort(idx[ties], kind="stable")[: k - keep.size]]
    keep = np.concatenate([keep, ties])
    return idx[keep], key[keep]


def round_up32(value: float) -> np.float32:
    """The smallest float32 ≥ ``value`` (float32 comparisons against it never drop a task below ``value``)."""
    with np.errstate(over="ignore"):  # beyond float32: inf, which lets every task through
        v = np.float32(value)
    return v if float(v) >= value else np.nextafter(v, np.float32(np.inf))


def smallest_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest ``values``, smallest first, equal values in index order. O(N)."""
    n = values.size
    if k < n:
        threshold = np.partition(values, k - 1)[k - 1]  # the k-th smallest value
        below = np.flatnonzero(values < threshold)  # fewer than k
        ties = _first_equal(values, threshold, k - below.size)
        chosen = np.concatenate([below, ties])
    else:
        chosen = np.arange(n, dtype=np.int64)
    order = np.lexsort((chosen, values[chosen]))
    return chosen[order].astype(np.int64, copy=False)


def _first_equal(values: np.ndarray, target: float, count: int) -> np.ndarray:
    """The first ``count`` indices where ``values == target``, scanning in chunks (no N-sized index array)."""
    found: list[np.ndarray] = []
    need = count
    chunk = tuning.CHUNK
    for start in range(0, values.size, chunk):
        if need <= 0:
            break
        hits = np.flatnonzero(values[start : start + chunk] == target)[:need] + start
        found.append(hits)
        need -= hits.size
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)
