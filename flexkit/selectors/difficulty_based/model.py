"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

Source: Trinity-RFT (arXiv:2505.17826), its task-selection ``DifficultyBasedSelector`` ("Dynamically selects
samples near a target difficulty level using probabilistic modeling") with the ``InterpolationBetaPREstimator``
of ``trinity/buffer/selector``. This module holds the statistical model (configuration, Beta posteriors,
capability coefficient, feedback, state); the selection engine lives next to it: :mod:`.costs` (float32 mirrors
and full passes), :mod:`.index` (the greedy top-k without a pass), :mod:`.sampling` (``tau > 0``).

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
without replacement from softmax(score/τ) (a ``tau`` below :data:`~.tuning.GREEDY_TAU`, where that law is the
top ``k`` up to exact ties, is treated as 0).

Deviations from Trinity-RFT
---------------------------
* Features must lie in [0, 1] and ``c_est`` is clipped to [0, 1] before entering the average, so ``c``
  stays in [0, 1] and ``p̃`` is a convex combination of ``f0`` and ``f1``: it never needs Trinity-RFT's
  clip (and the lazy update below stays exact). Trinity-RFT lets ``c`` run free.
* Trinity-RFT divides by ``mean(f1[B]) − mean(f0[B]) + 1e-6``, which explodes when the two reference models
  agree on the batch. flexkit skips the ``c`` update for a batch where ``|mean(f1[B]) − mean(f0[B])| < 1e-6``
  and otherwise divides without the epsilon. Until a first estimate exists, ``c = 0.5`` is used.
* Feedback costs O(batch), not O(N): for unobserved tasks the update is the same affine map, so a global
  transform ``α_i = a·α̃_i + b + p·f0_i + q·f1_i``, ``β_i = a·β̃_i + b_β − p·f0_i − q·f1_i`` is kept and
  only the batch rows of ``α̃``, ``β̃`` are rewritten. When ``a`` gets tiny it is folded into the arrays
  (O(N), rare).
* Sampling without replacement from softmax(score/τ) is done without ever touching all N tasks when it can
  (:mod:`.sampling`); Trinity-RFT's ``torch.multinomial`` refuses more than 2^24 tasks. Greedy ties
  (tau = 0) go to the smaller index, and a batch is ordered best first (for tau > 0: in drawing order,
  which is the order of the Gumbel top-k, so the same distribution including the order).
* The whole state (the stored α̃, β̃ and the untouched model that gives the others, the transform, the model
  of a never-observed task, ``c``, the adapted ``ρ``, counters and the RNG) is saved; Trinity-RFT saves only a
  counter. Memory does not grow with untouched tasks beyond 4 bytes each (:mod:`.store`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError, StateMismatchError, TasksetError
from flexkit.selectors.base import Selector, read_feature_columns
from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based.costs import FastPassMixin
from flexkit.selectors.difficulty_based.features import as64, fast_column
from flexkit.selectors.difficulty_based.index import FeatureGrid, GreedyIndexMixin
from flexkit.selectors.difficulty_based.sampling import SamplingMixin
from flexkit.selectors.difficulty_based.store import make_store
from flexkit.selectors.difficulty_based.store_state import load_stored_tasks
from flexkit.selectors.difficulty_based.topk import smallest_k

#: Decay of the exponential moving average of the capability coefficient.
C_DECAY = 0.9
#: The capability coefficient used before the first estimate.
C_DEFAULT = 0.5
#: A batch whose reference features differ on average by less than this does not update ``c``.
C_DENOMINATOR_MIN = 1e-6
#: ``adaptive_rho`` halves ``rho`` when the batch's mean |prior − observed| reaches this.
ADAPTIVE_RHO_GAP = 0.25


@attrs.frozen(kw_only=True)
class DifficultyBasedConfig:
    """Parameters of the ``difficulty_based`` selector (names and defaults as in Trinity-RFT)."""

    feature_keys: tuple[str, ...] = field(
        default=("f0", "f1"),
        min_items=2,
        doc="Exactly two feature columns in [0, 1]: the pass rates of a weaker (f0) and a stronger (f1) "
        "reference model; the task's prior interpolates between them.",
    )
    m: int = field(
        default=16, ge=1, le=1_000_000,
        doc="Rollouts per task: one feedback value counts as m trials (at most 10^6, so float64 posteriors keep "
        "their precision).",
    )
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
        default=1.0, ge=0, le=1,
        doc="Preferred success rate: tasks predicted nearest it score highest. The default 1.0 (Trinity-RFT's) "
        "serves the easiest tasks first; most users want 0.5, tasks solved about half the time.",
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
    def _exactly_two(self, _attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
        if len(value) != 2:
            raise ConfigError(f"must name exactly 2 feature columns (f0, f1), got {len(value)}")


class DifficultyBasedSelector(SamplingMixin, GreedyIndexMixin, FastPassMixin, Selector):
    """Select tasks whose predicted success rate is nearest ``target_reward`` (see the module docstring).

    Costs: feedback O(batch) (plus a rare fold: O(observed tasks), O(N) with the mirrors). Selection with
    ``tau > 0`` usually O(batch) (rejection sampling); with ``tau = 0`` O(recently observed tasks + a slab of
    tasks near the target) through the greedy index (2^17 to 2^27 tasks), or else one float32 pass over N in
    cache-sized chunks (eight element-wise operations and a comparison per task) plus float64 work on the few
    tasks that pass its filter; ``do_sample`` and the untrusted-float32 fallback use a float64 pass with an
    N-sized cost array.

    Features: the two columns are kept as the caller's arrays, read-only views without a copy, whatever their
    numeric dtype (float64, float32, float16, integers, bools; values in [0, 1]); float64 values are computed
    from them per gathered batch or chunk (:mod:`.features`), so float32 input picks exactly what float64 input
    of the same values picks. Only float64 input up to ``tuning.FEATURE_MIRROR_MAX`` (2^25) tasks gets a float32
    copy (4 bytes per task and column) for the float32 pass.

    Memory: the posterior store (:mod:`.store`: 16 bytes per task up to 2^24 tasks; above, 4 bytes per task plus
    24 per task observed in the last fold periods), up to ``tuning.MIRROR_MAX`` tasks the float32 mirrors (8 bytes
    per task), and chunk buffers; the greedy index adds 12 bytes per task up to 2^25 tasks (20 with both grids),
    about 4.5 above (:mod:`.compact_grid`); only the envelope sampler (small ``tau``) allocates one N-sized float32
    array while it runs. Feedback may arrive late or for tasks that were not just selected. :meth:`posterior`
    gives the current Beta parameters.
    """

    Config = DifficultyBasedConfig
    learns_from_feedback = True
    #: The feature columns are kept as the caller's arrays whatever their numeric dtype (:mod:`.features`), so
    #: :func:`flexkit.make_selector` passes numeric numpy arrays through without a float64 copy.
    keeps_feature_dtypes = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    #: The transform is folded into the arrays when its scale drops below this.
    fold_below: float = 1e-30

    def _init_state(self) -> None:
        config = self.config
        cols = read_feature_columns(self.features, config.feature_keys, self.size, owner="difficulty_based")
        for key, col in zip(config.feature_keys, cols, strict=True):
            lo, hi = (float(col.min()), float(col.max())) if col.size else (0.0, 0.0)
            if lo < 0.0 or hi > 1.0:
                bad = lo if lo < 0.0 else hi
                raise TasksetError(
                    f"difficulty_based: feature column {key!r} must hold pass rates in [0, 1], got {bad!r}"
                )
        # The caller's arrays themselves (read-only views, any numeric dtype): float64 values are computed from
        # them row by row or chunk by chunk (:mod:`.features`), never as a full-size copy.
        self._f0, self._f1 = cols
        self._f0_fast, self._f1_fast = fast_column(self._f0, self.size), fast_column(self._f1, self.size)
        self._m = int(config.m)
        self._target = float(config.target_reward)
        self._tau = float(config.tau)
        self._store = make_store(self._f0, self._f1)
        if self.size <= tuning.MIRROR_MAX:
            self._d32: np.ndarray | None = np.empty(self.size, dtype=np.float32)
            self._s32: np.ndarray | None = np.empty(self.size, dtype=np.float32)
        else:
            self._d32 = self._s32 = None
        self._reset_transform()
        #: The capability coefficient c (None until the first estimate).
        self.capability: float | None = None
        #: The current ρ (``adaptive_rho`` may have halved it).
        self.rho = float(config.rho)
        self.num_feedback = 0
        self.num_selected = 0
        self.num_folds = 0
        self._trusted = True  # the state satisfies the invariants the float32 error bound rests on
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # float32 chunk buffers per pass part
        self._refresh_mirrors()
        # The model of a never-observed task's α̃ and α̃ + β̃ as affine functions of the features (m0 + mp·f0 +
        # mq·f1, ms; a fold maps it like every task), which the greedy index rests on; the index's feature grids
        # and dirty groups are built on first use.
        self._model = (1.0, 0.0, 0.0, 2.0)
        self._grids: dict[bool, FeatureGrid] = {}
        self._reset_index()

    # -- the Beta parameters ----------------------------------------------------------------------------

    def _reset_transform(self) -> None:
        self._a, self._b, self._b_beta, self._p, self._q = 1.0, 0.0, 0.0, 0.0, 0.0

    def posterior(self, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The current ``(alpha, beta)`` of the tasks ``indices`` (all tasks when ``None``)."""
        if indices is None:
            chunk = tuning.CHUNK
            alpha, beta = np.empty(self.size), np.empty(self.size)
            tmp = np.empty(min(chunk, self.size))
            for start in range(0, self.size, chunk):
                stop = min(start + chunk, self.size)
                self._true_slice(slice(start, stop), alpha[start:stop], beta[start:stop], tmp[: stop - start])
            return alpha, beta
        idx = np.asarray(indices, dtype=np.int64)
        f0, f1 = as64(self._f0[idx]), as64(self._f1[idx])
        alpha_t, beta_t = self._store.values(idx, f0, f1)
        pf0, qf1 = f0 * self._p, f1 * self._q
        alpha = alpha_t * self._a + self._b + pf0 + qf1
        beta = beta_t * self._a + self._b_beta - pf0 - qf1
        return alpha, beta

    @property
    def _alpha_t(self) -> np.ndarray:
        """Every task's ``α̃`` (a new N-sized array; for tests and inspection: the selector never builds it)."""
        return self._store.dense()[0]

    @property
    def _beta_t(self) -> np.ndarray:
        """Every task's ``β̃`` (a new N-sized array, like :attr:`_alpha_t`)."""
        return self._store.dense()[1]

    def _true_slice(self, sl: slice, alpha: np.ndarray, beta: np.ndarray, tmp: np.ndarray) -> None:
        """Write the true α, β of the tasks in ``sl`` into ``alpha`` and ``beta`` (same float steps as
        :meth:`posterior` with indices, so both give identical bits)."""
        self._store.slice_into(sl.start, sl.stop, alpha, beta)
        alpha *= self._a
        alpha += self._b
        beta *= self._a
        beta += self._b_beta
        np.multiply(as64(self._f0[sl]), self._p, out=tmp)
        alpha += tmp
        beta -= tmp
        np.multiply(as64(self._f1[sl]), self._q, out=tmp)
        alpha += tmp
        beta -= tmp

    def _fold(self) -> None:
        """Fold the global transform into ``α̃``, ``β̃`` (O(stored tasks), see :mod:`.store`; O(N) for the float32
        mirrors up to ``tuning.MIRROR_MAX`` tasks) and reset it to the identity."""
        a, model = self._a, self._model
        m0, mp, mq, ms = model
        b, b_beta, p, q = self._b, self._b_beta, self._p, self._q
        self._store.fold(a, b, b_beta, p, q)
        self._model = (a * m0 + b, a * mp + p, a * mq + q, a * ms + b + b_beta)
        self._reset_transform()
        self.num_folds += 1
        self._refresh_mirrors()
        self._index_folded(a, model, b, b_beta, p, q)

    def _c(self) -> float:
        return C_DEFAULT if self.capability is None else self.capability

    # -- feedback ---------------------------------------------------------------------------------------

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        lamb = float(self.config.lamb)
        g = 1.0 - lamb
        m = self._m
        f0b, f1b = as64(self._f0[indices]), as64(self._f1[indices])
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
        alpha_t = (new_alpha - self._b - lin) / self._a
        beta_t = (new_beta - self._b_beta + lin) / self._a
        self._store.set(indices, alpha_t, beta_t)
        self._mirror(indices, alpha_t, beta_t)
        self.num_feedback += 1
        if self._groups is not None:
            self._observe(indices, (alpha_t, alpha_t + beta_t, f0b, f1b))

    # -- selection --------------------------------------------------------------------------------------

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        drawn = None
        chosen: np.ndarray | None
        if self.config.do_sample:
            cost, drawn = self._exact_costs(with_noise=self._tau > 0, do_sample=True)
            chosen = smallest_k(cost, batch_size)
        elif self._tau < tuning.GREEDY_TAU:
            use_index = self._trusted and tuning.INDEX_MIN <= self.size <= tuning.INDEX_MAX
            chosen = self._greedy_indexed(batch_size) if use_index else None
            if chosen is None:
                coef = self._fast_coefficients()
                if coef is not None:
                    chosen = self._greedy_fast(batch_size, coef)
                else:
                    chosen = smallest_k(self._exact_costs(with_noise=False, do_sample=False)[0], batch_size)
        else:
            chosen = self._sample(batch_size)
        self.num_selected += batch_size
        info: dict[str, Any] = {}
        if return_extra_info:
            a_c, b_c = self.posterior(chosen)
            predicted = drawn[chosen] if drawn is not None else a_c / (a_c + b_c)
            info = {
                "scores": -np.abs(self._target - predicted),
                "predicted": predicted,
                "alpha": a_c,
                "beta": b_c,
                "capability": self.capability,
                "rho": self.rho,
            }
        return chosen, info

    # -- state --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the stored tasks' ``α̃``, ``β̃`` (``task_ids``, ``alpha_tilde``,
        ``beta_tilde``; copies) and the untouched model that gives every other task's (:mod:`.store`), the
        transform, ``c``, ``ρ``, counters, the RNG and the greedy index's model of a never-observed task (the
        float32 mirrors are rebuilt on load; the greedy index at the next greedy selection)."""
        return {
            **super().state_dict(),
            **self._store.state(),
            "transform": {"a": self._a, "b": self._b, "b_beta": self._b_beta, "p": self._p, "q": self._q},
            "capability": self.capability,
            "rho": self.rho,
            "num_feedback": self.num_feedback,
            "num_selected": self.num_selected,
            "num_folds": self.num_folds,
            "model": dict(zip(("m0", "mp", "mq", "ms"), self._model, strict=True)),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (lists in place of arrays are accepted), or a checkpoint of the
        earlier dense format (``alpha_tilde``, ``beta_tilde`` of every task, no ``task_ids``)."""
        stored = load_stored_tasks(state, self.size)
        transform = {k: float(state["transform"][k]) for k in ("a", "b", "b_beta", "p", "q")}
        if not transform["a"] > 0:
            raise StateMismatchError(f"saved transform scale must be positive, got {transform['a']!r}")
        capability, rho = state["capability"], float(state["rho"])
        if capability is not None and not 0.0 <= float(capability) <= 1.0:  # NaN fails too
            raise StateMismatchError(f"saved capability must be null or in [0, 1], got {capability!r}")
        if not 0.0 <= rho <= float(self.config.rho):  # adaptive_rho only halves it
            raise StateMismatchError(f"saved rho must be in [0, {self.config.rho}] (the configured rho), got {rho!r}")
        counters = {k: state[k] for k in ("num_feedback", "num_selected", "num_folds")}
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in counters.values()):
            raise StateMismatchError(f"saved counters must be ints >= 0, got {counters!r}")
        model = state.get("model")  # absent from older checkpoints: the index is slow until the next fold
        model = (1.0, 0.0, 0.0, 2.0) if model is None else tuple(float(model[k]) for k in ("m0", "mp", "mq", "ms"))
        if not all(math.isfinite(v) for v in model):
            raise StateMismatchError(f"saved model holds non-finite values: {model!r}")
        super().load_state_dict(state)
        if stored.dense:
            self._store.load_dense(stored.alpha, stored.beta, model[:3] if "model" in state else None)
        else:
            # the sparse format: load_stored_tasks set ids and untouched
            self._store.load(stored.untouched, stored.ids, stored.alpha, stored.beta)  # type: ignore[arg-type]
        self._a, self._b, self._b_beta = transform["a"], transform["b"], transform["b_beta"]
        self._p, self._q = transform["p"], transform["q"]
        self.capability = None if capability is None else float(capability)
        self.rho = rho
        self.num_feedback = int(state["num_feedback"])
        self.num_selected = int(state["num_selected"])
        self.num_folds = int(state["num_folds"])
        self._model = model
        self._reset_index()
        self._refresh_mirrors()
        self._trusted = self._check_invariants()
