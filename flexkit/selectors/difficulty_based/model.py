"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

Source: Trinity-RFT (arXiv:2505.17826), its task-selection ``DifficultyBasedSelector`` ("Dynamically selects
samples near a target difficulty level using probabilistic modeling") with the ``InterpolationBetaPREstimator``
of ``trinity/buffer/selector``. This module holds the configuration and the selector, which composes named parts
and drives them: the capability coefficient, ``ρ``, feedback and state are its own; every task's Beta posterior
is :mod:`._posterior`'s (stored values, :mod:`._store`, under a global :mod:`._transform`); the selection engine is
:mod:`._costs` (exact costs and full passes, on the float32 :mod:`._mirrors`), :mod:`._index` (the greedy top-k
without a pass) and :mod:`._sampling` (``tau > 0``).

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
  (:mod:`._sampling`); Trinity-RFT's ``torch.multinomial`` refuses more than 2^24 tasks. Greedy ties
  (tau = 0) go to the smaller index, and a batch is ordered best first (for tau > 0: in drawing order,
  which is the order of the Gumbel top-k, so the same distribution including the order).
* The whole state (the stored α̃, β̃ and the untouched model that gives the others, the transform, the model
  of a never-observed task, ``c``, the adapted ``ρ``, counters and the RNG) is saved; Trinity-RFT saves only a
  counter. Memory does not grow with untouched tasks beyond 4 bytes each (:mod:`._store`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError, StateMismatchError, TasksetError
from flexkit.selectors._base import Selector, read_feature_columns
from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._costs import CostEngine
from flexkit.selectors.difficulty_based._features import FeaturePair
from flexkit.selectors.difficulty_based._index import GreedyIndex
from flexkit.selectors.difficulty_based._mirrors import Float32Mirrors
from flexkit.selectors.difficulty_based._posterior import BetaPosteriors
from flexkit.selectors.difficulty_based._sampling import SoftmaxSampler
from flexkit.selectors.difficulty_based._store_state import load_stored_tasks
from flexkit.selectors.difficulty_based._task_model import TaskModel
from flexkit.selectors.difficulty_based._topk import smallest_k
from flexkit.selectors.difficulty_based._transform import Transform

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


class DifficultyBasedSelector(Selector):
    """Select tasks whose predicted success rate is nearest ``target_reward`` (see the module docstring).

    Costs: feedback O(batch) (plus a rare fold: O(observed tasks), O(N) with the mirrors). Selection with
    ``tau > 0`` usually O(batch) (rejection sampling); with ``tau = 0`` O(recently observed tasks + a slab of
    tasks near the target) through the greedy index (2^17 to 2^27 tasks), or else one float32 pass over N in
    cache-sized chunks (eight element-wise operations and a comparison per task) plus float64 work on the few
    tasks that pass its filter; ``do_sample`` and the untrusted-float32 fallback use a float64 pass with an
    N-sized cost array.

    Features: the two columns are kept in their numeric dtype (float64, float32, float16, integers, bools; values
    in [0, 1]), read-only and checked once, at construction: as a copy of the caller's arrays, so that writing
    into them afterwards changes no selection (and cannot slip a NaN or a value outside [0, 1] past the checks);
    without a copy only when nobody can write them (a taskset's columns, or a read-only array that owns its
    memory: ``a.setflags(write=False)`` saves the copy for a huge taskset;
    :func:`~flexkit.read_feature_columns`). Float64 values are computed from them per gathered
    batch or chunk (:mod:`._features`), so float32 input picks exactly what float64 input of the same values
    picks. Only float64 input up to ``tuning.FEATURE_MIRROR_MAX`` (2^25) tasks gets a float32 copy (4 bytes per
    task and column) for the float32 pass.

    Memory: the posterior store (:mod:`._store`: 16 bytes per task up to 2^24 tasks; above, 4 bytes per task plus
    24 per task observed in the last fold periods), up to ``tuning.MIRROR_MAX`` tasks the float32 mirrors (8 bytes
    per task), and chunk buffers; the greedy index adds 12 bytes per task up to 2^25 tasks (20 with both grids),
    about 4.5 above (:mod:`._compact_grid`); only the envelope sampler (small ``tau``) allocates one N-sized float32
    array while it runs. Feedback may arrive late or for tasks that were not just selected. :meth:`posterior`
    gives the current Beta parameters.

    Parts, each built in :meth:`_init_state` and given what it reads: :attr:`feature_pair` (the two columns),
    :attr:`beliefs` (:class:`~._posterior.BetaPosteriors`), :attr:`mirrors` (:class:`~._mirrors.Float32Mirrors`),
    :attr:`costs` (:class:`~._costs.CostEngine`), :attr:`greedy_index` (:class:`~._index.GreedyIndex`) and
    :attr:`sampler` (:class:`~._sampling.SoftmaxSampler`). They share the selector's ``rng`` (the same object).
    """

    Config = DifficultyBasedConfig
    learns_from_feedback = True
    #: The feature columns are kept in their own numeric dtype (:mod:`._features`), so :func:`flexkit.make_selector`
    #: passes numeric numpy arrays through without a float64 copy.
    keeps_feature_dtypes = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    #: The transform is folded into the stored values when its scale drops below this.
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
        target, tau = float(config.target_reward), float(config.tau)
        # Read-only columns in any numeric dtype (copies of arrays the caller could still write): float64 values
        # are computed from them row by row or chunk by chunk (:mod:`._features`), never as a full-size copy.
        self.feature_pair = FeaturePair(*cols)
        self.beliefs = BetaPosteriors(self.feature_pair, rollouts=int(config.m), lamb=float(config.lamb))
        self.mirrors = Float32Mirrors(self.beliefs.store, target)
        self.costs = CostEngine(self.beliefs, self.mirrors, target=target, tau=tau, rng=self.rng)
        self.greedy_index = GreedyIndex(self.beliefs, self.costs, target=target)
        self.sampler = SoftmaxSampler(self.costs, tau=tau, rng=self.rng)
        #: The capability coefficient c (None until the first estimate).
        self.capability: float | None = None
        #: The current ρ (``adaptive_rho`` may have halved it).
        self.rho = float(config.rho)
        self.num_selected = 0
        self.num_folds = 0

    @property
    def num_feedback(self) -> int:
        """Feedbacks applied so far."""
        return self.beliefs.num_updates

    def predicted_pass_rates(self) -> np.ndarray:
        """Every task's posterior mean ``α / (α + β)``."""
        alpha, beta = self.posterior()
        mean: np.ndarray = np.asarray(alpha, dtype=np.float64) / (np.asarray(alpha) + np.asarray(beta))
        return mean

    def posterior(self, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The current ``(alpha, beta)`` of the tasks ``indices`` (all tasks when ``None``)."""
        if indices is None:
            return self.beliefs.all()
        return self.beliefs.of(np.asarray(indices, dtype=np.int64))

    def _fold(self) -> None:
        """Fold the transform into the stored values (O(stored tasks), see :mod:`._store`; O(N) for the float32
        mirrors up to ``tuning.MIRROR_MAX`` tasks) and reset it to the identity."""
        folded = self.beliefs.fold()
        self.num_folds += 1
        self.mirrors.refresh()
        self.greedy_index.folded(folded)

    def _capability(self) -> float:
        return C_DEFAULT if self.capability is None else self.capability

    # -- feedback ---------------------------------------------------------------------------------------

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        f0b, f1b = self.feature_pair.rows(indices)
        mean0, mean1 = float(f0b.mean()), float(f1b.mean())
        denominator = mean1 - mean0
        if abs(denominator) >= C_DENOMINATOR_MIN:
            c_est = min(max((float(values.mean()) - mean0) / denominator, 0.0), 1.0)
            old = self.capability
            self.capability = c_est if old is None else C_DECAY * old + (1.0 - C_DECAY) * c_est
        c = self._capability()
        if self.config.adaptive_rho:
            prior = f0b + c * (f1b - f0b)
            if float(np.abs(prior - values).mean()) >= ADAPTIVE_RHO_GAP:
                self.rho *= 0.5
        before = self.beliefs.of(indices, f0b, f1b)
        self.beliefs.forget(self.rho, c)
        if self.beliefs.transform.scale < self.fold_below:
            self._fold()
        alpha_t, beta_t = self.beliefs.set_observed(indices, f0b, f1b, before, values)
        self.mirrors.write(indices, alpha_t, beta_t)
        self.greedy_index.observe(indices, (alpha_t, alpha_t + beta_t, f0b, f1b))

    # -- selection --------------------------------------------------------------------------------------

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        drawn = None
        chosen: np.ndarray | None
        costs = self.costs
        if self.config.do_sample:
            cost, drawn = costs.exact_costs(with_noise=costs.tau > 0, do_sample=True)
            chosen = smallest_k(cost, batch_size)
        elif costs.tau < tuning.GREEDY_TAU:
            use_index = self.beliefs.trusted and tuning.INDEX_MIN <= self.size <= tuning.INDEX_MAX
            chosen = self.greedy_index.select(batch_size) if use_index else None
            if chosen is None:
                coef = costs.fast_coefficients()
                if coef is not None:
                    chosen = costs.greedy_fast(batch_size, coef)
                else:
                    chosen = smallest_k(costs.exact_costs(with_noise=False, do_sample=False)[0], batch_size)
        else:
            chosen = self.sampler.sample(batch_size)
        self.num_selected += batch_size
        info: dict[str, Any] = {}
        if return_extra_info:
            a_c, b_c = self.posterior(chosen)
            predicted = drawn[chosen] if drawn is not None else a_c / (a_c + b_c)
            info = {
                "scores": -np.abs(costs.target - predicted),
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
        ``beta_tilde``; copies) and the untouched model that gives every other task's (:mod:`._store`), the
        transform, ``c``, ``ρ``, counters, the RNG and the greedy index's model of a never-observed task (the
        float32 mirrors are rebuilt on load; the greedy index at the next greedy selection)."""
        return {
            **super().state_dict(),
            **self.beliefs.store.state(),
            "transform": self.beliefs.transform.state(),
            "capability": self.capability,
            "rho": self.rho,
            "num_feedback": self.num_feedback,
            "num_selected": self.num_selected,
            "num_folds": self.num_folds,
            "model": self.greedy_index.model.state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (lists in place of arrays are accepted), or a checkpoint of the
        earlier dense format (``alpha_tilde``, ``beta_tilde`` of every task, no ``task_ids``)."""
        stored = load_stored_tasks(state, self.size)
        transform = Transform.from_state(state["transform"])
        capability, rho = state["capability"], float(state["rho"])
        if capability is not None and not 0.0 <= float(capability) <= 1.0:  # NaN fails too
            raise StateMismatchError(f"saved capability must be null or in [0, 1], got {capability!r}")
        if not 0.0 <= rho <= float(self.config.rho):  # adaptive_rho only halves it
            raise StateMismatchError(f"saved rho must be in [0, {self.config.rho}] (the configured rho), got {rho!r}")
        counters = {k: state[k] for k in ("num_feedback", "num_selected", "num_folds")}
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in counters.values()):
            raise StateMismatchError(f"saved counters must be ints >= 0, got {counters!r}")
        # absent from older checkpoints: the index is slow until the next fold
        model = TaskModel.from_state(state.get("model"))
        super().load_state_dict(state)
        beliefs = self.beliefs
        if stored.dense:
            beliefs.store.load_dense(stored.alpha, stored.beta, model[:3] if "model" in state else None)
        else:
            # the sparse format: load_stored_tasks set ids and untouched
            beliefs.store.load(stored.untouched, stored.ids, stored.alpha, stored.beta)  # type: ignore[arg-type]
        beliefs.transform = transform
        self.capability = None if capability is None else float(capability)
        self.rho = rho
        beliefs.num_updates = int(state["num_feedback"])
        self.num_selected = int(state["num_selected"])
        self.num_folds = int(state["num_folds"])
        self.greedy_index.reset(model)
        self.mirrors.refresh()
        beliefs.trusted = beliefs.satisfies_invariants()
