"""``group_reward_range``: ``max − min`` of the rewards within each response's group.

Zero exactly when every response of the group got the same reward (no float rounding, unlike a computed
standard deviation of equal values), which is the test DAPO's dynamic sampling (arXiv 2503.14476) applies:
such a group has all-zero GRPO advantages. Pair it with the ``zero_variance_filter`` actuator. One
``scatter_reduce`` each for the group maxima and minima: O(B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample.batch import RolloutBatch
from flexkit.sample.scorer import Scorer
from flexkit.sample.scorers._common import group_ids, reward_key_field, reward_requires

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class GroupRewardRangeConfig:
    """Parameters of the ``group_reward_range`` scorer."""

    reward_key: str | None = reward_key_field()


class GroupRewardRangeScorer(Scorer):
    """``max − min`` of the summed rewards within each group, broadcast to its members, (B,)."""

    name = "group_reward_range"
    requires = (*reward_requires(None), "uid")
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def __init__(self, config: GroupRewardRangeConfig | None = None) -> None:
        config = config if config is not None else GroupRewardRangeConfig()
        super().__init__(config)
        self.requires = (*reward_requires(config.reward_key), "uid")

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Within-group reward range per response, (B,)."""
        import torch

        rewards = batch.sequence_rewards(self.config.reward_key)
        gid, num_groups = group_ids(batch, rewards.device)
        empty = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
        high = empty.scatter_reduce(0, gid, rewards, "amax", include_self=False)
        low = empty.scatter_reduce(0, gid, rewards, "amin", include_self=False)
        return (high - low)[gid]
