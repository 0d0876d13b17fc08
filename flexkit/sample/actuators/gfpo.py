"""``gfpo`` (select): in each group of responses, keep the ``k`` shortest, or the ``k`` most token-efficient.

GFPO, Group Filtered Policy Optimization (Shrivastava et al., arXiv 2508.09726): sample a larger group per
prompt, then train only on the ``k`` responses that score best on a filter metric, which curbs the length
inflation of GRPO. Two metrics from the paper:

- ``metric = "short"``: the ``k`` responses with the fewest response tokens (``Σ_t response_mask``);
- ``metric = "efficiency"``: the ``k`` with the highest ``reward / length`` (token efficiency).

Pair it with the ``reward`` scorer: the scores are each response's reward (ignored by ``"short"``). A group of
at most ``k`` responses is kept whole; equal metric values go to the earlier sample. Lengths are clamped to at
least 1 token. The work is one ``lexsort`` of the batch: O(B log B), no loop over groups.

Difference from the paper: GFPO normalises the advantages of the kept responses over the kept subset; flexkit
selects through loss weights, so the kept responses keep the advantages the trainer computed over the whole
group (as DataFlex-RL's ``gfpo`` does).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np

from flexkit.config import field
from flexkit.sample._actuator import Actuator, Keep
from flexkit.sample._batch import RolloutBatch, as_float


@attrs.frozen(kw_only=True)
class GfpoConfig:
    """Parameters of the ``gfpo`` selector."""

    k: int = field(default=8, ge=1, doc="Responses kept per group (groups of at most k are kept whole).")
    metric: Literal["short", "efficiency"] = field(
        default="efficiency", choices=("short", "efficiency"),
        doc='"short": the k shortest responses; "efficiency": the k highest reward / length.',
    )


def rank_in_group(gid: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Each sample's 0-based rank within its group by ``key`` descending, ties to the lower index. O(B log B)."""
    n = len(gid)
    order = np.lexsort((np.arange(n), -key, gid))
    sorted_gid = gid[order]
    starts = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]])
    first = np.repeat(starts, np.diff(np.r_[starts, n]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - first
    return rank


class GfpoFilter(Actuator):
    """GFPO's group filter: the ``k`` best responses of each group by length or reward per token."""

    Config = GfpoConfig
    mechanism = "select"
    accepts = ("response",)

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Keep:
        """The indices of each group's ``k`` best responses by the configured metric."""
        batch.require(["uid", "response_mask"], who="actuator 'gfpo'")
        gid, _ = batch.group_index()
        mask = batch["response_mask"].detach()
        if mask.shape[0] == 0:
            return Keep(np.empty(0, dtype=np.int64))
        length = np.maximum(mask.reshape(mask.shape[0], -1).double().sum(-1).cpu().numpy(), 1.0)
        reward = as_float(scores).double().cpu().numpy().reshape(-1)
        key = -length if self.config.metric == "short" else reward / length
        return Keep(np.flatnonzero(rank_in_group(gid, key) < self.config.k))
