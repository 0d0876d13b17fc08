"""``difficulty_based``'s Beta posteriors: every task's ``α``, ``β`` as stored values under one global map.

:class:`BetaPosteriors` joins the three parts that give a task's true Beta parameters: its features
(:class:`~._features.FeaturePair`), its stored ``α̃``, ``β̃`` (:class:`~._store.TaskStore`) and the global
:class:`~._transform.Transform`. It applies the lazy O(batch) update of a feedback (the map for every task, explicit
values for the batch), folds the map into the stored values when its scale gets tiny, and knows the bound on
``α + β`` that the float32 pass of :mod:`._costs` rests on.
"""

from __future__ import annotations

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._features import FeaturePair, as64
from flexkit.selectors.difficulty_based._store import TaskStore, make_store
from flexkit.selectors.difficulty_based._transform import Transform


class BetaPosteriors:
    """Every task's Beta(α, β): ``features``, the ``store`` of ``α̃``, ``β̃`` and the ``transform`` (see the module
    docstring), for a selector with ``rollouts`` (``m``) per feedback value and forgetting rate ``lamb``.

    :attr:`num_updates` counts the feedbacks applied (the selector's ``num_feedback``); :attr:`trusted` says
    whether the state satisfies the invariants the float32 error bound rests on (always, unless a loaded state
    breaks them: :meth:`satisfies_invariants`).
    """

    def __init__(self, features: FeaturePair, *, rollouts: int, lamb: float) -> None:
        self.features = features
        self.size = features.size
        self.rollouts, self.lamb = rollouts, lamb
        self.store: TaskStore = make_store(features.f0, features.f1)
        self.transform = Transform()
        self.num_updates = 0
        self.trusted = True

    # -- reading ------------------------------------------------------------------------------------------------

    def of(self, indices: np.ndarray, f0: np.ndarray | None = None, f1: np.ndarray | None = None,
           ) -> tuple[np.ndarray, np.ndarray]:
        """The true ``(alpha, beta)`` of the tasks ``indices`` (int64; their float64 features ``f0``, ``f1`` when
        the caller has them)."""
        if f0 is None or f1 is None:
            f0, f1 = self.features.rows(indices)
        alpha_t, beta_t = self.store.values(indices, f0, f1)
        transform = self.transform
        pf0, qf1 = f0 * transform.f0_slope, f1 * transform.f1_slope
        alpha = alpha_t * transform.scale + transform.alpha_shift + pf0 + qf1
        beta = beta_t * transform.scale + transform.beta_shift - pf0 - qf1
        return alpha, beta

    def all(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's true ``(alpha, beta)`` (two new N-sized arrays, filled chunk by chunk)."""
        chunk = tuning.CHUNK
        alpha, beta = np.empty(self.size), np.empty(self.size)
        tmp = np.empty(min(chunk, self.size))
        for start in range(0, self.size, chunk):
            stop = min(start + chunk, self.size)
            self.slice_into(slice(start, stop), alpha[start:stop], beta[start:stop], tmp[: stop - start])
        return alpha, beta

    def slice_into(self, rows: slice, alpha: np.ndarray, beta: np.ndarray, tmp: np.ndarray) -> None:
        """Write the true α, β of the tasks ``rows`` into ``alpha`` and ``beta`` (``tmp``: scratch of that size;
        the same float steps as :meth:`of`, so both give identical bits)."""
        transform = self.transform
        self.store.slice_into(rows.start, rows.stop, alpha, beta)
        alpha *= transform.scale
        alpha += transform.alpha_shift
        beta *= transform.scale
        beta += transform.beta_shift
        np.multiply(as64(self.features.f0[rows]), transform.f0_slope, out=tmp)
        alpha += tmp
        beta -= tmp
        np.multiply(as64(self.features.f1[rows]), transform.f1_slope, out=tmp)
        alpha += tmp
        beta -= tmp

    def stored_dense(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's stored ``α̃``, ``β̃`` (new N-sized arrays; for tests and inspection: the selector never
        builds them)."""
        return self.store.dense()

    # -- feedback -----------------------------------------------------------------------------------------------

    def forget(self, rho: float, capability: float) -> None:
        """Move every task as if it were not observed by this feedback (the transform only: O(1))."""
        self.transform.forget(self.lamb, rho, self.rollouts, capability)

    def set_observed(
        self, indices: np.ndarray, f0: np.ndarray, f1: np.ndarray, before: tuple[np.ndarray, np.ndarray],
        values: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Give the observed tasks ``indices`` (features ``f0``, ``f1``; true α, β ``before`` this feedback) their
        updated values: ``α ← (1−λ)α + λ + m·v``, ``β ← (1−λ)β + λ + m·(1−v)`` (the prior's weight drops out for
        an observed task, whose interpolated prior is ``v`` itself). Returns their new stored ``α̃``, ``β̃``."""
        lamb, m = self.lamb, self.rollouts
        keep = 1.0 - lamb
        alpha_b, beta_b = before
        new_alpha = keep * alpha_b + lamb + m * values
        new_beta = keep * beta_b + lamb + m * (1.0 - values)
        transform = self.transform
        lin = f0 * transform.f0_slope + f1 * transform.f1_slope
        alpha_t = (new_alpha - transform.alpha_shift - lin) / transform.scale
        beta_t = (new_beta - transform.beta_shift + lin) / transform.scale
        self.store.set(indices, alpha_t, beta_t)
        self.num_updates += 1
        return alpha_t, beta_t

    def fold(self) -> Transform:
        """Fold the transform into the stored values (O(stored tasks), see :mod:`._store`) and reset it to the
        identity; returns the transform folded."""
        folded = self.transform.copy()
        self.store.fold(folded)
        self.transform.reset()
        return folded

    # -- the bound of the float32 pass ------------------------------------------------------------------------------

    def total_bound(self) -> float:
        """An upper bound on every task's α + β, from the configuration and the feedback count only (so the same
        for a resumed selector): α + β starts at 2 and gains at most ``m`` per feedback, decaying by ``1 − λ``,
        hence ≤ 2 + m·min(feedbacks, 1/λ)."""
        lamb = self.lamb
        steps = float(self.num_updates) if lamb == 0.0 else min(float(self.num_updates), 1.0 / lamb)
        return (2.0 + self.rollouts * steps) * (1.0 + 1e-9)

    def satisfies_invariants(self) -> bool:
        """Whether every task has α, β > 0 and s ≤ α + β ≤ :meth:`total_bound` (always true for a state the
        selector produced; the float32 error bound rests on it). O(N), on load only."""
        bound, s0 = self.total_bound(), self.transform.total_shift
        chunk = tuning.CHUNK
        tmp = np.empty(min(chunk, self.size))
        alpha, beta = np.empty_like(tmp), np.empty_like(tmp)
        for start in range(0, self.size, chunk):
            stop = min(start + chunk, self.size)
            width = stop - start
            self.slice_into(slice(start, stop), alpha[:width], beta[:width], tmp[:width])
            if not (alpha[:width].min() > 0.0 and beta[:width].min() > 0.0):
                return False
            np.add(alpha[:width], beta[:width], out=tmp[:width])
            if tmp[:width].max() > bound or tmp[:width].min() < s0 * (1.0 - 1e-9) - 1e-9:
                return False
        return True
