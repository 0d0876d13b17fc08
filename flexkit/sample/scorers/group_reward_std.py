"""``group_reward_std``: the standard deviation of the rewards within each response's group.

Zero exactly for groups whose responses all got the same reward — the groups GRPO learns nothing from (their
advantages are all zero); DAPO's dynamic sampling (2503.14476) drops them, and PODS (2504.13818) keeps the
subset of maximal variance. Population standard deviation (ddof 0, so a single-response group scores 0),
computed in two vectorised passes (group means, then mean squared deviations) for numerical stability.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample.batch import RolloutBatch
from flexkit.sample.scorer import Scorer
from flexkit.sample.scorers._common import group_ids, group_mean, reward_key_field, reward_requires

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class GroupRewardStdConfig:
    """Parameters of the ``group_reward_std`` scorer."""

    reward_key: str | None = reward_key_field()


class GroupRewardStdScorer(Scorer):
    """Population std of the summed rewards within each group, broadcast to its members, (B,)."""

    name = "group_reward_std"
    requires = (*reward_requires(None), "uid")
    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def __init__(self, config: GroupRewardStdConfig | None = None) -> None:
        config = config if config is not None else GroupRewardStdConfig()
        super().__init__(config)
        self.requires = (*reward_requires(config.reward_key), "uid")

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Within-group reward std per response, (B,)."""
        rewards = batch.sequence_rewards(self.config.reward_key)
        gid, num_groups = group_ids(batch, rewards.device)
        deviation = rewards - group_mean(rewards, gid, num_groups)[gid]
        return group_mean(deviation * deviation, gid, num_groups).sqrt()[gid]
