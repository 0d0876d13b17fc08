"""``group_reward_range``: ``max − min`` of the rewards within each response's group.

Zero exactly when every response of the group got the same reward (no float rounding, unlike a computed
standard deviation of equal values), which is the test DAPO's dynamic sampling (arXiv 2503.14476) applies:
such a group has all-zero GRPO advantages. Pair it with the ``zero_variance_filter`` actuator. One
``scatter_reduce`` each for the group maxima and minima: O(B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample.scorers._common import GroupRewardScorer, reward_key_field

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class GroupRewardRangeConfig:
    """Parameters of the ``group_reward_range`` scorer."""

    reward_key: str | None = reward_key_field()


class GroupRewardRangeScorer(GroupRewardScorer):
    """``max − min`` of the summed rewards within each group, broadcast to its members, (B,)."""

    Config = GroupRewardRangeConfig

    def per_group(self, rewards: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
        """``max − min`` of the rewards per group, (G,)."""
        import torch

        empty = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
        high = empty.scatter_reduce(0, gid, rewards, "amax", include_self=False)
        low = empty.scatter_reduce(0, gid, rewards, "amin", include_self=False)
        return high - low
