"""``group_reward_std``: the standard deviation of the rewards within each response's group.

Zero exactly for groups whose responses all got the same reward — the groups GRPO learns nothing from (their
advantages are all zero); DAPO's dynamic sampling (2503.14476) drops them, and PODS (2504.13818) keeps the
subset of maximal variance. Population standard deviation (ddof 0, so a single-response group scores 0),
computed in two vectorised passes (group means, then mean squared deviations) for numerical stability.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample.scorers._common import GroupRewardScorer, group_mean, reward_key_field

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class GroupRewardStdConfig:
    """Parameters of the ``group_reward_std`` scorer."""

    reward_key: str | None = reward_key_field()


class GroupRewardStdScorer(GroupRewardScorer):
    """Population std of the summed rewards within each group, broadcast to its members, (B,)."""

    Config = GroupRewardStdConfig

    def per_group(self, rewards: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
        """Population std of the rewards per group, (G,)."""
        deviation = rewards - group_mean(rewards, gid, num_groups)[gid]
        return group_mean(deviation * deviation, gid, num_groups).sqrt()
