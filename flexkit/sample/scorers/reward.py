"""``reward``: each response's outcome, ``Σ_t scores[b, t] · response_mask[b, t]``.

Source: DataFlex-RL's per-sequence reward scorer. With the adaptive mixer
(``reward_gap``) it is the per-taskset reward signal; with ``topk_fraction`` it keeps the best responses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample._batch import RolloutBatch
from flexkit.sample.scorers._common import RewardFieldScorer, reward_key_field

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class RewardConfig:
    """Parameters of the ``reward`` scorer."""

    reward_key: str | None = reward_key_field()


class RewardScorer(RewardFieldScorer):
    """The summed (masked) reward of each response, (B,)."""

    Config = RewardConfig
    timing = "post_reward"
    granularity = "response"
    needs_groups = False

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Per-response outcome, (B,)."""
        return batch.sequence_rewards(self.config.reward_key)
