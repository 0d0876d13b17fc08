"""``learnability``: prefer tasks the model solves about half the time, by the learnability ``p(1 − p)``.

After LILO, "Learning to Reason at the Frontier of Learnability" (Foster & Foerster, arXiv 2502.12272): the
expected squared advantage of a binary-reward task with success rate ``p`` is ``p(1 − p)``, so tasks with
``p`` near 0.5 carry the most learning signal; LILO samples a larger batch and trains on the most learnable
prompts. flexkit scores candidates with running pass-rate estimates instead of fresh rollouts (no rollouts are
spent on the filter):

- per task, discounted sums of feedback values ``S_i ← γ·S_i + v`` and observations ``n_i ← γ·n_i + 1``;
- estimates shrunk toward the pooled pass rate ``p̄`` (an EMA of every feedback batch's mean) with ``κ``
  pseudo-observations: ``p̂_i = (S_i + κ·p̄) / (n_i + κ)``. An unseen task gets ``p̄``; one lucky
  observation moves a task only part of the way, so the selector does not chase a few lucky tasks;
- with ``feature_keys = ["level"]`` (columns that group tasks: categorical values such as a level or a source
  label, or with ``bins = k`` numeric features cut into ``k`` quantile bins each; see
  :mod:`flexkit.selectors._grouping`), ``p̄`` is the task's **group** pass rate instead, an EMA of each feedback
  batch's per-group mean (the pool's until the group is observed).
  When the pool is large and each task is seen about twice, per-task estimates stay at their prior, and the
  group rate is what tells a solved level from the frontier and from hopeless ones;
- with ``explore = true``, selection shrinks toward a Thompson draw of the group's pass rate from a
  ``Beta(1 + s_g, 1 + f_g)`` posterior whose evidence is discounted by ``1 − group_rate`` at each feedback
  (the memory of the moving average), one draw per candidate. A group that is not drawn loses its evidence and is
  re-probed, so a level out of reach when last seen gets draws again when it may have become learnable (the
  ``frontier`` selector's mechanism, :mod:`flexkit.selectors.frontier`). Without it, a group whose rate is near 0
  or 1 keeps a learnability near 0 and is never drawn again;
- each batch: ``K = ceil(candidates · B)`` tasks drawn uniformly; the first ``uniform_fraction · B`` (rounded at
  random) are kept as drawn (a uniform floor, 0 by default), then the rest are the highest ``p̂(1 − p̂)`` of the other
  candidates (``tau = 0``) or drawn without replacement with probability ∝ ``(p̂(1 − p̂))^(1/tau)``.

Cost per step: O(K) to select, O(feedback) to update. State: ``S``, ``n`` (two floats per task), ``p̄``, RNG,
and with a grouping column one rate per group (plus a 4-byte group id per task, derived from the column).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector
from flexkit.selectors._estimates import (
    GroupBeta,
    GroupRates,
    PooledRate,
    candidate_count,
    draw_candidates,
    gumbel_top_k,
    uniform_floor,
)
from flexkit.selectors._grouping import TaskGroups, bins_field, uniform_fraction_field
from flexkit.selectors._task_table import TaskTable


@attrs.frozen(kw_only=True)
class LearnabilityConfig:
    """Parameters of the ``learnability`` selector."""

    candidates: float = field(
        default=4.0, ge=1, le=1e6, doc="Candidates drawn uniformly per batch, as a multiple of the batch size."
    )
    tau: float = field(
        default=0.0, ge=0, doc="0: take the most learnable candidates; > 0: sample ∝ learnability^(1/tau)."
    )
    prior_strength: float = field(
        default=1.0, gt=0, doc="κ: pseudo-observations of the pooled pass rate added to every task's estimate."
    )
    decay: float = field(
        default=1.0, gt=0, le=1, doc="γ: discount of a task's earlier observations at each new one (1: none)."
    )
    pool_rate: float = field(
        default=0.1, gt=0, le=1, doc="EMA weight of each feedback batch's mean in the pooled pass rate."
    )
    feature_keys: tuple[str, ...] = field(
        factory=tuple,
        doc="Optional: columns that group tasks (e.g. level, or a source label); estimates then shrink toward the "
        "group's pass rate, learned online, instead of the pool's. Empty: one pool.",
    )
    bins: int = bins_field()
    uniform_fraction: float = uniform_fraction_field()
    group_rate: float = field(
        default=0.2, gt=0, le=1, doc="EMA weight of each feedback batch's group mean in the group pass rates."
    )
    explore: bool = field(
        default=False,
        doc="Shrink toward a Thompson draw of the group's pass rate (a Beta posterior whose evidence is discounted "
        "by 1 - group_rate at each feedback) instead of its moving average, so groups not drawn lately are "
        "re-probed. Without feature_keys the pool is one group.",
    )


class LearnabilitySelector(Selector):
    """Pick the most learnable of a uniform candidate pool by shrunk pass-rate estimates (module docstring)."""

    Config = LearnabilityConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    def _init_state(self) -> None:
        config = self.config
        self.table = TaskTable(self.size, (0.0, 0.0), ("sums", "counts"))
        self.pool = PooledRate(config.pool_rate)
        self.groups: GroupRates | None = None
        if config.feature_keys:
            groups = TaskGroups.from_features(self.features, config.feature_keys, self.size, bins=config.bins,
                                              owner="learnability")
            self.groups = GroupRates(groups.group, groups.count, config.group_rate)
        self.posterior = self._new_posterior() if config.explore else None

    def _new_posterior(self) -> GroupBeta:
        group = self.groups.group if self.groups is not None else np.zeros(self.size, dtype=np.int32)
        return GroupBeta(group, len(self.groups.values) if self.groups is not None else 1, 1.0 - self.config.group_rate,
                         ("successes", "failures"))

    @property
    def sums(self) -> np.ndarray:
        """Every task's discounted sum of feedback values (a dense array: 8 bytes per task)."""
        return self.table.dense()[0]

    @property
    def counts(self) -> np.ndarray:
        """Every task's discounted number of feedback values (a dense array: 8 bytes per task)."""
        return self.table.dense()[1]

    def predicted_pass_rates(self) -> np.ndarray:
        """Every task's shrunk pass-rate estimate (:meth:`estimates`)."""
        return self.estimates()

    def estimates(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Shrunk pass-rate estimates ``p̂`` of ``indices`` (all tasks when ``None``)."""
        sel = slice(None) if indices is None else indices
        sums, counts = self.table.dense() if indices is None else self.table.get(indices)
        kappa = self.config.prior_strength
        prior = self.pool.value if self.groups is None else self.groups.of(sel, self.pool.value)
        values: np.ndarray = (sums + kappa * prior) / (counts + kappa)
        return values

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        cand = draw_candidates(self.rng, self.size, candidate_count(batch_size, self.config.candidates, self.size))
        floor = uniform_floor(batch_size, self.config.uniform_fraction, self.rng)
        rest = cand[floor:]
        if self.posterior is None:
            p = self.estimates(rest)
        else:  # shrink toward one Thompson draw of the group's pass rate per candidate
            sums, counts = self.table.get(rest)
            kappa = self.config.prior_strength
            p = (sums + kappa * self.posterior.draw(self.rng, self.posterior.group[rest])) / (counts + kappa)
        learnability = p * (1.0 - p)
        pick = gumbel_top_k(np.log(learnability + 1e-12), batch_size - floor, self.config.tau, self.rng)
        chosen = np.concatenate([cand[:floor], rest[pick]]) if floor else rest[pick]
        info = {}
        if return_extra_info:
            rates = self.estimates(chosen)
            info = {"candidates": len(cand), "uniform": floor, "pass_rate": rates, "learnability": rates * (1 - rates),
                    "pooled_pass_rate": self.pool.value}
        return chosen, info

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        gamma = self.config.decay
        sums, counts = self.table.get(indices)
        self.table.set(indices, gamma * sums + values, gamma * counts + 1.0)
        self.pool.update(values)
        if self.groups is not None:
            self.groups.update(indices, values)
        if self.posterior is not None:
            self.posterior.update(indices, values)

    def state_dict(self) -> dict[str, Any]:
        """RNG, per-task discounted sums and counts (of the tasks with feedback only, above
        :data:`~flexkit.selectors._task_table.DENSE_MAX` tasks), pooled pass rate (and group rates)."""
        state = {**super().state_dict(), **self.table.state_dict(), "pool": self.pool.state_dict()}
        if self.groups is not None:
            state["groups"] = self.groups.state_dict()
        if self.posterior is not None:
            state["posterior"] = self.posterior.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        table = TaskTable.from_state(self.size, (0.0, 0.0), ("sums", "counts"), state, _check_sums_and_counts)
        pool = PooledRate(self.config.pool_rate)
        pool.load_state_dict(state["pool"])
        for key, part in (("groups", self.groups), ("posterior", self.posterior)):
            if part is not None and key not in state:
                raise StateMismatchError(f"saved state has no {key!r}: it comes from a learnability selector without "
                                         f"{'feature_keys' if key == 'groups' else 'explore'}")
        groups = None
        if self.groups is not None:
            groups = GroupRates(self.groups.group, len(self.groups.values), self.config.group_rate)
            groups.load_state_dict(state["groups"])
        posterior = None
        if self.posterior is not None:
            posterior = self._new_posterior()
            posterior.load_state_dict(state["posterior"])
        super().load_state_dict(state)
        self.table, self.pool, self.groups, self.posterior = table, pool, groups, posterior


def _check_sums_and_counts(sums: np.ndarray, counts: np.ndarray) -> None:
    """Saved sums and counts are >= 0, and no sum exceeds its count (values lie in [0, 1])."""
    for name, arr in (("sums", sums), ("counts", counts)):
        if arr.size and arr.min() < 0:
            raise StateMismatchError(f"saved {name!r} holds {arr.min()!r}, below 0.0")
    if (sums > counts + 1e-9).any():
        raise StateMismatchError("saved learnability sums exceed their counts")
