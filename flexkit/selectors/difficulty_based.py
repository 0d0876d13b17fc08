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
without replacement from softmax(score/τ) (a ``tau`` below :data:`GREEDY_TAU`, where that law is the top
``k`` up to exact ties, is treated as 0).

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
* Sampling without replacement from softmax(score/τ) is done without ever touching all N tasks when it can
  (see *Selection* below); the reference's ``torch.multinomial`` refuses more than 2^24 tasks. Greedy ties
  (tau = 0) go to the smaller index, and a batch is ordered best first (for tau > 0: in drawing order,
  which is the order of the Gumbel top-k, so the same distribution including the order).
* The whole state (α̃, β̃, the transform, the model of a never-observed task, ``c``, the adapted ``ρ``,
  counters and the RNG) is saved; the reference saves only a counter.

Selection (how it stays fast)
-----------------------------
All scores are defined in float64 (``cost_i = |p̂_i − target|``, computed from the float64 state with the
same float steps everywhere, :meth:`DifficultyBasedSelector._cost64`). A full pass over N tasks instead runs
in float32 on mirrors kept next to the state: ``D = α̃ − target·(α̃ + β̃)`` and ``S = α̃ + β̃`` (updated for
the batch rows at each feedback, rebuilt on a fold or load), and float32 copies of ``f0``, ``f1`` (up to
:data:`FEATURE_MIRROR_MAX` tasks; above, the pass reads the float64 features). Dividing the transform by ``a``,
``cost_i = |D_i + (p/a)·f0_i + (q/a)·f1_i + (b − target·s)/a| / (S_i + s/a)`` with ``s = b + b_β``: eight
element-wise operations on cache-sized chunks. Every term is at most a few times ``(α_i + β_i)/a``, so the
float32 value is within :data:`COST32_MARGIN` of the float64 one, and the fast pass only ever *filters*:

* ``tau = 0``, from :data:`INDEX_MIN` to :data:`INDEX_MAX` tasks: no pass over N at all (see *The greedy
  index* below); otherwise, and whenever the index would read more than :data:`INDEX_BUDGET` of the tasks:
  a chunk's tasks whose float32 cost is within the margin of the running k-th best float64 cost get their
  float64 cost; a running top-k by (float64 cost, index) is merged from those. The result is bit-identical
  to a float64 top-k over all tasks, at the price of one float32 pass. With :data:`THREADS` > 1 (opt-in) the
  pass above :data:`PARALLEL_MIN` tasks is split between threads (numpy releases the GIL in its loops); the
  parts' top-k are merged exactly, so the result does not depend on the split.
