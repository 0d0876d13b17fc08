"""The float32 mirrors of ``difficulty_based``'s stored posteriors, which the float32 pass of :mod:`._costs` reads.

Per task ``D = α̃ − target·(α̃ + β̃)`` (:attr:`Float32Mirrors.offsets`) and ``S = α̃ + β̃``
(:attr:`Float32Mirrors.totals`), kept up to :data:`~.tuning.MIRROR_MAX` tasks (8 bytes per task): the batch rows
are rewritten at each feedback and everything is rebuilt after a fold or a load. Above that size nothing is kept
and :meth:`Float32Mirrors.chunk` computes a chunk's mirrors from the store when a pass reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._store import TaskStore


class Float32Mirrors:
    """``D`` and ``S`` of every task (see the module docstring) for the stored values of ``store`` and the
    selector's ``target``; :attr:`offsets` and :attr:`totals` are None above ``tuning.MIRROR_MAX`` tasks."""

    def __init__(self, store: TaskStore, target: float) -> None:
        self.store = store
        self.target = target
        self.size = store.size
        self.offsets: np.ndarray | None = None
        self.totals: np.ndarray | None = None
        if self.size <= tuning.MIRROR_MAX:
            self.offsets = np.empty(self.size, dtype=np.float32)
            self.totals = np.empty(self.size, dtype=np.float32)
        self.refresh()

    def write(self, rows: slice | np.ndarray, alpha_t: np.ndarray, beta_t: np.ndarray) -> None:
        """Set the kept mirrors of ``rows``, whose ``α̃``, ``β̃`` are ``alpha_t``, ``beta_t`` (nothing above
        ``tuning.MIRROR_MAX`` tasks)."""
        if self.offsets is not None and self.totals is not None:
            self._compute(alpha_t, beta_t, self.offsets, self.totals, rows)

    def _compute(
        self, alpha_t: np.ndarray, beta_t: np.ndarray, offsets: np.ndarray, totals: np.ndarray, rows: Any = Ellipsis
    ) -> None:
        """Write ``D``, ``S`` of the rows ``alpha_t``, ``beta_t`` into ``offsets[rows]``, ``totals[rows]`` (the same
        bits whether done for a batch, a chunk or all)."""
        total = alpha_t + beta_t
        with np.errstate(over="ignore"):  # beyond float32 only while the fast pass is off (fast_coefficients)
            totals[rows] = total
            total *= self.target
            np.subtract(alpha_t, total, out=total)
            offsets[rows] = total

    def refresh(self) -> None:
        """Rebuild the kept mirrors from the store (after a fold or a load)."""
        if self.offsets is None or self.totals is None:
            return
        chunk = tuning.CHUNK
        alpha, beta = np.empty(min(chunk, self.size)), np.empty(min(chunk, self.size))
        for start in range(0, self.size, chunk):
            stop = min(start + chunk, self.size)
            width = stop - start
            self.store.slice_into(start, stop, alpha[:width], beta[:width])
            self._compute(alpha[:width], beta[:width], self.offsets, self.totals, slice(start, stop))

    def chunk(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``D``, ``S`` of the tasks ``start:stop``: views of the kept mirrors, or computed from the store."""
        if self.offsets is not None and self.totals is not None:
            return self.offsets[start:stop], self.totals[start:stop]
        width = stop - start
        alpha, beta = np.empty(width), np.empty(width)
        self.store.slice_into(start, stop, alpha, beta)
        offsets, totals = np.empty(width, dtype=np.float32), np.empty(width, dtype=np.float32)
        self._compute(alpha, beta, offsets, totals)
        return offsets, totals
