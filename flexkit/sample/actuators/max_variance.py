"""``max_variance`` (select): in each group, keep the ``m`` responses whose rewards have the largest variance.

PODS, Policy Optimization with Down-Sampling (Xu et al., "Not All Rollouts are Useful: Down-Sampling Rollouts
in LLM Reinforcement Learning", arXiv 2504.13818): generate ``n`` rollouts per prompt, train on a subset of
``m``. Max-variance down-sampling keeps the size-``m`` subset with the largest reward variance, and the paper
shows the optimum is always made of extremes: with the group's rewards sorted, ``r_(1) ≤ … ≤ r_(n)``, it is
the ``i`` lowest plus the ``m − i`` highest for some ``i ∈ {0, …, m}``. So one sort and a scan of the
``m + 1`` candidates with prefix sums of ``r`` and ``r²`` find it exactly::

    S1(i) = P1[i] + P1[n] − P1[n − m + i],   S2(i) likewise with r²,   Var(i) = S2(i)/m − (S1(i)/m)²

(for binary rewards this keeps as many correct as incorrect responses as the group allows). Rewards are shifted
by the group minimum first (variance is shift-invariant; it avoids cancellation) and accumulated in float64.
Among ``i`` of equal variance the smallest wins; among equal rewards the low end takes the earlier samples and
the high end the later ones. All groups at once: one ``lexsort`` plus O(B) work, O(B log B) in all.

``m`` is ``keep`` when set, else ``ceil(keep_fraction · n)`` (at least 1, the same rounding as
``topk_fraction``; DataFlex-RL rounds to nearest); a group of at most ``m`` responses is kept whole. Pair it
with the ``reward`` scorer. As with ``gfpo``, the kept responses keep the advantages the trainer computed over
the whole group (PODS recomputes them over the kept subset).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.sample._actuator import Actuator, Keep
from flexkit.sample._batch import RolloutBatch, as_float


@attrs.frozen(kw_only=True)
class MaxVarianceConfig:
    """Parameters of the ``max_variance`` selector."""

    keep_fraction: float = field(
        default=0.5, gt=0, le=1, doc="m = ceil(keep_fraction · group size) responses kept per group (at least 1)."
    )
    keep: int | None = field(default=None, ge=1, doc="m, responses kept per group (overrides keep_fraction).")


def max_variance_keep(values: np.ndarray, gid: np.ndarray, m: np.ndarray) -> np.ndarray:
    """A bool per sample: whether it is in its group's maximal-variance subset of ``m[g]`` samples.

    ``values`` (B,) are the rewards, ``gid`` (B,) dense group ids ``0 .. G-1``, ``m`` (G,) the subset sizes.
    """
    n_total = len(values)
    if n_total == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((np.arange(n_total), values, gid))
    sv, sg = values[order], gid[order]
    sizes = np.bincount(gid, minlength=len(m))
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    m = np.minimum(m, sizes)
    x = sv - sv[starts[sg]]  # shift by the group minimum
    c1 = np.r_[0.0, np.cumsum(x)]
    c2 = np.r_[0.0, np.cumsum(x * x)]
    # candidates (g, i), i = 0 .. m_g: the i lowest and the m_g − i highest of group g
    cand_g = np.repeat(np.arange(len(m)), m + 1)
    cand_i = np.arange(len(cand_g)) - np.repeat(np.r_[0, np.cumsum(m + 1)[:-1]], m + 1)
    s, n, k = starts[cand_g], sizes[cand_g], m[cand_g]
    hi_from = s + n - k + cand_i
    s1 = (c1[s + cand_i] - c1[s]) + (c1[s + n] - c1[hi_from])
    s2 = (c2[s + cand_i] - c2[s]) + (c2[s + n] - c2[hi_from])
    kf = np.maximum(k, 1).astype(np.float64)
    var = s2 / kf - (s1 / kf) ** 2
    best = np.lexsort((cand_i, -var, cand_g))  # per group: largest variance, then smallest i
    first = np.r_[0, np.cumsum(m + 1)[:-1]]
    i_star = cand_i[best[first]]
    pos = np.arange(n_total) - starts[sg]
    keep_sorted = (pos < i_star[sg]) | (pos >= sizes[sg] - (m[sg] - i_star[sg]))
    keep = np.empty(n_total, dtype=bool)
    keep[order] = keep_sorted
    return keep


class MaxVarianceFilter(Actuator):
    """PODS max-variance down-sampling: per group, the size-``m`` subset of largest reward variance."""

    Config = MaxVarianceConfig
    mechanism = "select"
    accepts = ("response",)

    def subset_sizes(self, sizes: np.ndarray) -> np.ndarray:
        """``m`` per group for group sizes ``sizes``."""
        if self.config.keep is not None:
            return np.full(len(sizes), self.config.keep, dtype=np.int64)
        m = np.ceil(self.config.keep_fraction * sizes - 1e-9)  # keep_count's rule, for every group at once
        counts: np.ndarray = np.clip(m, 1, np.maximum(sizes, 1)).astype(np.int64)
        return counts

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Keep:
        """The indices of each group's maximal-variance subset."""
        batch.require(["uid"], who="actuator 'max_variance'")
        gid, num_groups = batch.group_index()
        values = as_float(scores).double().cpu().numpy().reshape(-1)
        m = self.subset_sizes(np.bincount(gid, minlength=num_groups))
        return Keep(np.flatnonzero(max_variance_keep(values, gid, m)))