* ``tau > 0``: exactly sequential sampling without replacement ∝ ``exp(−cost/τ)``, in up to three stages,
  each continuing from the tasks the previous one picked (each draw is exact whichever stage makes it):

  1. rejection from uniform proposals, accepting task ``i`` with probability ``exp(−cost_i/τ)`` (cost ≥ 0):
     O(k / acceptance) float64 work and no pass over N at all. With tau = 1 the acceptance is at least
     e^-1 (cost ≤ 1), so this stage finishes the batch all but surely, unless the batch is over a quarter
     of N (then stage 2 runs instead);
  2. when that needs too many proposals: one float32 pass builds an envelope ``w_i = exp(−min((cost_i −
     c_min)/τ, 80))`` with block sums, proposals are drawn from it and accepted with the exact float64
     ratio (the float32 error is covered by the factor ``exp(margin/τ)``);
  3. when τ is so small that even that stalls (or below ``COST32_MARGIN``, where the float32 envelope is
     too loose to try): the Gumbel top-k restricted to the tasks within ``τ·(ln N + 45)`` of the r-th
     smallest cost (float64 Gumbel noise for those only; a task outside the window would be drawn with
     probability below e^-40).

  When the float32 pass cannot be trusted (extreme ``m``/``lamb``/``fold_below`` making magnitudes overflow
  float32, or a loaded state that breaks the model's invariants), stages 2–3 are replaced by the float64 pass
  with Gumbel noise over all tasks; ``do_sample`` always uses that float64 pass (Thompson draws for every task).

The random stream therefore differs from a plain "Gumbel noise for every task" implementation, while the
distribution is the same; every draw is a deterministic function of the saved state, so resuming is exact.

The greedy index (``tau = 0``)
------------------------------
A global transform is not order-preserving here (``p̂ = α/(α + β)`` mixes the stored values with both
features, in a direction ``(p, q)`` that moves with ``c``), so one sorted array of stored values cannot give
the top k. What does hold: a task never observed since the last fold has ``α̃ = m0 + mp·f0 + mq·f1`` and
``α̃ + β̃ = ms`` for four scalars (the *model*, saved; a fold maps it like every task), so its true
``α = N0 + P·f0 + Q·f1`` and ``α + β = D0`` with ``N0 = a·m0 + b``, ``P = a·mp + p``, ``Q = a·mq + q``,
``D0 = a·ms + s``. Its cost is then ``|P·f0 + Q·f1 − h*| / D0`` with ``h* = target·D0 − N0``: the tasks
nearest the target lie in a *slab* of the feature plane, ``|P·f0 + Q·f1 − h*| ≤ W``.

* The *grid* (:class:`~flexkit.selectors._greedy_index.SlabGrid`, built on first use, 8 bytes per task) sorts
  the tasks by a row of one feature and, within a row, the other; a slab is a run of positions per row,
  found in O(1) per row from a bucket table. It is keyed by the feature with the larger coefficient (a
  second grid is built if the other one comes to dominate by more than 2×).
* An observed task departs from the model by a *residual* ``r = |α̃ − model| + |α̃ + β̃ − ms|``, which the
  transform shrinks with ``a``: it moves a cost by at most about ``2·a·r/D0``. Each feedback's tasks form a
  *dirty group* (:class:`~flexkit.selectors._greedy_index.DirtyGroups`) with a copy of their rows; dirty tasks
  are scored one by one. A group is released once ``a·r`` is small (:data:`RELEASE_EPS`; about 40 feedbacks
  with the default ``lamb``), or early when more than :data:`DIRTY_MAX` tasks (or :data:`DIRTY_FRACTION` of
  them) are held; the largest released residual ``U`` bounds every regular task's.
* Selection: the dirty tasks' float64 costs; a slab with at least k regular tasks (searched from the last
  step's width) and their float64 costs; θ = the k-th smallest of all these. Every other regular task costs
  more than ``|P·f0 + Q·f1 − h*|/D0 − eps`` where ``eps`` covers ``U`` (``a·U·(2 + …)/(D0 − a·U)``) and,
  generously, the float rounding of the costs and of the scalars; so the final slab ``W = D0·(θ + eps)``
  holds every task that can reach the top k, which is then taken by (float64 cost, index), bit-identical to
  the pass. Cost per step: O(dirty + slab tasks + grid rows) ≈ 15,000 float64 costs at N = 10^6 with the
  defaults; feedback adds O(batch). A fold (every ~310 feedbacks with the default ``lamb``) scales every
  residual by ``a``: the bounds are mapped in place (plus the fold's rounding) and the dirty rows re-read,
  O(dirty tasks). After a load the next selection measures the residuals in one float64 pass.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.selectors._greedy_index import U64, DirtyGroups, SlabGrid, grid_bits
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
CHUNK = 1 << 16
#: Threads for the float32 pass of ``tau = 0`` (numpy releases the GIL in its loops). 1 (the default) runs it
#: inline; 2 made a step at N = 10^6 about 1.3× faster on an idle 2-core machine but slower on a busy one,
#: so splitting is opt-in: ``flexkit.selectors.difficulty_based.THREADS = 2``.
THREADS = 1
#: Below this many tasks the pass always runs in the calling thread.
PARALLEL_MIN = 1 << 18
_POOL: tuple[int, ThreadPoolExecutor] | None = None
#: Unit roundoff of float32.
U32 = 2.0**-24
#: Bound on |float32 cost − float64 cost| of one task. The float steps of the fast pass err by at most about
#: 50·U32 (every term is at most 5·(α+β)/a, see the module docstring); the margin leaves a factor 2.5.
COST32_MARGIN = 128 * U32
#: Up to this many tasks the features get float32 copies for the fast pass (8 bytes per task); above it the
#: pass reads the float64 features (slower, but no extra memory at N = 10^8).
FEATURE_MIRROR_MAX = 1 << 25
#: The float32 pass is used only while every magnitude it meets stays below this (float32 max is 3.4e38).
FLOAT32_LIMIT = 1e36
#: Envelope sampler: block width, and the clamp of the exponent in temperature units (e^-80 is a normal float32).
ENVELOPE_BLOCK = 64
ENVELOPE_CLAMP = 80.0
#: The envelope stage runs only while its float32 slack ``COST32_MARGIN/τ`` stays below this (acceptance ≥ e^-1).
ENVELOPE_MAX_SLACK = 1.0
#: Below this temperature softmax sampling is taken as the greedy top-k: costs are differences of doubles in
#: [0, 1] that, unless tied, differ by far more than 1000·τ (weights apart by e^1000 and more), and cost/τ would
#: leave float64 for the smallest τ.
GREEDY_TAU = 1e-290
#: Gumbel window: tasks costing more than the r-th smallest + τ·(ln N + GUMBEL_WINDOW) are left out of the
#: last-resort sampler (together they would be drawn with probability below e^-40).
GUMBEL_WINDOW = 45.0
#: Greedy index (``tau = 0``): used for tasksets of this many tasks and more (below, the float32 pass is as fast:
#: the index scores the ~10^4 recently observed tasks at every step whatever N)...
INDEX_MIN = 1 << 17
#: ...and at most this many (the grids and stamps cost 12 to 20 bytes per task).
INDEX_MAX = FEATURE_MIRROR_MAX
#: A group of observed tasks is released (scored through the grid again) once its residual can move a cost by
#: at most about this much; the regular tasks' cost bound, and so the slab's widening, stays near it.
RELEASE_EPS = 2.0**-12
#: At most this many dirty tasks (scored one by one at every selection), or DIRTY_FRACTION of the tasks if
#: more; beyond, the oldest groups are released early (a small ``lamb`` keeps observations relevant for long).
DIRTY_MAX = 1 << 15
DIRTY_FRACTION = 1 / 16
#: The index gives way to the float32 pass when it would score more than this fraction of the tasks.
INDEX_BUDGET = 0.125
#: The slab search aims at this many times k tasks, in at most SLAB_STEPS tries.
SLAB_TARGET = 32
SLAB_STEPS = 40


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

    Costs: feedback O(batch) (plus a rare O(N) fold). Selection with ``tau > 0`` usually O(batch) (rejection
    sampling); with ``tau = 0`` O(recently observed tasks + a slab of tasks near the target) through the
    greedy index, or else one float32 pass over N in cache-sized chunks (eight element-wise operations and a
    comparison per task) plus float64 work on the few tasks that pass its filter; ``do_sample`` and the
    untrusted-float32 fallback use a float64 pass with an N-sized cost array. Memory: the float64 state
    (16 bytes per task), float32 mirrors (8 bytes per task, 16 up to :data:`FEATURE_MIRROR_MAX` tasks) and
    chunk buffers; the greedy index adds 12 bytes per task (20 with both grids); only the envelope and
    Gumbel-window samplers (small ``tau``) allocate one N-sized float32 array while they run. Feedback may
    arrive late or for tasks that were not just selected. :meth:`posterior` gives the current Beta parameters.
    """

    #: The transform is folded into the arrays when its scale drops below this.
    fold_below: float = 1e-30
    #: ``tau > 0``: proposals per requested task the rejection stage may spend before the envelope stage.
    rejection_budget: int = 16
    #: ``tau > 0``: proposals per remaining task the envelope stage may spend before the Gumbel window.
    envelope_budget: int = 64

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
        if self.size <= FEATURE_MIRROR_MAX:
            self._f0_fast, self._f1_fast = self._f0.astype(np.float32), self._f1.astype(np.float32)
        else:
            self._f0_fast, self._f1_fast = self._f0, self._f1
        self._m = int(config.m)
        self._target = float(config.target_reward)
        self._tau = float(config.tau)
        self._alpha_t = np.ones(self.size)
        self._beta_t = np.ones(self.size)
        self._d32 = np.empty(self.size, dtype=np.float32)
        self._s32 = np.empty(self.size, dtype=np.float32)
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
        # The greedy index: a model of a never-observed task's α̃ and α̃ + β̃ as affine functions of the features
        # (m0 + mp·f0 + mq·f1, ms; a fold maps it like every task), the feature grids, and the dirty groups
        # (None until the first indexed selection and after a load).
        self._model = (1.0, 0.0, 0.0, 2.0)
        self._grids: dict[bool, SlabGrid] = {}
        self._groups: DirtyGroups | None = None
        self._width: float | None = None  # the last slab half-width (the next search starts near it)
        self._drift = 0.0  # how much it changed

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
        a, (m0, mp, mq, ms) = self._a, self._model
        b, b_beta, p, q = self._b, self._b_beta, self._p, self._q
        self._model = (a * m0 + b, a * mp + p, a * mq + q, a * ms + b + b_beta)
        self._reset_transform()
        self.num_folds += 1
        self._refresh_mirrors()
        if self._groups is not None:
            # A residual r becomes a·r plus the rounding of the fold (six float steps on α and on β, each within
            # u of a partial sum at most a·(|model| + 2r) + |b| + |b_β| + |p| + |q|) and of the new model.
            size = abs(m0) + abs(mp) + abs(mq) + abs(ms)
            loose = abs(b) + abs(b_beta) + abs(p) + abs(q) + abs(b + b_beta)

            def folded(bound: float) -> float:
                return (a * bound + 32.0 * U64 * (a * (size + 2.0 * bound) + loose)) * (1.0 + 8.0 * U64)

            self._groups.rescale(folded)
            self._groups.refresh_rows(self._group_rows)

    def _c(self) -> float:
        return C_DEFAULT if self.capability is None else self.capability

    # -- float32 mirrors and the fast pass ---------------------------------------------------------------

    def _mirror(self, rows: slice | np.ndarray) -> None:
        """Recompute the float32 mirrors ``D = α̃ − target·(α̃ + β̃)`` and ``S = α̃ + β̃`` of ``rows`` from the
        float64 state (the same bits whether done for a batch, a slice or all tasks)."""
        alpha_t = self._alpha_t[rows]
        total = alpha_t + self._beta_t[rows]
        with np.errstate(over="ignore"):  # beyond float32 only while the fast pass is off (_fast_coefficients)
            self._s32[rows] = total
            total *= self._target
            np.subtract(alpha_t, total, out=total)
            self._d32[rows] = total

    def _refresh_mirrors(self) -> None:
        for start in range(0, self.size, CHUNK):
            self._mirror(slice(start, min(start + CHUNK, self.size)))

    def _den_bound(self) -> float:
        """An upper bound on every task's α + β, from the configuration and the feedback count only (so the
        same for a resumed selector): α + β starts at 2 and gains at most ``m`` per feedback, decaying by
        ``1 − λ``, hence ≤ 2 + m·min(feedbacks, 1/λ)."""
        lamb = float(self.config.lamb)
        steps = float(self.num_feedback) if lamb == 0.0 else min(float(self.num_feedback), 1.0 / lamb)
        return (2.0 + self._m * steps) * (1.0 + 1e-9)

    def _fast_coefficients(self) -> tuple[np.float32, np.float32, np.float32, np.float32] | None:
        """The float32 scalars of the fast pass, or None when it cannot be trusted (see the module docstring)."""
        a = self._a
        if not self._trusted or not a > 0.0 or 8.0 * self._den_bound() / a >= FLOAT32_LIMIT:
            return None
        s0 = self._b + self._b_beta
        coef = (self._p / a, self._q / a, (self._b - self._target * s0) / a, s0 / a)
        return tuple(np.float32(c) for c in coef)  # type: ignore[return-value]

    def _cost32(self, start: int, stop: int, out: np.ndarray, tmp: np.ndarray, coef: tuple) -> None:
        """Write the float32 cost ``|p̂ − target|`` of tasks ``start:stop`` into ``out`` (``tmp``: scratch)."""
        p, q, k, s = coef
        sl = slice(start, stop)
        np.multiply(self._f0_fast[sl], p, out=tmp, casting="same_kind")
        np.add(self._d32[sl], tmp, out=out)
        np.multiply(self._f1_fast[sl], q, out=tmp, casting="same_kind")
        out += tmp
        out += k
        np.add(self._s32[sl], s, out=tmp)
        out /= tmp
        np.abs(out, out=out)

    def _cost32_all(self, out: np.ndarray, coef: tuple) -> None:
        tmp = np.empty(min(CHUNK, self.size), dtype=np.float32)
        for start in range(0, self.size, CHUNK):
            stop = min(start + CHUNK, self.size)
            self._cost32(start, stop, out[start:stop], tmp[: stop - start], coef)

    def _cost64(self, idx: np.ndarray) -> np.ndarray:
        """The exact float64 cost ``|p̂ − target|`` of the tasks ``idx``: the same float steps as the float64
        pass (:meth:`_exact_costs`), so the same bits."""
        alpha_t = self._alpha_t[idx]
        return self._cost64_rows(alpha_t, alpha_t + self._beta_t[idx], self._f0[idx], self._f1[idx])

    def _cost64_rows(self, alpha_t: np.ndarray, total: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> np.ndarray:
        """:meth:`_cost64` of tasks given by their rows ``α̃``, ``α̃ + β̃``, ``f0``, ``f1`` (same float steps)."""
        a, s0 = self._a, self._b + self._b_beta
        pred = alpha_t * a
        pred += self._b
        tmp = f0 * self._p
        pred += tmp
        np.multiply(f1, self._q, out=tmp)
        pred += tmp
        den = total * a
        den += s0
        pred /= den
        pred -= self._target
        return np.abs(pred, out=pred)

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
        alpha_t = (new_alpha - self._b - lin) / self._a
        beta_t = (new_beta - self._b_beta + lin) / self._a
        self._alpha_t[indices] = alpha_t
        self._beta_t[indices] = beta_t
        self._mirror(indices)
        self.num_feedback += 1
        if self._groups is not None:
            self._observe(indices, (alpha_t, alpha_t + beta_t, f0b, f1b))

    # -- selection --------------------------------------------------------------------------------------

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        drawn = None
        if self.config.do_sample:
            cost, drawn = self._exact_costs(with_noise=self._tau > 0, do_sample=True)
            chosen = smallest_k(cost, batch_size)
        elif self._tau < GREEDY_TAU:
            use_index = self._trusted and INDEX_MIN <= self.size <= INDEX_MAX
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

    def _exact_costs(self, *, with_noise: bool, do_sample: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """The float64 pass: an N-sized array to minimise, ``|p̂ − target|/τ + log(−log U)`` (Gumbel noise,
        ``with_noise``) or ``|p̂ − target|``; with ``do_sample`` p̂ is a Thompson draw (also returned)."""
        n = self.size
        target, tau = self._target, self._tau
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
            if with_noise:
                if 1.0 / tau < math.inf:
                    c *= 1.0 / tau
                else:  # a subnormal tau: 0/τ must stay 0, not 0·inf
                    with np.errstate(over="ignore"):
                        c /= tau
                noise = self.rng.random(out=t)  # U in [0, 1)
                with np.errstate(divide="ignore"):  # U == 0 (p = 2^-53) gives +inf cost: never chosen
                    np.log(noise, out=noise)
                    np.negative(noise, out=noise)
                    np.log(noise, out=noise)
                c += noise
        return cost, drawn

    def _greedy_fast(self, k: int, coef: tuple) -> np.ndarray:
        """The ``k`` tasks of smallest float64 cost, ties to the smaller index, best first: one float32 pass
        whose filter lets through every task that can still enter the running top-k (see the module
        docstring); bit-identical to ``smallest_k`` over the float64 costs. With :data:`THREADS` > 1 and at
        least :data:`PARALLEL_MIN` tasks the pass is split into :data:`THREADS` contiguous parts run side by
        side (numpy releases the GIL in its loops); the parts' top-k are merged exactly, so the result does
        not depend on the split."""
        n = self.size
        parts = THREADS if n >= PARALLEL_MIN and THREADS > 1 else 1
        if parts == 1:
            idx, key = self._greedy_part(0, n, k, coef, 0, CHUNK)
        else:  # larger chunks: fewer calls, so less contention for the GIL between the calls
            chunk = 2 * CHUNK
            step = -(-n // (parts * chunk)) * chunk
            bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
            futures = [
                _pool().submit(self._greedy_part, lo, hi, k, coef, part, chunk)
                for part, (lo, hi) in enumerate(bounds[1:], start=1)
            ]
            found = [self._greedy_part(*bounds[0], k, coef, 0, chunk)] + [f.result() for f in futures]
            idx, key = _smallest_pairs(np.concatenate([i for i, _ in found]), np.concatenate([c for _, c in found]), k)
        return idx[np.lexsort((idx, key))]

    def _greedy_part(
        self, lo: int, hi: int, k: int, coef: tuple, part: int, chunk: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The (up to) ``k`` best (index, float64 cost) pairs among tasks ``lo:hi``, in no particular order."""
        cost, tmp = self._scratch(part, chunk)
        best = _RunningBest(k, self._cost64)
        # A short first chunk: partitioning it for a first threshold is cheap, and the next chunk tightens it.
        first = min(chunk, 64 * k)
        threshold, limit = np.inf, np.float32(np.inf)
        for start in (lo, *range(lo + first, hi, chunk)):
            stop = min(start + (first if start == lo else chunk), hi)
            c = cost[: stop - start]
            self._cost32(start, stop, c, tmp[: stop - start], coef)
            if best.full:
                if best.threshold != threshold:
                    threshold = best.threshold
                    limit = _round_up32(threshold + COST32_MARGIN)
                cand = np.flatnonzero(c <= limit)
            elif c.size >= k:  # the chunk alone holds k tasks within its k-th smallest float32 cost
                kth = float(np.partition(c, k - 1)[k - 1])
                cand = np.flatnonzero(c <= _round_up32(kth + 2.0 * COST32_MARGIN))
            else:
                cand = np.arange(c.size)
            if cand.size:
                cand += start
                best.offer(cand)
        return best.result()

    # -- the greedy index ---------------------------------------------------------------------------------

    def _model_now(self) -> tuple[float, float, float, float]:
        """The model in true units: a never-observed task has α = N0 + P·f0 + Q·f1 and α + β = D0 (real
        arithmetic on the stored floats; computed here in float64)."""
        a, (m0, mp, mq, ms) = self._a, self._model
        return a * m0 + self._b, a * mp + self._p, a * mq + self._q, a * ms + self._b + self._b_beta

    def _release_limit(self) -> float:
        """A group is released when its residual bound (in α̃ units) is at most this: then it shifts a regular
        task's cost by about ``RELEASE_EPS`` at most."""
        d0 = self._model_now()[3]
        return 0.5 * RELEASE_EPS * d0 / self._a

    def _residual_bound(self, alpha_t: np.ndarray, total: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> np.ndarray:
        """Per task, an upper bound on ``|α̃ − (m0 + mp·f0 + mq·f1)| + |α̃ + β̃ − ms|`` (real arithmetic; the
        float error of computing it is added), from the rows ``α̃``, ``α̃ + β̃`` (rounded), ``f0``, ``f1``."""
        m0, mp, mq, ms = self._model
        r = f0 * mp
        r += f1 * mq
        r += m0
        np.subtract(alpha_t, r, out=r)
        np.abs(r, out=r)
        d = total - ms
        np.abs(d, out=d)
        r += d
        np.abs(alpha_t, out=d)
        d += np.abs(total)
        d += abs(m0) + abs(mp) + abs(mq) + abs(ms)
        d *= 8.0 * U64
        r += d
        r *= 1.0 + 16.0 * U64
        return r

    def _group_rows(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What a dirty group keeps to score its tasks: ``α̃``, ``α̃ + β̃``, ``f0``, ``f1`` (copies)."""
        alpha_t = self._alpha_t[idx]
        return alpha_t, alpha_t + self._beta_t[idx], self._f0[idx], self._f1[idx]

    def _dirty_max(self) -> int:
        return max(DIRTY_MAX, int(DIRTY_FRACTION * self.size))

    def _observe(self, indices: np.ndarray, rows: tuple[np.ndarray, ...]) -> None:
        """Feedback rewrote the rows ``indices`` (now ``rows``, as :meth:`_group_rows` gives them): they form a
        new dirty group; release the groups that have decayed enough (or the oldest, beyond
        :meth:`_dirty_max` tasks)."""
        groups = self._groups
        assert groups is not None
        if groups.exhausted:
            self._groups = None
            return
        groups.add(indices, float(self._residual_bound(*rows).max()), rows)
        groups.release(self._release_limit(), self._dirty_max())

    def _rebuild_groups(self) -> DirtyGroups:
        """One pass over all tasks: the regular tasks' residual bound, and one dirty group of the tasks
        above the release limit (at most :meth:`_dirty_max`, the largest)."""
        groups = DirtyGroups(self.size, 4)
        limit = self._release_limit()
        hot_idx: list[np.ndarray] = []
        hot_bound: list[np.ndarray] = []
        held, regular, most = 0, 0.0, self._dirty_max()
        for start in range(0, self.size, CHUNK):
            sl = slice(start, min(start + CHUNK, self.size))
            alpha_t = self._alpha_t[sl]
            bound = self._residual_bound(alpha_t, alpha_t + self._beta_t[sl], self._f0[sl], self._f1[sl])
            hot = ~(bound <= limit)  # NaN (never from a state this class made) stays dirty
            if not hot.all():
                regular = max(regular, float(bound[~hot].max()))
            if hot.any():
                hot_idx.append(np.flatnonzero(hot) + start)
                hot_bound.append(bound[hot])
                held += hot_idx[-1].size
            if held > 2 * most or (held > most and sl.stop == self.size):  # keep the largest
                idx, bnd = np.concatenate(hot_idx), np.concatenate(hot_bound)
                drop = bnd.size - most
                cut = np.argpartition(bnd, drop - 1)
                regular = max(regular, float(bnd[cut[:drop]].max()))
                hot_idx, hot_bound, held = [idx[cut[drop:]]], [bnd[cut[drop:]]], most
        groups.bound = regular
        if held:
            idx, bnd = np.concatenate(hot_idx), np.concatenate(hot_bound)
            idx.sort()
            groups.add(idx, float(bnd.max()), self._group_rows(idx))
            groups.release(limit, self._dirty_max())
        return groups

    def _grid(self, by_f0: bool) -> SlabGrid:
        """The feature grid keyed by ``f0`` (rows of ``f1``) or the other way round, built on first use."""
        grid = self._grids.get(by_f0)
        if grid is None:
            x, y = (self._f0, self._f1) if by_f0 else (self._f1, self._f0)
            bits = grid_bits(self.size)
            grid = self._grids[by_f0] = SlabGrid(x, y, row_bits=bits, col_bits=bits)
        return grid

    def _greedy_indexed(self, k: int) -> np.ndarray | None:
        """The greedy top-k (as :meth:`_greedy_fast`, bit for bit) without a pass over all tasks, or None when
        the index would not be cheaper (the caller then runs the pass).

        A regular task's cost is within ``eps`` of ``|P·f0 + Q·f1 − h*| / D0`` (the model plus its residual
        bound, and float error); dirty tasks are scored one by one. The slab ``|P·f0 + Q·f1 − h*| ≤ W`` is
        widened until it holds k tasks; its tasks are scored exactly, giving the k-th best cost θ; then every
        regular task in ``|P·f0 + Q·f1 − h*| ≤ D0·(θ + eps)`` is scored, and no task outside can beat θ."""
        if self._groups is None:
            self._groups = self._rebuild_groups()
        groups = self._groups
        n0, cp, cq, d0 = self._model_now()
        a_bound = self._a * groups.bound
        den_min = d0 - a_bound
        scale = abs(n0) + abs(cp) + abs(cq) + abs(d0)
        if not (den_min > 0.0 and max(abs(cp), abs(cq)) > 64.0 * U64 * scale):
            return None
        # eps: the residual (model), the float evaluation of a cost (generously), and the float scalars above.
        loose = abs(self._b) + abs(self._p) + abs(self._q) + abs(self._b + self._b_beta)
        a, (m0, mp, mq, ms) = self._a, self._model
        scalars = a * (abs(m0) + abs(mp) + abs(mq) + abs(ms)) + loose + abs(self._target * d0 - n0)
        eps = a_bound * (1.0 + (d0 + 2.0 * a_bound) / d0) / den_min
        eps += 32.0 * U64 * (8.0 + 8.0 * loose / den_min) + 16.0 * U64 * scalars / den_min
        eps *= 1.01
        # Key the grid on the feature with the larger coefficient; a grid already built serves while its key's
        # coefficient is at least half the other (each grid costs a sort of all tasks to build).
        by_f0 = abs(cp) >= abs(cq)
        if by_f0 not in self._grids and (not by_f0) in self._grids:
            by_f0 = by_f0 if max(abs(cp), abs(cq)) > 2.0 * min(abs(cp), abs(cq)) else not by_f0
        cx, cy = (cp, cq) if by_f0 else (cq, cp)
        h_star = self._target * d0 - n0
        sign = 1.0 if cx > 0 else -1.0
        cx, cy, h_star = sign * cx, sign * cy, sign * h_star
        grid = self._grid(by_f0)
        budget = max(int(INDEX_BUDGET * self.size), 4 * k)
        dirty, dirty_cost = self._dirty_costs(groups)
        found = self._slab_search(
            by_f0, cx, cy, h_star, min(k, self.size - dirty.size), budget, groups.stamp, dirty.size
        )
        if found is None:
            return None
        cand, width = found
        if dirty.size + cand.size > budget:
            return None
        cost = np.concatenate([dirty_cost, self._cost64(cand)])
        theta = float(np.partition(cost, k - 1)[k - 1])
        need = d0 * (theta + eps) * (1.0 + 16.0 * U64)
        if need > width:  # the final slab: every regular task that can still beat theta
            runs = grid.runs(cx, cy, h_star - need, h_star + need)
            if runs.size + dirty.size > budget:
                return None
            cand = grid.points(runs)
            cand = cand[groups.stamp[cand] < 0]
            cost = np.concatenate([dirty_cost, self._cost64(cand)])
        # The next selection starts a little wider than this one needed (its best tasks move a little).
        if self._width is not None:
            self._drift = abs(need + 4.0 * d0 * eps - self._width)
        self._width = need + 4.0 * d0 * eps
        idx, key = _smallest_pairs(np.concatenate([dirty, cand]), cost, k)
        return idx[np.lexsort((idx, key))]

    def _dirty_costs(self, groups: DirtyGroups) -> tuple[np.ndarray, np.ndarray]:
        """The dirty tasks and their exact costs (from the rows the groups keep)."""
        idx, mine, rows = groups.held_rows()
        cost = self._cost64_rows(*rows)
        return idx[mine], cost[mine]

    def _slab_search(
        self, by_f0: bool, cx: float, cy: float, h_star: float, k: int, budget: int, stamp: np.ndarray, held: int
    ) -> tuple[np.ndarray, float] | None:
        """A slab ``|cx·x + cy·y − h*| ≤ W`` (x = f0 when ``by_f0``, else f1) holding at least ``k`` regular tasks
        (``stamp < 0``; ``held`` tasks are dirty) and, where ties allow, at most :data:`SLAB_TARGET` × ``k``.
        The search starts from the last selection's width (the best tasks move little between steps), widens
        while too few are inside (doubling steps while none is, else extrapolating from their distances), jumps
        to the distance of the 2k-th nearest when too many are, and bisects otherwise. Returns the slab's
        regular tasks and ``W``, or None when no such slab fits the budget."""
        if k == 0:  # every task is dirty
            return np.empty(0, dtype=np.int64), 0.0
        grid = self._grid(by_f0)
        x, y = (self._f0, self._f1) if by_f0 else (self._f1, self._f0)
        h_min, h_max = min(cy, 0.0), cx + max(cy, 0.0)  # the range of cx·x + cy·y over [0, 1]²
        gap = max(h_star - h_max, h_min - h_star, 0.0)
        # The first widening step: about 4k tasks' worth of width where tasks are dense, or the last change.
        step = max((cx + abs(cy)) * 4.0 * k / self.size, self._drift)
        width = max(self._width if self._width is not None else gap + step, gap)
        # Widths known to hold fewer than k regular tasks (lo), at least k or more than the budget allows (hi), and
        # runs much longer than wanted, not read yet (soft): those are bisected first and read only once the
        # bracket is narrow (a slab packed with dirty tasks, or huge buckets of equal features, has long runs).
        lo, hi, soft = 0.0, math.inf, math.inf
        cap = 4 * SLAB_TARGET * k + held + grid.bucket_slack
        force = False
        best: tuple[np.ndarray, float] | None = None
        for _ in range(SLAB_STEPS):
            runs = grid.runs(cx, cy, h_star - width, h_star + width)
            if runs.size > budget:
                hi = width
            elif runs.size > cap and not force:
                soft = width
            else:
                force = False
                cand = grid.points(runs)
                cand = cand[stamp[cand] < 0]
                if cand.size < k:
                    lo = width
                    if soft <= width:
                        soft = math.inf
                    if cand.size and min(hi, soft) == math.inf:  # extrapolate from the tasks found so far
                        near = float(np.abs(x[cand] * cx + y[cand] * cy - h_star).min())
                        grow = (width - near) * min((2 * k - cand.size) / cand.size, 4.0)
                        width += max(grow, step)
                        continue
                else:
                    best, hi = (cand, width), width
                    if cand.size <= SLAB_TARGET * k:
                        break
                    dist = x[cand] * cx
                    dist += y[cand] * cy
                    dist -= h_star
                    np.abs(dist, out=dist)
                    jump = float(np.partition(dist, 2 * k - 1)[2 * k - 1]) * (1.0 + 1e-9)
                    if lo < jump < hi:
                        width = jump
                        continue
            top = min(hi, soft)
            if top == math.inf:
                width, step = lo + step, 2.0 * step
            elif top == soft and soft - lo <= 0.01 * soft:
                width, force = soft, True
            elif top - lo <= 1e-9 * top:
                break
            else:
                width = 0.5 * (lo + top)
        return best

    def _scratch(self, part: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Two float32 chunk buffers for the pass run by ``part`` (kept between calls: no page faults)."""
        width = min(chunk, self.size)
        bufs = self._buffers.get(part)
        if bufs is None or bufs[0].size != width:
            bufs = self._buffers[part] = (np.empty(width, dtype=np.float32), np.empty(width, dtype=np.float32))
        return bufs

    def _sample(self, k: int) -> np.ndarray:
        """``k`` tasks drawn one by one without replacement with probability ∝ exp(−cost/τ), in drawing
        order: the rejection, envelope and Gumbel-window stages of the module docstring."""
        n = self.size
        tau = self._tau
        chosen = np.empty(0, dtype=np.int64)
        if 4 * k <= n:
            chosen = self._sample_rejection(k, tau)
        if chosen.size == k:
            return chosen
        coef = self._fast_coefficients()
        if coef is None:  # the float64 pass with Gumbel noise for every task
            cost = self._exact_costs(with_noise=True, do_sample=False)[0]
            cost[chosen] = np.inf
            return np.concatenate([chosen, smallest_k(cost, k - chosen.size)])
        if COST32_MARGIN / tau <= ENVELOPE_MAX_SLACK:  # else the float32 envelope is too loose to help
            chosen = np.concatenate([chosen, self._sample_envelope(k - chosen.size, chosen, coef, tau)])
            if chosen.size == k:
                return chosen
        return np.concatenate([chosen, self._sample_gumbel_window(k - chosen.size, chosen, coef, tau)])

    def _sample_rejection(self, k: int, tau: float) -> np.ndarray:
        """Stage 1: propose tasks uniformly, accept with probability exp(−cost/τ), skip tasks already drawn.
        Returns up to ``k`` tasks (fewer when the budget runs out)."""
        n = self.size
        budget = self.rejection_budget * k + 64
        chosen = np.empty(0, dtype=np.int64)
        used, rate = 0, 0.5
        while chosen.size < k:
            need = k - chosen.size
            size = min(int(need / rate) + 16, budget - used)
            if size <= 0:
                break
            idx = self.rng.integers(0, n, size=size)
            with np.errstate(over="ignore"):  # cost/τ = inf for a tiny τ: weight 0
                accept = self.rng.random(size) < np.exp(-(self._cost64(idx) / tau))
            used += size
            hits = idx[accept]
            rate = max(hits.size, 1) / size
            chosen = np.concatenate([chosen, _new_in_order(hits, chosen)[:need]])
            if k - chosen.size > rate * (budget - used):  # would not finish within the budget: stop early
                break
        return chosen

    def _sample_envelope(self, r: int, chosen: np.ndarray, coef: tuple, tau: float) -> np.ndarray:
        """Stage 2: up to ``r`` more tasks, not in ``chosen``, by rejection from the float32 envelope
        ``w = exp(−min((cost32 − c_min)/τ, 80))`` (block sums to draw from it), accepting with the exact
        ratio ``exp(−(cost64 − c_min)/τ) / (E·w)`` where ``E`` covers the float32 error."""
        n, bw = self.size, ENVELOPE_BLOCK
        nb = -(-n // bw)
        w = np.zeros(nb * bw, dtype=np.float32)  # padding tasks keep weight 0
        self._cost32_all(w[:n], coef)
        w[chosen] = np.inf
        c_min = w[:n].min()  # over the tasks not drawn yet
        w[chosen] = c_min  # finite for the arithmetic below; their weight is set to 0 after it
        scale, clamp = np.float32(-1.0 / tau), np.float32(-ENVELOPE_CLAMP)
        for start in range(0, n, CHUNK):
            part = w[start : min(start + CHUNK, n)]
            part -= c_min
            part *= scale
            np.maximum(part, clamp, out=part)
            np.exp(part, out=part)
        w[chosen] = 0.0
        blocks = w.reshape(nb, bw)
        # Block sums inflated so that each covers the float64 running sum of its weights: then a task is
        # proposed with probability w_i / total exactly (a draw past a block's last weight is rejected).
        inflate = 1.0 + 2.0 * bw * U32
        sums = np.einsum("ij->i", blocks).astype(np.float64) * inflate
        bound = math.exp(COST32_MARGIN / tau + 1024 * U32)  # E ≥ exact weight / float32 weight
        c_ref = float(c_min)
        budget = self.envelope_budget * r + 256
        got = np.empty(0, dtype=np.int64)
        used, rate = 0, 0.5
        cum = np.cumsum(sums)
        while got.size < r and cum[-1] > 0.0:
            need = r - got.size
            size = min(int(need / rate) + 16, budget - used)
            if size <= 0:
                break
            u = self.rng.random(size) * cum[-1]
            blk = np.minimum(np.searchsorted(cum, u, side="right"), nb - 1)
            res = u - np.where(blk > 0, cum[blk - 1], 0.0)
            rows = np.cumsum(blocks[blk].astype(np.float64), axis=1)
            col = np.count_nonzero(rows <= res[:, None], axis=1)  # first weight whose running sum > res
            inside = col < bw
            idx = np.minimum(blk * bw + np.minimum(col, bw - 1), n - 1)
            exact = np.exp(-((self._cost64(idx) - c_ref) / tau))
            accept = inside & (self.rng.random(size) * bound * w[idx] < exact)
            used += size
            hits = idx[accept]
            rate = max(hits.size, 1) / size
            new = _new_in_order(hits, got)[:need]
            if new.size:
                got = np.concatenate([got, new])
                w[new] = 0.0
                touched = np.unique(new // bw)
                sums[touched] = np.einsum("ij->i", blocks[touched]).astype(np.float64) * inflate
                cum = np.cumsum(sums)
            if r - got.size > rate * (budget - used):
                break
        return got

    def _sample_gumbel_window(self, r: int, chosen: np.ndarray, coef: tuple, tau: float) -> np.ndarray:
        """Stage 3: the remaining ``r`` tasks (not in ``chosen``) as the Gumbel top-r over the tasks within
        ``τ·(ln N + 45)`` (plus the float32 margins) of the r-th smallest float32 cost, in drawing order."""
        n = self.size
        buf = np.empty(n, dtype=np.float32)
        self._cost32_all(buf, coef)
        buf[chosen] = np.inf
        buf.partition(r - 1)
        limit = _round_up32(float(buf[r - 1]) + 2.0 * COST32_MARGIN + (math.log(n) + GUMBEL_WINDOW) * tau)
        del buf
        cost, tmp = self._scratch(0, CHUNK)

        def key_of(cand: np.ndarray) -> np.ndarray:  # cost/τ − Gumbel: the top-r of score/τ + Gumbel
            with np.errstate(over="ignore"):  # cost/τ beyond float64 for a tiny τ: inf, drawn last
                return self._cost64(cand) / tau - self.rng.gumbel(size=cand.size)

        best = _RunningBest(r, key_of)
        for start in range(0, n, CHUNK):
            stop = min(start + CHUNK, n)
            c = cost[: stop - start]
            self._cost32(start, stop, c, tmp[: stop - start], coef)
            cand = np.flatnonzero(c <= limit)
            if cand.size and chosen.size:
                cand = cand[~np.isin(cand + start, chosen)]
            if cand.size:
                cand += start
                best.offer(cand)
        idx, key = best.result()
        return idx[np.lexsort((idx, key))]

    # -- state --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: ``α̃``, ``β̃`` (copies), the transform, ``c``, ``ρ``,
        counters, the RNG and the model of a never-observed task (the float32 mirrors are rebuilt from ``α̃``,
        ``β̃`` on load; the greedy index at the next greedy selection)."""
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
            "model": dict(zip(("m0", "mp", "mq", "ms"), self._model, strict=True)),
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
        model = state.get("model")  # absent from older checkpoints: the index is slow until the next fold
        model = (1.0, 0.0, 0.0, 2.0) if model is None else tuple(float(model[k]) for k in ("m0", "mp", "mq", "ms"))
        if not all(math.isfinite(v) for v in model):
            raise ValueError(f"saved model holds non-finite values: {model!r}")
        super().load_state_dict(state)
        self._alpha_t, self._beta_t = arrays["alpha_tilde"], arrays["beta_tilde"]
        self._a, self._b, self._b_beta = transform["a"], transform["b"], transform["b_beta"]
        self._p, self._q = transform["p"], transform["q"]
        self.capability = None if capability is None else float(capability)
        self.rho = float(state["rho"])
        self.num_feedback = int(state["num_feedback"])
        self.num_selected = int(state["num_selected"])
        self.num_folds = int(state["num_folds"])
        self._model = model
        self._groups, self._width, self._drift = None, None, 0.0
        self._refresh_mirrors()
        self._trusted = self._check_invariants()

    def _check_invariants(self) -> bool:
        """Whether every task has α, β > 0 and s ≤ α + β ≤ the bound of :meth:`_den_bound` (always true for a
        state this class produced; the float32 error bound rests on it). O(N), on load only."""
        bound, s0 = self._den_bound(), self._b + self._b_beta
        tmp = np.empty(min(CHUNK, self.size))
        alpha, beta = np.empty_like(tmp), np.empty_like(tmp)
        for start in range(0, self.size, CHUNK):
            stop = min(start + CHUNK, self.size)
            w = stop - start
            self._true_slice(slice(start, stop), alpha[:w], beta[:w], tmp[:w])
            if not (alpha[:w].min() > 0.0 and beta[:w].min() > 0.0):
                return False
            np.add(alpha[:w], beta[:w], out=tmp[:w])
            if tmp[:w].max() > bound or tmp[:w].min() < s0 * (1.0 - 1e-9) - 1e-9:
                return False
        return True


class _RunningBest:
    """The ``k`` smallest (key, index) pairs among candidates offered in increasing index order; the keys are
    computed by ``key_of`` on batches of candidates (at least ``2k`` at a time once ``k`` are kept)."""

    def __init__(self, k: int, key_of: Any) -> None:
        self.k = k
        self.key_of = key_of
        self.idx = np.empty(0, dtype=np.int64)
        self.key = np.empty(0)
        self._pending: list[np.ndarray] = []
        self._num_pending = 0
        self.threshold = np.inf  # the k-th smallest key so far (inf until k keys are known)

    @property
    def full(self) -> bool:
        return self.idx.size == self.k

    def offer(self, idx: np.ndarray) -> None:
        """Offer candidates, all with larger indices than any offered before."""
        self._pending.append(idx)
        self._num_pending += idx.size
        if not self.full or self._num_pending >= 2 * self.k:
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
        self.idx, self.key = _smallest_pairs(np.concatenate([self.idx, idx]), np.concatenate([self.key, key]), self.k)
        if self.full:
            self.threshold = float(self.key.max())

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept (indices, keys), in no particular order."""
        self._flush()
        return self.idx, self.key


def _smallest_pairs(idx: np.ndarray, key: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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


def _pool() -> ThreadPoolExecutor:
    """The worker threads of the parallel pass (created lazily, again after a fork)."""
    global _POOL
    pid = os.getpid()
    if _POOL is None or _POOL[0] != pid:
        _POOL = (pid, ThreadPoolExecutor(max_workers=max(THREADS - 1, 1), thread_name_prefix="flexkit-pass"))
    return _POOL[1]


def _round_up32(value: float) -> np.float32:
    """The smallest float32 ≥ ``value`` (float32 comparisons against it never drop a task below ``value``)."""
    with np.errstate(over="ignore"):  # beyond float32: inf, which lets every task through
        v = np.float32(value)
    return v if float(v) >= value else np.nextafter(v, np.float32(np.inf))


def _new_in_order(hits: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """``hits`` without repeats (first occurrence kept, order kept) and without the tasks in ``taken``."""
    if hits.size > 1:
        _, first = np.unique(hits, return_index=True)
        if first.size < hits.size:
            hits = hits[np.sort(first)]
    if taken.size and hits.size:
        hits = hits[~np.isin(hits, taken)]
    return hits


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
