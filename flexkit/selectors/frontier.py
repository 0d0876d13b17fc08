"""``frontier``: draw the groups of tasks that give a learning signal now, and keep probing the rest.

With GRPO's group-normalised advantages ``(r − mean) / std``, every group of answers with mixed rewards gives a
gradient of about the same size, and a group whose answers all get the same reward gives none (the groups DAPO's
dynamic sampling drops, arXiv 2503.14476). So the value of drawing a task is the probability ``q`` that its group
of answers comes back **informative** (mixed: ``0 < mean reward < 1``). A pool seen about twice per task gives no
per-task evidence, so ``q`` is learned per **group** of tasks (a level, a source, a difficulty label, or quantile
bins of numeric features: :mod:`flexkit.selectors._grouping`), from every feedback value.

Selecting only by the current estimate stalls at the frontier: a level whose pass rate is near 0 gives almost no
informative groups, gets no draws, and never becomes learnable, while a level whose pass rate sits still keeps
its draws. The learning rate of each level changes as the policy trains, which makes this a *non-stationary*
bandit over groups, and the selector treats it as one (discounted Thompson sampling; Raj & Kalyani,
arXiv 1707.09727; Garivier & Moulines, arXiv 0805.3415 for discounting in non-stationary bandits):

- per group ``g``, discounted counts of informative and uninformative feedback,
  ``a_g ← γ·a_g + #informative``, ``b_g ← γ·b_g + #uninformative`` at each feedback batch, and a
  ``Beta(1 + a_g, 1 + b_g)`` posterior over ``q_g``. Discounting keeps the posterior of a group that is not drawn
  from hardening: its evidence fades, its posterior widens again, and a later draw of ``q_g`` can rank it first
  — groups far from the frontier are re-probed at a rate that grows with the time since they were last seen,
  and a group that starts to move (a level becoming learnable, or a solved level being forgotten and giving
  mixed groups again) wins draws back at once (learning progress, as ALP-GMM measures it, arXiv 1910.07224);
- forgetting that collapses a level is caught the same way: a solved level gives no gradient under GRPO (all
  answers right, all advantages 0); its evidence fades while it is not drawn, so it is re-probed, and a probe
  that comes back mixed wins it draws until it is solved again. A slow slide of its greedy accuracy by a few
  points is not caught: with a few of its tasks a batch its sampled pass rate barely moves (``retain`` below);
- each batch: ``K = ceil(candidates · B)`` tasks drawn uniformly; the first ``uniform_fraction · B`` of them
  (rounded at random) are kept as they are (an optional uniform floor, 0 by default: its steady draws on
  hopeless and solved groups keep their evidence fresh and *slow down* the detection of a change); for each
  other candidate a value ``θ ~ Beta(1 + a_g, 1 + b_g)`` of its group is drawn
  (``thompson = false``: the posterior mean instead), and ``B`` of them are drawn without replacement with
  probability ∝ ``θ^(1/tau)``: with ``tau = 1`` (the default) each group's share of the batch follows its chance
  of informative answers (probability matching), so a level whose pass rate is still low but rising keeps a share
  in proportion; ``tau = 0`` keeps the highest values, which lets the two or three most informative levels take
  every draw and stalls at the frontier. Drawing ``K`` uniform candidates caps the share of any group at
  ``candidates`` times its share of the pool. ``thompson = false, tau = 0`` removes the exploration (the
  ablation);
- with ``unsolved_weight = k > 0`` (default 1), each value is multiplied by ``(1 − p_g)^k``, ``p_g`` a Thompson
  draw around the group's pass rate ``p̂_g`` (its one estimate, the moving average below; ``p̂_g`` itself with
  ``thompson = false``) from ``Beta(1 + p̂_g·n_g, 1 + (1 − p̂_g)·n_g)``, ``n_g = a_g + b_g`` the group's
  discounted count of feedback: a level solved long ago has faded evidence, so a draw of ``p_g`` below 1 still
  re-probes it. With ``G`` sampled answers, ``q = 1 − p^G − (1 − p)^G`` stays high long after a
  level is solved by the greedy policy (``G = 8``: 0.57 at ``p = 0.9``, 0.34 at ``p = 0.95``): its mixed groups
  only sharpen sampling. The factor moves those draws to groups that are informative *and* not yet solved, the
  frontier itself (``k = 1``: the product peaks near ``p ≈ 0.2–0.3``), while a forgotten level's falling pass
  rate raises its factor again. ``k = 0`` selects by ``q`` alone;
- with ``group_prior = m > 0`` (default 0) and two or more ``feature_keys``, the groups share evidence with their
  parent, the group of their first key's value (a level split by ``carries``): each posterior starts from ``m``
  pseudo-observations at the parent's posterior mean (hierarchical shrinkage, empirical Bayes for a
  Beta-binomial: :class:`~flexkit.selectors._estimates.GroupBeta`; the pass rate's draw likewise). Finer groups
  can find the frontier inside a level, but each group of a level out of reach is otherwise re-probed on its own,
  and their draws add up; with the prior a group with little evidence is valued as its level is until its own
  evidence says otherwise;
- each group's pass rate ``p̂_g`` is one estimate, a moving average of its feedback batches' mean values
  (``p̂_g ← (1 − w)·p̂_g + w·mean``, ``w = pass_rate``, 0.2 by default: about its last five batches), which
  follows a level that is being learnt or forgotten within a few batches; the unsolved factor above draws around
  it, the floor below decides by it, and the summary reports it;
- with ``retain = r > 0`` (default 1), the next ``r · B`` uniform candidates (rounded at random) after the floor
  are kept as they are when their group is **learnt** (its pass rate ``p̂_g`` at least ``retain_above``) and go
  back to the valued draw otherwise: every learnt group keeps about ``r`` times its uniform share of each batch
  whatever its value, and groups not yet learnt get no floor (unlike ``uniform_fraction``, nothing is spent on
  hopeless levels).
  A learnt level's all-right groups give no gradient, but its few mixed ones keep its sampled answers sharp; with
  ``unsolved_weight`` alone its share falls to a few percent, and on a hard task family its greedy accuracy
  then settles a few points below where uniform sampling holds it (rehearsal against catastrophic forgetting,
  as in experience replay: Rolnick et al., arXiv 1811.11682).
- with ``guard_metric`` set (``"val_accuracy/{}"``, the default where tasks are grouped by columns' values;
  ``{}`` stands for the group's first feature value, its level),
  ``retain``'s floor is spent only where it is needed: a learnt group keeps it only while its held-out
  accuracy, read from the trainer's validation evaluations (:meth:`observe_evaluation`; a test-split name,
  ``eval_accuracy...``, is refused), is more than ``guard_margin`` below
  its best so far, and gets no floor while it holds. The sampled pass rate cannot show that slide; the greedy
  held-out accuracy does. The floor reaches a group from the evaluation that shows its slide until one shows it
  back within the margin, so a slide is caught one evaluation late, and a group the evaluation does not cover
  never gets the floor. With ``guard_raise`` and ``guard_lower`` below 1 the floor is a control loop rather than a
  switch: each evaluation that shows a group sliding adds ``guard_raise`` to its share of the floor, each that
  shows it holding takes ``guard_lower`` away (additive increase and decrease), and each of its candidates among
  the floor's is kept with that share's chance; the share settles near the least floor that keeps slides rare
  (the group slides at about ``guard_lower / (guard_raise + guard_lower)`` of the evaluations), none where a
  level never slides. ``guard_min = m`` keeps the share at ``m`` or above: a learnt group has part of the floor in
  every batch, from its first batch as a learnt group, and the loop adds the rest while it slides (a slide between
  two evaluations then meets draws at once, and only a level that keeps sliding costs the whole floor).

- with ``text_key`` (a text column, such as ``"prompt"``) and ``bins = k``, for a pool with no column that groups
  tasks: the groups are automatic, the ``k`` quantiles of a pass-rate model's predictions over the prompts
  (hashed byte n-grams, an online Bayesian logistic regression with a discounted Laplace posterior:
  :mod:`flexkit.selectors._prompt_model`), re-cut at each selection from a fixed reference sample of the pool; a
  fed-back task counts for the group the model put it in before learning from it. Everything above applies to
  them, but a per-group ``guard_metric``: the groups are ranks that no evaluation names (one metric for the whole
  pool is accepted).

Cost per step: O(K) to select, O(feedback) to update, plus one group id per task (4 bytes); with ``text_key``,
scoring the ``K`` candidates and the reference tasks instead of the group ids, and one Newton solve per feedback
batch (docs/task-selection.md has the measured costs). State: two floats
and a pass-rate average per group (with ``guard_metric``, two held-out values too), and the RNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit._log import say
from flexkit._state_problems import is_count, short
from flexkit.config import field
from flexkit.errors import ConfigError, StateMismatchError
from flexkit.plugins._contract import ValidationRows
from flexkit.selectors._base import Selector
from flexkit.selectors._calibration import binned_calibration
from flexkit.selectors._estimates import (
    GroupBeta,
    GroupRates,
    candidate_count,
    draw_candidates,
    gumbel_top_k,
    uniform_floor,
)
from flexkit.selectors._grouping import TaskGroups, bins_field, uniform_fraction_field
from flexkit.selectors._held_out import (
    PLACEHOLDER,
    VALIDATION_TEMPLATE,
    HeldOutWatch,
    metric_names,
    reads_test_split,
)
from flexkit.selectors._prompt_model import HashedFeatures, PromptPassModel, PromptTexts, reference_sample, text_column

#: Group summaries :meth:`FrontierSelector.summary` reports one by one (more groups: only the totals).
SUMMARY_GROUPS = 16


def _recipe_guard(config: FrontierConfig) -> str:
    """The default ``guard_metric``: each group's validation accuracy (``"val_accuracy/{}"``) where a guard can read
    one, that is tasks grouped by the values of columns (``feature_keys``, ``bins = 0``, no ``text_key``) with a floor
    to steer (``retain > 0``); else none."""
    grouped_by_values = bool(config.feature_keys) and not config.text_key and config.bins == 0
    return VALIDATION_TEMPLATE if grouped_by_values and config.retain > 0 else ""


def _recipe_guard_min(config: FrontierConfig) -> float:
    """The default ``guard_min``: half the floor while a guard runs (the recipe), none without one."""
    return 0.5 if config.guard_metric else 0.0


@attrs.frozen(kw_only=True)
class FrontierConfig:
    """Parameters of the ``frontier`` selector, by concern: how tasks are grouped (columns, or a model of the
    prompts), how each batch is drawn from the groups, the floor that keeps learnt groups in the batch, and the guard
    that steers the floor by validation accuracy. The defaults are the confirmed recipe (docs/results.md): with
    ``feature_keys`` alone a pipeline gets its draw, its floor and, where a host hands validation evaluations, its
    guard; ``[replay]`` is the recipe's other half, a table of its own."""

    # --- grouping: which tasks share evidence ---------------------------------------------------------------------
    feature_keys: tuple[str, ...] = field(
        factory=tuple,
        doc="Columns that group tasks: categorical values (a level, a source label) or, with bins > 0, numeric "
        "features cut into quantile bins. Empty: one group (the whole pool).",
    )
    bins: int = bins_field()
    # --- grouping without a column: a pass-rate model over the prompts ---------------------------------------------
    text_key: str = field(
        default="",
        doc="Text column (such as \"prompt\") for pools with no column that groups tasks: a pass-rate model over "
            "the prompts' hashed n-grams, learned from every feedback batch, ranks the tasks, and bins = k cuts "
            "its predicted pass rates into k quantile groups at each selection (instead of feature_keys).",
    )
    hash_bits: int = field(
        default=12, ge=4, le=22, doc="With text_key: the model hashes n-grams into 2**hash_bits signed buckets."
    )
    ngrams: int = field(default=3, ge=1, le=7, doc="With text_key: the model reads byte n-grams of n = 1 .. ngrams.")
    model_discount: float = field(
        default=0.98, gt=0, le=1,
        doc="With text_key: share of the model's evidence (its weights' precision above the prior) kept at each "
            "feedback batch, so that it follows the policy as it learns (1: none forgotten).",
    )
    model_prior: float = field(
        default=1.0, gt=0, le=1e6, doc="With text_key: precision of the model's Gaussian prior on each weight."
    )
    reference_tasks: int = field(
        default=4096, ge=16, le=1 << 24,
        doc="With text_key: tasks (a fixed uniform sample; the whole pool when smaller) whose predicted pass rates "
            "set the quantile edges of the groups.",
    )
    # --- the draw: discounted Thompson sampling over the groups ----------------------------------------------------
    candidates: float = field(
        default=4.0, ge=1, le=1e6, doc="Candidates drawn uniformly per batch, as a multiple of the batch size."
    )
    discount: float = field(
        default=0.99, earlier_default=0.95, gt=0, le=1,
        doc="γ: weight of a group's earlier evidence at each feedback batch (1: none forgotten; the recipe's 0.99 "
            "keeps about the last 100 batches).",
    )
    thompson: bool = field(
        default=True, doc="Draw each candidate's value from its group's posterior (false: the posterior mean)."
    )
    uniform_fraction: float = uniform_fraction_field()
    tau: float = field(
        default=1.0, ge=0,
        doc="1: draw candidates ∝ their value (each group's share follows its chance of informative answers); "
        "0: keep the highest values (winner takes all); other values temper between.",
    )
    unsolved_weight: float = field(
        default=1.0, ge=0, le=16,
        doc="k: multiply each candidate's value by (1 − its group's pass rate)^k, so that draws go to informative "
            "groups the policy does not solve yet rather than to nearly solved ones (0: the value alone).",
    )
    pass_rate: float = field(
        default=0.2, gt=0, le=1,
        doc="w: weight of each feedback batch's group mean in the group's pass rate, its one estimate (a moving "
            "average: the unsolved factor draws around it, retain's floor decides by it, the summary reports it).",
    )
    group_prior: float = field(
        default=0.0, ge=0, le=1e6,
        doc="m: each group's posterior (and the draw around its pass rate) starts from m pseudo-observations at the "
            "mean of its parent, the group of its first feature key's value (its level when grouped by [\"level\", "
            "\"carries\"]; with one key, the whole pool), so a group with little evidence of its own is valued as "
            "its parent is (0: every group on its own).",
    )
    # --- the floor: learnt groups keep part of their uniform share -------------------------------------------------
    retain: float = field(
        default=1.0, earlier_default=0.0, ge=0, le=1,
        doc="r: each learnt group (pass rate ≥ retain_above) keeps about r times its uniform share of every "
            "batch, whatever its value (0: no floor; 1: its whole uniform share, which the guard then shares out).",
    )
    retain_above: float = field(
        default=0.9, earlier_default=0.5, ge=0, le=1,
        doc="Group pass rate (its moving average, weight pass_rate) from which a group counts as learnt for retain.",
    )
    # --- the guard: the floor steered by each group's validation accuracy ------------------------------------------
    guard_metric: str = field(
        default=attrs.Factory(_recipe_guard, takes_self=True),
        doc="Validation metric of a group's held-out accuracy, {} standing for its first feature value (its level): "
            "\"val_accuracy/{}\" (a test-split name, eval_accuracy..., is refused). Set: retain's floor goes to a "
            "learnt group only while that accuracy is more than guard_margin below its best; \"\": no guard (the "
            "whole floor whenever a group is learnt). Default: \"val_accuracy/{}\" when tasks are grouped by "
            "feature_keys with bins = 0 and retain > 0, else \"\"; a host that hands no validation evaluations "
            "refuses a guard (set guard_metric = \"\" there).",
    )
    guard_margin: float = field(
        default=0.03, ge=0, le=1,
        doc="How far below its best held-out accuracy a learnt group must be to get retain's floor (with "
            "guard_metric).",
    )
    guard_raise: float = field(
        default=0.5, gt=0, le=1,
        doc="Share of retain's floor a learnt group gains at each evaluation that shows it sliding (with "
            "guard_metric; 1: all of it at once).",
    )
    guard_lower: float = field(
        default=0.05, ge=0, le=1,
        doc="Share of retain's floor a learnt group loses at each evaluation that shows it within guard_margin of "
            "its best (with guard_metric; 1: all of it at once, so the floor is on only while it slides).",
    )
    guard_min: float = field(
        default=attrs.Factory(_recipe_guard_min, takes_self=True), ge=0, le=1,
        doc="Least share of retain's floor a learnt group keeps however many evaluations show it holding (with "
            "guard_metric; the loop moves the share between guard_min and 1; 0: none while it holds). Default: 0.5 "
            "with a guard, 0 without.",
    )

    def __attrs_post_init__(self) -> None:
        test_metric = reads_test_split(self.guard_metric)
        if test_metric is not None:
            raise ConfigError(test_metric)
        if self.text_key:
            if self.feature_keys:
                raise ConfigError(f"text_key = {self.text_key!r} groups tasks by a model of their pass rate, and "
                                  f"feature_keys = {list(self.feature_keys)!r} by columns: set one of them")
            if self.bins < 2:
                raise ConfigError(f"text_key = {self.text_key!r} cuts the model's predicted pass rates into bins "
                                  f"quantile groups, and bins = {self.bins} makes none: set bins = 2 or more "
                                  "(such as 8)")
            if PLACEHOLDER in self.guard_metric:
                raise ConfigError(f"guard_metric = {self.guard_metric!r} names each group's metric by its feature "
                                  "value ({}), and the groups of text_key are quantiles of a model's predictions, "
                                  "which no evaluation names: leave guard_metric empty, or name one metric for the "
                                  'whole pool ("val_accuracy")')
        if PLACEHOLDER in self.guard_metric and not self.feature_keys:
            raise ConfigError(f"guard_metric = {self.guard_metric!r} names each group's metric by its first feature "
                              "value ({}), and without feature_keys there are no groups: set feature_keys (such as "
                              '["level"]), or name one metric for the whole pool ("val_accuracy")')
        if self.guard_metric and self.retain == 0:
            raise ConfigError(f"guard_metric = {self.guard_metric!r} decides where retain's floor goes, and "
                              "retain = 0 has none: set retain > 0 (1: a learnt group's whole uniform share) or "
                              "leave guard_metric empty")
        if self.guard_min and not self.guard_metric:
            raise ConfigError(f"guard_min = {self.guard_min!r} is the least share of the floor the held-out guard "
                              "leaves a learnt group, and without guard_metric there is no guard (every learnt "
                              "group keeps the whole floor): set guard_metric or lower retain instead")


