"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

Source: Trinity-RFT task selection, the ``DifficultyBasedSelector`` example ("Dynamically selects samples
near a target difficulty level using probabilistic modeling"), with the exact update rules as described in
REFERENCE.md, seed 000 (its ``InterpolationBetaPREstimator``). Written from that description, not from code.

The model
---------
Each task ``i`` has a Beta(α_i, β_i) belief over its success probability, starting at Beta(1, 1). Two
feature columns ``f0``, ``f1`` in [0, 1] hold the pass rates of a weaker and a stronger reference model. On
feedback with mean rewards ``v`` for the batch tasks ``B`` (``m`` rollouts each):

1. capability coefficient: ``c_est = (mean(v) − mean(f0[B])) / (mean(f1[B]) − mean(f0[B]))``; ``c`` is an
   exponential moving average of ``c_est`` with decay 0.9 (the first estimate is taken as is);
2. interpolated prior ``p̃_i = f0_i + c·(f1_i − f0_i)`` for every task; observed tasks use ``p̃_i = v_i``;
3. with ``adaptive_rho``, ``ρ`` is halved (for good) when the batch's mean ``|p̃ − v|`` is at least 0.25;
4. every task: ``α ← (1−λ)α + λ + (1−ρ)s + ρ·p̃·m`` and ``β ← (1−λ)β + λ + (1−ρ)f + ρ·(1−p̃)·m`` with
   ``s = v·m``, ``f = (1−v)·m`` for observed tasks and ``s = f = 0`` for the others.

Selection scores every task by ``−|target_reward − p̂|``, ``p̂`` being the posterior mean α/(α+β) or, with
``do_sample``, a Thompson draw from Beta(α, β); ``tau = 0`` takes the top ``k``, ``tau > 0`` draws ``k``
without replacement from softmax(score/τ).

Deviations from the reference (flexkit)
---------------------------------------
* Features must lie in [0, 1] and ``c_est`` is clipped to [0, 1] before entering the average, so ``c``
  stays in [0, 1] and ``p̃`` is a convex combination of ``f0`` and ``f1``: it never needs the reference's
  clip (and the lazy update below stays exact). The reference lets ``c`` run free.
* The reference divides by ``mean(f1[B]) − mean(f0[B]) + 1e-6``, which explodes when the two reference models
  agree on the batch. flexkit skips the ``c`` update for a batch where ``|mean(f1[B]) − mean(f0[B])| < 1e-6``
  and otherwise divides without the epsilon. Until a first estimate exists, ``c = 0.5`` is used.
* Feedback costs O(batch), not O(N): for unobserved tasks the update is the same affine map, so a global
  transform ``α_i = a·α̃_i + b + p·f0_i + q·f1_i``, ``β_i = a·β̃_i + b_β − p·f0_i − q·f1_i`` is kept and
  only the batch rows of ``α̃``, ``β̃`` are rewritten. When ``a`` gets tiny it is folded into the arrays
  (O(N), rare).
* Sampling without replacement from softmax(score/τ) is the top ``k`` of ``score/τ + Gumbel noise`` (exactly
  the same distribution, including the order), computed with a partial sort (``np.partition``) in O(N); the
  reference's ``torch.multinomial`` refuses more than 2^24 tasks. Greedy ties (tau = 0) go to the smaller
  index, and a batch is ordered best first.
* The whole state (α̃, β̃, the transform, ``c``, the adapted ``ρ``, counters and the RNG) is saved; the
  reference saves only a counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.selectors.base import Seed, Selector, read_feature_columns

#: Decay of the exponential moving average of the capability coefficient.
C_DECAY = 0.9
#: The capability coefficient used before the first estimate.
C_DEFAULT = 0.5
#: A batch whose reference features differ on average by less than this does not update ``c``.
C_DENOMINATOR_MIN = 1e-6
#: ``adaptive_rho`` halves ``rho`` when the batch's mean |prior − observed| reaches this.
ADAPTIVE_RHO_GAP = 0.25
#: Number of tasks processed per vectorised step of a full pass (keeps temporaries in cache).
CHUNK = 1 << 15


@attrs.frozen(kw_only=True)
class DifficultyBasedConfig:
    """Parameters of the ``difficulty_based`` selector (names and defaults as in Trinity-RFT)."""

    feature_keys: tuple[str, ...] = field(
        default=("f0", "f1"),
        min_items=2,
        doc="Exactly two feature columns in [0, 1]: the pass rates of a weaker (f0) and a stronger (f1) "
        "reference model; the task's prior interpolates between them.",
    )
    m: int = field(default=16, ge=1, doc="Rollouts per task: one feedback value counts as m trials.")
    lamb: float = field(
        default=0.2, ge=0, lt=1, doc="Forgetting rate λ: each feedback moves every belief a fraction λ back."
    )
    rho: float = field(
        default=0.2, ge=0, le=1, doc="Weight ρ of the interpolated prior's pseudo-counts in each update."
    )
    adaptive_rho: bool = field(
        default=False, doc="Halve rho (for good) when a batch's mean |prior − observed| is at least 0.25."
    )
    target_reward: float = field(
        default=1.0, ge=0, le=1, doc="Preferred success rate: tasks predicted nearest it score highest."
    )
    tau: float = field(
        default=1.0,
        ge=0,
        doc="Softmax temperature over scores; 0 takes the top-scoring tasks deterministically.",
    )
    do_sample: bool = field(
        default=False, doc="Predict with a Thompson draw from each Beta posterior instead of its mean."
    )

    @feature_keys.validator
    def _exactly_two(self, _attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
        if len(value) != 2:
            raise ValueError(f"must name exactly 2 feature columns (f0, f1), got {len(value)}")


class DifficultyBasedSelector(Selector):
    """Select tasks whose predicted success rate is nearest ``target_reward`` (see the module docstring).

    Costs: feedback O(batch) (plus a rare O(N) fold); selection O(N), vectorised in cache-sized chunks, about
    a dozen element-wise passes (plus the Gumbel noise when ``tau > 0`` and Beta draws with ``do_sample``);
    besides the partial sort it allocates one N-sized float array (two with ``do_sample``). Feedback may
    arrive late or for tasks that were not just selected. :meth:`posterior` gives the current Beta parameters.
    """

    #: The transform is folded into the arrays when its scale drops below this.
    fold_below: float = 1e-30

    def __init__(
        self,
        config: DifficultyBasedConfig | None = None,
        *,
        size: int,
        seed: Seed = 0,
        features: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        config = config if config is not None else DifficultyBasedConfig()
        super().__init__(config, size=size, seed=seed, features=features)
        cols = read_feature_columns(self.features, config.feature_keys, self.size, owner="difficulty_based")
        checked = []
        for key, col in zip(config.feature_keys, cols, strict=True):
            col64 = np.asarray(col, dtype=np.float64)
            lo, hi = float(col64.min()), float(col64.max())
            if lo < 0.0 or hi > 1.0:
                bad = lo if lo < 0.0 else hi
                raise ValueError(
                    f"difficulty_based: feature column {key!r} must hold pass rates in [0, 1], got {bad!r}"
                )
            checked.append(col64)
        self._f0, self._f1 = checked
        self._m = int(config.m)
        self._alpha_t = np.ones(self.size)
        self._beta_t = np.ones(self.size)
        self._reset_transform()
        #: The capability coefficient c (None until the first estimate).
        self.capability: float | None = None
        #: The current ρ (``adaptive_rho`` may have halved it).
        self.rho = float(config.rho)
        self.num_feedback = 0
        self.num_selected = 0
        self.num_folds = 0

    # -- the Beta parameters ----------------------------------------------------------------------------

    def _reset_transform(self) -> None:
        self._a, self._b, self._b_beta, self._p, self._q = 1.0, 0.0, 0.0, 0.0, 0.0

    def posterior(self, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The current ``(alpha, beta)`` of the tasks ``indices`` (all tasks when ``None``)."""
        if indices is None:
            alpha, beta = np.empty(self.size), np.empty(self.size)
            tmp = np.empty(min(CHUNK, self.size))
            for start in range(0, self.size, CHUNK):
                stop = min(start + CHUNK, self.size)
                self._true_slice(slice(start, stop), alpha[start:stop], beta[start:stop], tmp[: stop - start])
            return alpha, beta
        idx = np.asarray(indices, dtype=np.int64)
        pf0, qf1 = self._f0[idx] * self._p, self._f1[idx] * self._q
        alpha = self._alpha_t[idx] * self._a + self._b + pf0 + qf1
        beta = self._beta_t[idx] * self._a + self._b_beta - pf0 - qf1
        return alpha, beta

    def _true_slice(self, sl: slice, alpha: np.ndarray, beta: np.ndarray, tmp: np.ndarray) -> None:
        """Write the true α, β of the tasks in ``sl`` into ``alpha`` and ``beta`` (same float steps as
        :meth:`posterior` with indices, so both give identical bits). ``alpha`` and ``beta`` may be the
        slices of ``α̃`` and ``β̃`` themselves (folding)."""
        np.multiply(self._alpha_t[sl], self._a, out=alpha)
        alpha += self._b
        np.multiply(self._beta_t[sl], self._a, out=beta)
        beta += self._b_beta
        np.multiply(self._f0[sl], self._p, out=tmp)
        alpha += tmp
        beta -= tmp
        np.multiply(self._f1[sl], self._q, out=tmp)
        alpha += tmp
        beta -= tmp

    def _fold(self) -> None:
        """Fold the global transform into ``α̃``, ``β̃`` (O(N)) and reset it to the identity."""
        tmp = np.empty(min(CHUNK, self.size))
        for start in range(0, self.size, CHUNK):
            sl = slice(start, min(start + CHUNK, self.size))
            self._true_slice(sl, self._alpha_t[sl], self._beta_t[sl], tmp[: sl.stop - start])
        self._reset_transform()
        self.num_folds += 1

    def _c(self) -> float:
        return C_DEFAULT if self.capability is None else self.capability

    # -- feedback ---------------------------------------------------------------------------------------

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        lamb = float(self.config.lamb)
        g = 1.0 - lamb
        m = self._m
        f0b, f1b = self._f0[indices], self._f1[indices]
        mean0, mean1 = float(f0b.mean()), float(f1b.mean())
        denominator = mean1 - mean0
        if abs(denominator) >= C_DENOMINATOR_MIN:
            c_est = min(max((float(values.mean()) - mean0) / denominator, 0.0), 1.0)
            old = self.capability
            self.capability = c_est if old is None else C_DECAY * old + (1.0 - C_DECAY) * c_est
        c = self._c()
        if self.config.adaptive_rho:
            prior = f0b + c * (f1b - f0b)
            if float(np.abs(prior - values).mean()) >= ADAPTIVE_RHO_GAP:
                self.rho *= 0.5
        rho = self.rho
        alpha_b, beta_b = self.posterior(indices)
        # Every task as if unobserved: α ← gα + λ + ρm((1−c)f0 + c·f1), β ← gβ + λ + ρm(1 − (1−c)f0 − c·f1).
        self._a *= g
        self._b = g * self._b + lamb
        self._b_beta = g * self._b_beta + lamb + rho * m
        self._p = g * self._p + rho * m * (1.0 - c)
        self._q = g * self._q + rho * m * c
        if self._a < self.fold_below:
            self._fold()
        # The observed tasks instead: p̃ = v, so (1−ρ)s + ρ·p̃·m = v·m.
        new_alpha = g * alpha_b + lamb + m * values
        new_beta = g * beta_b + lamb + m * (1.0 - values)
        lin = f0b * self._p + f1b * self._q
        self._alpha_t[indices] = (new_alpha - self._b - lin) / self._a
        self._beta_t[indices] = (new_beta - self._b_beta + lin) / self._a
        self.num_feedback += 1

    # -- selection --------------------------------------------------------------------------------------

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        n = self.size
        target = float(self.config.target_reward)
        tau = float(self.config.tau)
        do_sample = bool(self.config.do_sample)
        # Minimise cost = −score/τ − Gumbel = |p̂ − target|/τ + log(−log U)  (tau = 0: |p̂ − target|).
        cost = np.empty(n)
        drawn = np.empty(n) if do_sample else None  # Thompson draws, kept for the info dict
        width = min(CHUNK, n)
        alpha, beta, tmp = np.empty(width), np.empty(width), np.empty(width)
        a, b, s0, p, q = self._a, self._b, self._b + self._b_beta, self._p, self._q
        for start in range(0, n, CHUNK):
            stop = min(start + CHUNK, n)
            w, sl = stop - start, slice(start, stop)
            al, be, t = alpha[:w], beta[:w], tmp[:w]
            if drawn is not None:
                self._true_slice(sl, al, be, t)
                pred = drawn[sl]
                pred[...] = self.rng.beta(al, be)
            else:  # p̂ = α / (α + β) with α + β = a·(α̃ + β̃) + b + b_β: fewer passes than computing β
                np.multiply(self._alpha_t[sl], a, out=al)
                al += b
                np.multiply(self._f0[sl], p, out=t)
                al += t
                np.multiply(self._f1[sl], q, out=t)
                al += t
                np.add(self._alpha_t[sl], self._beta_t[sl], out=be)
                be *= a
                be += s0
                pred = np.divide(al, be, out=al)
            c = cost[sl]
            np.subtract(pred, target, out=c)
            np.abs(c, out=c)
            if tau > 0:
                c *= 1.0 / tau
                noise = self.rng.random(out=t)  # U in [0, 1)
                with np.errstate(divide="ignore"):  # U == 0 (p = 2^-53) gives +inf cost: never chosen
                    np.log(noise, out=noise)
                    np.negative(noise, out=noise)
                    np.log(noise, out=noise)
                c += noise
        chosen = smallest_k(cost, batch_size)
        self.num_selected += batch_size
        info: dict[str, Any] = {}
        if return_extra_info:
            a_c, b_c = self.posterior(chosen)
            predicted = drawn[chosen] if drawn is not None else a_c / (a_c + b_c)
            info = {
                "scores": -np.abs(target - predicted),
                "predicted": predicted,
                "alpha": a_c,
                "beta": b_c,
                "capability": self.capability,
                "rho": self.rho,
            }
        return chosen, info

    # -- state --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: ``α̃``, ``β̃`` (copies), the transform, ``c``, ``ρ``,
        counters and the RNG."""
        return {
            **super().state_dict(),
            "alpha_tilde": self._alpha_t.copy(),
            "beta_tilde": self._beta_t.copy(),
            "transform": {"a": self._a, "b": self._b, "b_beta": self._b_beta, "p": self._p, "q": self._q},
            "capability": self.capability,
            "rho": self.rho,
            "num_feedback": self.num_feedback,
            "num_selected": self.num_selected,
            "num_folds": self.num_folds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (lists in place of arrays are accepted)."""
        arrays = {}
        for key in ("alpha_tilde", "beta_tilde"):
            arr = np.array(state[key], dtype=np.float64)
            if arr.shape != (self.size,):
                raise ValueError(f"saved {key} has shape {arr.shape}, expected ({self.size},)")
            if not np.isfinite(arr).all():
                raise ValueError(f"saved {key} holds non-finite values")
            arrays[key] = arr
        transform = {k: float(state["transform"][k]) for k in ("a", "b", "b_beta", "p", "q")}
        if not transform["a"] > 0:
            raise ValueError(f"saved transform scale must be positive, got {transform['a']!r}")
        capability = state["capability"]
        super().load_state_dict(state)
        self._alpha_t, self._beta_t = arrays["alpha_tilde"], arrays["beta_tilde"]
        self._a, self._b, self._b_beta = transform["a"], transform["b"], transform["b_beta"]
        self._p, self._q = transform["p"], transform["q"]
        self.capability = None if capability is None else float(capability)
        self.rho = float(state["rho"])
        self.num_feedback = int(state["num_feedback"])
        self.num_selected = int(state["num_selected"])
        self.num_folds = int(state["num_folds"])


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
    for start in range(0, values.size, CHUNK):
        if need <= 0:
            break
        hits = np.flatnonzero(values[start : start + CHUNK] == target)[:need] + start
        found.append(hits)
        need -= hits.size
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)
