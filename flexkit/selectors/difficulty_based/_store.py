"""``difficulty_based``'s stored posteriors: ``α̃``, ``β̃`` kept only for the tasks that need them.

A task never observed since the last fold but one has ``α̃``, ``β̃`` that are a function of its features alone:
the *untouched model* ``(m0, mp, mq, n0)`` gives them bit for bit as

    α̃ = fl(fl(m0 + fl(f0·mp)) + fl(f1·mq)),   β̃ = fl(fl(n0 − fl(f0·mp)) − fl(f1·mq))

(starting at ``(1, 0, 0, 1)``: α̃ = β̃ = 1). A fold maps every ``α̃`` to ``fl(…fl(α̃·a) + b…)`` (the float steps of
the selector's fold) and the model to ``(fl(a·m0 + b), fl(a·mp + p), fl(a·mq + q), fl(a·n0 + b_β))``. When
``a·α̃`` is below half an ulp of ``b`` for every untouched task (always with the default ``fold_below``), both
sides round to the same floats: :meth:`TaskStore.fold` proves it from the model's range in O(1) (the float steps
are monotone), otherwise it checks every task in one chunked pass and keeps those that differ.

:class:`TaskStore` therefore holds the explicit ``α̃``, ``β̃`` of the tasks written since the last fold (or that
a fold could not map onto the model), in compact arrays, with a slot number per task (int32, −1 for "given by the
model"): 4 bytes per task plus 24 per stored task. A fold drops every stored task that the model gives exactly
(a task observed before the last fold: its departure from the model was scaled by ``a``), so the stored tasks are
about those observed in the last one or two fold periods, whatever N.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._features import as64
from flexkit.selectors.difficulty_based._transform import Transform

#: The untouched model of a fresh selector: α̃ = β̃ = 1.
FRESH = (1.0, 0.0, 0.0, 1.0)


class TaskStore:
    """The ``α̃``, ``β̃`` of every task: the untouched model ``coef`` plus explicit values for some tasks.

    ``slot[i]`` is the position of task ``i``'s values in ``ids``/``alpha``/``beta`` (first ``count`` entries, in
    the order they were added), or −1 when the model gives them."""

    def __init__(self, f0: np.ndarray, f1: np.ndarray, coef: tuple[float, float, float, float] = FRESH) -> None:
        self.f0, self.f1 = f0, f1
        self.size = f0.size
        self.slot = np.full(self.size, -1, dtype=np.int32 if self.size < 2**31 else np.int64)
        self.coef = coef
        self._clear()

    def _clear(self, capacity: int = 0) -> None:
        self.ids = np.empty(capacity, dtype=np.int64)
        self.alpha = np.empty(capacity)
        self.beta = np.empty(capacity)
        self.count = 0

    @property
    def nbytes(self) -> int:
        """Bytes held: the slot array and the compact arrays' capacity."""
        return self.slot.nbytes + self.ids.nbytes + self.alpha.nbytes + self.beta.nbytes

    # -- reading ------------------------------------------------------------------------------------------------

    def model_values(
        self, f0: np.ndarray, f1: np.ndarray, alpha: np.ndarray | None = None, beta: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The untouched model's ``α̃``, ``β̃`` for features ``f0``, ``f1`` (into ``alpha``, ``beta`` if given)."""
        m0, mp, mq, n0 = self.coef
        x = np.multiply(f0, mp, out=beta)
        alpha = np.add(x, m0, out=alpha)
        y = f1 * mq
        alpha += y
        beta = np.subtract(n0, x, out=x)
        beta -= y
        return alpha, beta

    def values(self, idx: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``α̃``, ``β̃`` (new arrays) of the tasks ``idx``, whose features are ``f0``, ``f1``."""
        alpha, beta = self.model_values(f0, f1)
        if self.count:
            self._overlay(self.slot[idx], alpha, beta)
        return alpha, beta

    def slice_into(self, start: int, stop: int, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Write ``α̃``, ``β̃`` of the tasks ``start:stop`` into ``alpha``, ``beta`` (float64, that size)."""
        sl = slice(start, stop)
        self.model_values(as64(self.f0[sl]), as64(self.f1[sl]), alpha, beta)
        if self.count:
            self._overlay(self.slot[sl], alpha, beta)

    def _overlay(self, slots: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Replace the model's values in ``alpha``, ``beta`` by the stored ones where ``slots`` names a slot."""
        hit = np.flatnonzero(slots >= 0)
        if hit.size:
            slots = slots[hit]
            alpha[hit] = self.alpha[slots]
            beta[hit] = self.beta[slots]

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's ``α̃``, ``β̃`` as two N-sized arrays (16 bytes per task: for tests and old checkpoints)."""
        alpha, beta = np.empty(self.size), np.empty(self.size)
        for start in range(0, self.size, tuning.CHUNK):
            stop = min(start + tuning.CHUNK, self.size)
            self.slice_into(start, stop, alpha[start:stop], beta[start:stop])
        return alpha, beta

    # -- writing ------------------------------------------------------------------------------------------------

    def set(self, idx: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Store explicit ``α̃``, ``β̃`` for the tasks ``idx`` (no repeats)."""
        s = self.slot[idx]
        new = np.flatnonzero(s < 0)
        if new.size:
            if self.count + new.size > self.ids.size:
                self._grow(self.count + new.size)
            slots = np.arange(self.count, self.count + new.size, dtype=s.dtype)
            fresh = idx[new]
            self.slot[fresh] = slots
            self.ids[slots] = fresh
            s[new] = slots
            self.count += new.size
        self.alpha[s] = alpha
        self.beta[s] = beta

    def _grow(self, need: int) -> None:
        capacity = max(2 * self.ids.size, need, 1024)
        self.ids, self.alpha, self.beta = (self._grown(old, capacity) for old in (self.ids, self.alpha, self.beta))

    def _grown(self, old: np.ndarray, capacity: int) -> np.ndarray:
        """The first ``count`` entries of ``old`` in a new array of ``capacity`` slots of its dtype."""
        new = np.empty(capacity, dtype=old.dtype)
        new[: self.count] = old[: self.count]
        return new

    def _replace(self, ids: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Hold exactly the tasks ``ids`` (no repeats) with these values; every other task follows the model."""
        self.slot[self.ids[: self.count]] = -1
        self._clear()
        if ids.size:
            self._grow(ids.size)
            self.ids[: ids.size], self.alpha[: ids.size], self.beta[: ids.size] = ids, alpha, beta
            self.slot[ids] = np.arange(ids.size, dtype=self.slot.dtype)
            self.count = ids.size

    # -- the fold -----------------------------------------------------------------------------------------------

    def fold(self, transform: Transform) -> None:
        """Apply the selector's fold of ``transform`` (:mod:`._transform`) to every task's ``α̃``, ``β̃``:
        the model moves (O(1)) and the stored tasks are folded, those the new model gives exactly dropped; a
        chunked pass over every task runs only when the untouched tasks cannot be shown to follow the model."""
        old = self.coef
        new = _fold_model(old, transform)
        self.coef = new
        if self._untouched_follow(old, new, transform):
            n = self.count
            ids = self.ids[:n]
            f0, f1 = as64(self.f0[ids]), as64(self.f1[ids])
            alpha, beta = _fold_rows(self.alpha[:n], self.beta[:n], f0, f1, transform)
            m_alpha, m_beta = self.model_values(f0, f1)
            keep = (alpha != m_alpha) | (beta != m_beta)
            order = np.argsort(ids[keep], kind="stable")
            self._replace(ids[keep][order], alpha[keep][order], beta[keep][order])
            return
        self.coef = old
        kept_ids, kept_alpha, kept_beta = [], [], []
        chunk = tuning.CHUNK
        al, be = np.empty(min(chunk, self.size)), np.empty(min(chunk, self.size))
        for start in range(0, self.size, chunk):
            stop = min(start + chunk, self.size)
            w = stop - start
            self.coef = old
            self.slice_into(start, stop, al[:w], be[:w])
            f0, f1 = as64(self.f0[start:stop]), as64(self.f1[start:stop])
            alpha, beta = _fold_rows(al[:w], be[:w], f0, f1, transform)
            self.coef = new
            m_alpha, m_beta = self.model_values(f0, f1)
            keep = np.flatnonzero((alpha != m_alpha) | (beta != m_beta))
            kept_ids.append(keep + start)
            kept_alpha.append(alpha[keep])
            kept_beta.append(beta[keep])
        self.coef = new
        self._replace(np.concatenate(kept_ids), np.concatenate(kept_alpha), np.concatenate(kept_beta))

    @staticmethod
    def _untouched_follow(old: tuple[float, ...], new: tuple[float, ...], transform: Transform) -> bool:
        """Whether the fold maps the old model's ``α̃``, ``β̃`` onto the new model's for every feature pair in
        [0, 1]²: ``fl(fl(x·a) + b)`` is monotone in ``x``, so equal at the ends of the range of ``α̃`` (exact float
        bounds, by monotonicity of each step) means equal throughout; likewise for ``β̃``; and ``f0``, ``f1`` must
        meet the same coefficients (``fl(a·mp + p) = p``, ``fl(a·mq + q) = q``)."""
        m0, mp, mq, n0 = old
        a, b, b_beta = transform.scale, transform.alpha_shift, transform.beta_shift
        if new[1] != transform.f0_slope or new[2] != transform.f1_slope:
            return False
        lo_p, hi_p, lo_q, hi_q = min(mp, 0.0), max(mp, 0.0), min(mq, 0.0), max(mq, 0.0)
        alpha_range = ((m0 + lo_p) + lo_q, (m0 + hi_p) + hi_q)
        beta_range = ((n0 - hi_p) - hi_q, (n0 - lo_p) - lo_q)
        return all(x * a + b == new[0] for x in alpha_range) and all(x * a + b_beta == new[3] for x in beta_range)

    # -- state --------------------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The number of tasks, the stored tasks in increasing order with their values (copies), and the
        untouched model."""
        n = self.count
        order = np.argsort(self.ids[:n], kind="stable")
        return {
            "num_tasks": self.size,
            "task_ids": self.ids[:n][order],
            "alpha_tilde": self.alpha[:n][order],
            "beta_tilde": self.beta[:n][order],
            "untouched": dict(zip(("m0", "mp", "mq", "n0"), self.coef, strict=True)),
        }

    def load(self, coef: tuple[float, ...], ids: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Hold the model ``coef`` and the tasks ``ids`` (validated by the caller: sorted, unique, in range)."""
        self.coef = tuple(float(c) for c in coef)  # type: ignore[assignment]  # four numbers: m0, mp, mq, n0
        self._replace(ids, alpha, beta)

    def load_dense(self, alpha: np.ndarray, beta: np.ndarray, model: tuple[float, float, float] | None) -> None:
        """Hold every task's ``α̃``, ``β̃`` from N-sized arrays (a checkpoint from before the sparse store): the
        model ``(m0, mp, mq)`` (the greedy index's, or the fresh one) with the ``n0`` that gives the most tasks of
        a sample exactly; the others are stored."""
        self._fit_model(alpha, beta, model)
        self._replace(*self._departures(alpha, beta))

    def _departures(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tasks whose ``α̃``, ``β̃`` (N-sized arrays) the model does not give, in increasing order, with their
        values (one chunked pass)."""
        kept_ids, kept_alpha, kept_beta = [], [], []
        for start in range(0, self.size, tuning.CHUNK):
            stop = min(start + tuning.CHUNK, self.size)
            m_alpha, m_beta = self.model_values(as64(self.f0[start:stop]), as64(self.f1[start:stop]))
            keep = np.flatnonzero((alpha[start:stop] != m_alpha) | (beta[start:stop] != m_beta))
            kept_ids.append(keep + start)
            kept_alpha.append(alpha[start:stop][keep])
            kept_beta.append(beta[start:stop][keep])
        return np.concatenate(kept_ids), np.concatenate(kept_alpha), np.concatenate(kept_beta)

    def _fit_model(self, alpha: np.ndarray, beta: np.ndarray, model: tuple[float, float, float] | None) -> None:
        """Set the model to ``(m0, mp, mq)`` (the fresh one without ``model``) with the ``n0`` that gives the most
        tasks of a sample of ``alpha``, ``beta`` exactly."""
        m0, mp, mq = model if model is not None else FRESH[:3]
        sample = min(self.size, tuning.CHUNK)
        f0, f1 = as64(self.f0[:sample]), as64(self.f1[:sample])
        guess = beta[: min(sample, 64)] + f0[:64] * mp + f1[:64] * mq
        candidates = np.unique(np.concatenate([guess + k * np.spacing(guess) for k in (-2, -1, 0, 1, 2)] + [[1.0]]))
        best, best_hits = 1.0, -1
        for n0 in candidates:
            self.coef = (m0, mp, mq, float(n0))
            hits = int(np.count_nonzero(self.model_values(f0, f1)[1] == beta[:sample]))
            if hits > best_hits:
                best, best_hits = float(n0), hits
        self.coef = (float(m0), float(mp), float(mq), best)


def _fold_model(coef: tuple[float, float, float, float], transform: Transform) -> tuple[float, float, float, float]:
    """The untouched model ``(m0, mp, mq, n0)`` after a fold of ``transform``."""
    m0, mp, mq, n0 = coef
    a = transform.scale
    return (a * m0 + transform.alpha_shift, a * mp + transform.f0_slope, a * mq + transform.f1_slope,
            a * n0 + transform.beta_shift)


def _fold_rows(
    alpha_t: np.ndarray, beta_t: np.ndarray, f0: np.ndarray, f1: np.ndarray, transform: Transform
) -> tuple[np.ndarray, np.ndarray]:
    """The true ``α``, ``β`` of rows ``α̃``, ``β̃`` under ``transform`` (the float steps of
    :meth:`~._posterior.BetaPosteriors.slice_into`, so the same bits); new arrays."""
    alpha = alpha_t * transform.scale
    alpha += transform.alpha_shift
    beta = beta_t * transform.scale
    beta += transform.beta_shift
    tmp = f0 * transform.f0_slope
    alpha += tmp
    beta -= tmp
    np.multiply(f1, transform.f1_slope, out=tmp)
    alpha += tmp
    beta -= tmp
    return alpha, beta


class DenseTaskStore(TaskStore):
    """:class:`TaskStore` with every task's ``α̃``, ``β̃`` in two N-sized arrays (16 bytes per task), for tasksets
    up to :data:`~.tuning.DENSE_STORE_MAX` tasks: reads and writes are plain indexing, as fast as before the sparse
    store. It keeps the untouched model too (folded the same way), so :meth:`state` is the sparse format and a
    checkpoint loads into either store with the same values, bit for bit."""

    def __init__(self, f0: np.ndarray, f1: np.ndarray, coef: tuple[float, float, float, float] = FRESH) -> None:
        super().__init__(f0, f1, coef)
        self.slot = np.empty(0, dtype=np.int32)  # unused: every task is held
        self._alpha_all, self._beta_all = self._model_all()

    def _model_all(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's ``α̃``, ``β̃`` under the untouched model (new N-sized arrays, filled chunk by chunk from the
        features: no float64 copy of them)."""
        alpha, beta = np.empty(self.size), np.empty(self.size)
        for start in range(0, self.size, tuning.CHUNK):
            sl = slice(start, min(start + tuning.CHUNK, self.size))
            self.model_values(as64(self.f0[sl]), as64(self.f1[sl]), alpha[sl], beta[sl])
        return alpha, beta

    @property
    def nbytes(self) -> int:
        """Bytes held: the two N-sized arrays."""
        return self._alpha_all.nbytes + self._beta_all.nbytes

    def values(self, idx: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``α̃``, ``β̃`` (new arrays) of the tasks ``idx``."""
        return self._alpha_all[idx], self._beta_all[idx]

    def slice_into(self, start: int, stop: int, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Copy ``α̃``, ``β̃`` of the tasks ``start:stop`` into ``alpha``, ``beta``."""
        alpha[...] = self._alpha_all[start:stop]
        beta[...] = self._beta_all[start:stop]

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's ``α̃``, ``β̃`` (copies)."""
        return self._alpha_all.copy(), self._beta_all.copy()

    def set(self, idx: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Write ``α̃``, ``β̃`` of the tasks ``idx``."""
        self._alpha_all[idx] = alpha
        self._beta_all[idx] = beta

    def fold(self, transform: Transform) -> None:
        """Fold every task's ``α̃``, ``β̃`` (chunk by chunk, the selector's float steps) and the model."""
        self.coef = _fold_model(self.coef, transform)
        for start in range(0, self.size, tuning.CHUNK):
            sl = slice(start, min(start + tuning.CHUNK, self.size))
            self._alpha_all[sl], self._beta_all[sl] = _fold_rows(
                self._alpha_all[sl], self._beta_all[sl], as64(self.f0[sl]), as64(self.f1[sl]), transform
            )

    def state(self) -> dict[str, Any]:
        """The sparse format: the tasks whose values the untouched model does not give, in increasing order."""
        ids, alpha, beta = self._departures(self._alpha_all, self._beta_all)
        return {"num_tasks": self.size, "task_ids": ids, "alpha_tilde": alpha, "beta_tilde": beta,
                "untouched": dict(zip(("m0", "mp", "mq", "n0"), self.coef, strict=True))}

    def load(self, coef: tuple[float, ...], ids: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
        """Every task from the model ``coef``, then the tasks ``ids`` with their values."""
        self.coef = tuple(float(c) for c in coef)  # type: ignore[assignment]  # four numbers: m0, mp, mq, n0
        self._alpha_all, self._beta_all = self._model_all()
        self._alpha_all[ids], self._beta_all[ids] = alpha, beta

    def load_dense(self, alpha: np.ndarray, beta: np.ndarray, model: tuple[float, float, float] | None) -> None:
        """Every task's values from N-sized arrays (the model is fitted as the sparse store does, for
        :meth:`state`)."""
        self._fit_model(alpha, beta, model)
        self._alpha_all, self._beta_all = np.array(alpha, dtype=np.float64), np.array(beta, dtype=np.float64)


def make_store(f0: np.ndarray, f1: np.ndarray) -> TaskStore:
    """A :class:`DenseTaskStore` up to :data:`~.tuning.DENSE_STORE_MAX` tasks, a sparse :class:`TaskStore` above."""
    return DenseTaskStore(f0, f1) if f0.size <= tuning.DENSE_STORE_MAX else TaskStore(f0, f1)