class FrontierSelector(Selector):
    """Discounted Thompson sampling over groups of tasks for informative (mixed-reward) groups of answers
    (module docstring)."""

    Config = FrontierConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    def _init_state(self) -> None:
        config = self.config
        self.model: PromptPassModel | None = None
        if config.text_key:
            self.groups = TaskGroups(np.zeros(0, dtype=np.int32), [f"predicted_q{k + 1}" for k in range(config.bins)])
            texts = PromptTexts(text_column(self.features, config.text_key, self.size, "frontier"), "frontier",
                                config.text_key)
            self.model = PromptPassModel(HashedFeatures(texts, config.hash_bits, config.ngrams), config.model_prior,
                                         config.model_discount)
            self.reference = reference_sample(self.size, config.reference_tasks)
            # (model version, quantile edges, the reference tasks' predictions)
            self._edges: tuple[int, np.ndarray, np.ndarray] | None = None
            self._pool_rates: tuple[int, np.ndarray] | None = None  # (model version, every task's prediction)
            self._said_no_text = False  # validation rows without the text column: said once
        elif config.feature_keys:
            self.groups = TaskGroups.from_features(self.features, config.feature_keys, self.size, bins=config.bins,
                                                   owner="frontier")
        else:
            self.groups = TaskGroups(np.zeros(self.size, dtype=np.int32), ["all"])
        self.posterior = self._new_posterior()
        self.pass_rates = GroupRates(self.groups.group, self.groups.count, config.pass_rate)
        self.held_out = self._new_watch()

    def _new_watch(self) -> HeldOutWatch:
        config = self.config
        names = metric_names(config.guard_metric, self.groups.first_values, self.groups.count)
        return HeldOutWatch(names, config.guard_margin, raise_by=config.guard_raise, lower_by=config.guard_lower,
                            minimum=config.guard_min)

    def _new_posterior(self) -> GroupBeta:
        return GroupBeta(self.groups.group, self.groups.count, self.config.discount, ("informative", "uninformative"),
                         parents=self.groups.parents, prior=self.config.group_prior)

    @property
    def informative(self) -> np.ndarray:
        """Each group's discounted count of informative feedback."""
        return self.posterior.a

    @property
    def uninformative(self) -> np.ndarray:
        """Each group's discounted count of uninformative feedback."""
        return self.posterior.b

    def informative_rates(self) -> np.ndarray:
        """Posterior mean of each group's probability of an informative group of answers."""
        return self.posterior.mean()

    def group_of(self, indices: np.ndarray) -> np.ndarray:
        """The group id of each task of ``indices``: its column's group, or with ``text_key`` the quantile of
        the model's predicted pass rate it falls in (``predicted_q1``: the lowest)."""
        if self.model is None:
            gids: np.ndarray = self.groups.group[indices]
            return gids
        return np.searchsorted(self.edges(), self.model.predict(indices), side="right").astype(np.int32)

    def edges(self) -> np.ndarray:
        """With ``text_key``: the ``bins − 1`` quantile edges of the model's predicted pass rates over the
        reference tasks (recomputed when the model has changed)."""
        return self._reference_predictions()[0]

    def predicted_group_rates(self) -> np.ndarray:
        """With ``text_key``: each group's mean predicted pass rate over the reference tasks in its quantile (NaN
        for a quantile no reference task falls in), to hold against its observed ``pass_rate``."""
        edges, predicted = self._reference_predictions()
        bins = np.searchsorted(edges, predicted, side="right")
        counts = np.bincount(bins, minlength=self.config.bins).astype(float)
        sums = np.bincount(bins, weights=predicted, minlength=self.config.bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            means: np.ndarray = np.where(counts > 0, sums / np.maximum(counts, 1.0), np.nan)
        return means

    def _reference_predictions(self) -> tuple[np.ndarray, np.ndarray]:
        """The quantile edges and the model's predictions of the reference tasks (recomputed when the model has
        changed)."""
        assert self.model is not None
        version = self.model.version
        if self._edges is None or self._edges[0] != version:
            predicted = self.model.predict(self.reference)
            self._edges = (version, np.quantile(predicted, np.arange(1, self.config.bins) / self.config.bins),
                           predicted)
        return self._edges[1], self._edges[2]

    def predicted_pass_rates(self) -> np.ndarray | None:
        """Every task's group pass rate (the pool's mean where its group has no feedback yet; 0.5 before any); with
        ``text_key``, the model's prediction for every task where the pool's features are kept (hashed once:
        :data:`~flexkit.selectors._prompt_model.FEATURE_CACHE_BYTES`), else ``None`` (scoring a pool that large at
        every step would cost more than the selection itself)."""
        if self.model is not None:
            if not self.model.features.cached:
                return None
            if self._pool_rates is None or self._pool_rates[0] != self.model.version:
                self._pool_rates = (self.model.version, self.model.predict(np.arange(self.size, dtype=np.int64)))
            return self._pool_rates[1]
        rates = self.pass_rates.values
        seen = rates[~np.isnan(rates)]
        return self.pass_rates.of(slice(None), float(seen.mean()) if seen.size else 0.5)

    def validation_calibration(self, rows: ValidationRows) -> dict[str, float]:
        """With ``text_key``: the model's predicted pass rate of each validation row (its ``text_key`` column,
        hashed as the pool's prompts are), put in the quantile group its prediction falls in (the pool's current
        edges), held against the rows' scores: per group ``val_predicted/<group>`` beside ``val_observed/<group>``
        and ``val_rows/<group>``, and ``val_rank_correlation`` over the rows
        (:func:`~flexkit.selectors._calibration.binned_calibration`). Rows the model never learnt from, so the
        agreement is out of sample. Without ``text_key``, or when the rows lack the column (said once), ``{}``."""
        if self.model is None or not len(rows):
            return {}
        key = self.config.text_key
        texts = rows.columns.get(key)
        if texts is None or not all(isinstance(text, str) for text in texts):
            if not self._said_no_text:
                self._said_no_text = True
                what = (f"no {key!r} column (they have {sorted(rows.columns)})" if texts is None
                        else f"a {key!r} column that does not hold text only")
                say("validation_rows_without_text", (
                    f"warning: frontier: the trainer's validation rows have {what}, so the prompt model's "
                    f"predictions are not checked on validation (val_predicted/val_observed); give the rows the "
                    f"pool's {key!r} text. Shown once"), level="warning", text_key=key)
            return {}
        predicted = self.model.predict_texts(list(texts), "frontier validation rows", key)
        bins = np.searchsorted(self.edges(), predicted, side="right")
        return binned_calibration(predicted, rows.scores, bins, self.groups.names)

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        config = self.config
        cand = draw_candidates(self.rng, self.size, candidate_count(batch_size, config.candidates, self.size))
        cand_groups = self.group_of(cand)
        floor = uniform_floor(batch_size, config.uniform_fraction, self.rng)
        kept, rest = np.arange(floor), np.arange(floor, len(cand))  # positions in cand
        if config.retain:
            kept, rest = self._retained(kept, rest, cand_groups, batch_size)
        gids = cand_groups[rest]
        values = self.posterior.draw(self.rng, gids) if config.thompson else self.posterior.mean()[gids]
        if config.unsolved_weight:
            around = self.posterior.recentred(self.pass_rates.values)  # the pass rate with the group's evidence
            passes = around.draw(self.rng, gids) if config.thompson else around.mean()[gids]
            values = values * (1.0 - passes) ** config.unsolved_weight
        pick = gumbel_top_k(np.log(values + 1e-12), batch_size - len(kept), config.tau, self.rng)
        positions = np.concatenate([kept, rest[pick]])
        chosen = cand[positions]
        info: dict[str, Any] = {}
        if return_extra_info:
            info = {"candidates": len(cand), "uniform": floor, "retained": len(kept) - floor,
                    "group": cand_groups[positions],
                    "value": np.concatenate([np.full(len(kept), np.nan), values[pick]])}
        return chosen, info

    def learnt_groups(self) -> np.ndarray:
        """Which groups get ``retain``'s floor: pass rate at least ``retain_above`` (unseen: not) and, with
        ``guard_metric``, a floor share above 0 (:meth:`floor_shares`)."""
        learnt: np.ndarray = self.floor_shares() > 0
        return learnt

    def floor_shares(self) -> np.ndarray:
        """Each group's share of ``retain``'s floor: 0 unless its pass rate is at least ``retain_above``; then 1,
        or with ``guard_metric`` the share its held-out evaluations set (raised by ``guard_raise`` at each one that
        shows it sliding, lowered by ``guard_lower`` at each one that shows it holding, never below ``guard_min``)."""
        learnt = self.pass_rates.values >= self.config.retain_above  # NaN (unseen) compares False
        shares: np.ndarray = np.where(learnt, self.held_out.share if self.config.guard_metric else 1.0, 0.0)
        return shares

    def evaluation_keys(self) -> tuple[str, ...]:
        """``("guard_metric",)`` when the guard is on: it steers by held-out evaluations."""
        return ("guard_metric",) if self.config.guard_metric else ()

    def group_accuracy_keys(self) -> tuple[str, ...]:
        """``("guard_metric",)`` when the guard reads ``"val_accuracy/{}"``, each group's validation accuracy under
        the name every host reports it by (a template of the host's own names is checked at its first evaluation)."""
        return ("guard_metric",) if self.config.guard_metric == VALIDATION_TEMPLATE else ()

    def observe_evaluation(self, metrics: Mapping[str, float]) -> None:
        """With ``guard_metric``: record each group's held-out accuracy from the trainer's evaluation."""
        if self.config.guard_metric:
            self.held_out.observe(metrics)

    def _retained(self, kept: np.ndarray, rest: np.ndarray, groups: np.ndarray,
                  batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Move the learnt groups' candidates among the next ``retain · B`` (rounded at random) from ``rest`` to
        ``kept`` (the others stay in the valued draw); both hold positions of candidates whose groups are
        ``groups``."""
        probe = rest[:min(len(rest), uniform_floor(batch_size, self.config.retain, self.rng),
                           batch_size - len(kept))]
        shares = self.floor_shares()[groups[probe]]
        learnt = shares > 0
        if ((shares > 0) & (shares < 1)).any():  # a part of the floor: keep each such candidate with that chance
            learnt &= self.rng.random(len(probe)) < shares
        return np.concatenate([kept, probe[learnt]]), np.concatenate([probe[~learnt], rest[len(probe):]])

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        gids = self.group_of(indices)  # with text_key: the groups the model put them in before it learns from them
        if self.model is not None:
            self.model.update(indices, values)  # all or nothing, and first: nothing else can fail after it
        self.posterior.update_groups(gids, ((values > 0) & (values < 1)).astype(np.float64))
        self.pass_rates.update_groups(gids, values)

    def summary(self) -> dict[str, float]:
        """Per group (up to :data:`SUMMARY_GROUPS`): its posterior informative rate and its pass rate; with
        ``text_key``, the model's mean predicted pass rate of its quantile (``predicted/<group>``,
        :meth:`predicted_group_rates`: close to ``pass_rate/<group>`` and spread across the groups when the model
        ranks the pool); with ``retain``, its share of the floor (``floor_share/<group>``, :meth:`floor_shares`: 0
        while not learnt); with ``guard_metric``, the share the guard holds for it (``guard_share/<group>``, whether
        learnt or not)."""
        out: dict[str, float] = {"groups": float(self.groups.count)}
        if self.groups.count <= SUMMARY_GROUPS:
            rates, passes = self.informative_rates(), self.pass_rates.values
            floor = self.floor_shares() if self.config.retain else None
            guard = self.held_out.share if self.config.guard_metric else None
            predicted = self.predicted_group_rates() if self.model is not None else None
            for g, name in enumerate(self.groups.names):
                out[f"informative/{name}"] = float(rates[g])
                if not np.isnan(passes[g]):
                    out[f"pass_rate/{name}"] = float(passes[g])
                if predicted is not None and not np.isnan(predicted[g]):
                    out[f"predicted/{name}"] = float(predicted[g])
                if floor is not None:
                    out[f"floor_share/{name}"] = float(floor[g])
                if guard is not None:
                    out[f"guard_share/{name}"] = float(guard[g])
        return out

    def state_dict(self) -> dict[str, Any]:
        """RNG, each group's discounted informative and uninformative counts, its pass rate and, with
        ``guard_metric``, its latest and best held-out accuracy."""
        state = {**super().state_dict(), "groups": self.groups.count, "group_names": list(self.groups.names),
                 **self.posterior.state_dict(), "pass_rates": self.pass_rates.state_dict()}
        if self.config.guard_metric:
            state["held_out"] = self.held_out.state_dict()
        if self.model is not None:
            state["model"] = self.model.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        count = self.groups.count
        if not is_count(state.get("groups")) or int(state["groups"]) != count:
            raise StateMismatchError(f"saved state has {short(state.get('groups'))} groups, this taskset makes {count}")
        names = state.get("group_names")  # absent in states saved before the names were
        if names is not None and list(names) != list(self.groups.names):
            raise StateMismatchError(f"saved state is for the groups {short(names)}, this selector makes "
                                     f"{short(list(self.groups.names))} (another feature_keys or bins)")
        # states saved before the one pass-rate estimate also hold "passed"/"failed" (a second posterior): not read
        posterior = self._new_posterior()
        posterior.load_state_dict(state)
        rates = GroupRates(self.groups.group, count, self.config.pass_rate)
        rates.load_state_dict(state["pass_rates"])
        watch = self._new_watch()
        if self.config.guard_metric:
            if "held_out" not in state:
                raise StateMismatchError("saved state has no held-out accuracies; this selector has a guard_metric")
            watch.load_state_dict(state["held_out"])
        model = self.model
        if model is not None:
            if "model" not in state:
                raise StateMismatchError("saved state has no pass-rate model; this selector has a text_key")
            model = PromptPassModel(model.features, self.config.model_prior, self.config.model_discount)
            model.load_state_dict(state["model"])
        super().load_state_dict(state)
        self.posterior, self.pass_rates, self.held_out = posterior, rates, watch
        if model is not None:
            self.model, self._edges, self._pool_rates = model, None, None
