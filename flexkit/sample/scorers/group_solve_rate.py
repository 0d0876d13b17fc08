"""``group_solve_rate``: every response scores its group's fraction of solved responses.

Source: DataFlex-RL's ``GroupSolveRateScorer`` (its selector guide, step 1): per-sequence score
``s_b = Σ_t scores[b, t] · response_mask[b, t]``, success ``s_b > success_threshold``, and every member of a
``uid`` group gets the group's success fraction. Paired with ``threshold_band`` (0.2, 0.8) it keeps the groups
that are neither all-solved nor all-failed — Online Difficulty Filtering (2504.03380); with GRPO those are the
groups whose advantages are not all zero (DAPO's dynamic sampling, 2503.14476).

flexkit computes all groups at once (``np.unique`` inverse, one ``index_add_`` and one ``bincount``): O(B·T)
for the token sum plus O(B) for the groups, where DataFlex-RL loops over groups in Python (O(G·B)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.config import field
from flexkit.errors import SampleError
from flexkit.sample.scorers._common import GroupRewardScorer, group_mean, reward_key_field

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class GroupSolveRateConfig:
    """Parameters of the ``group_solve_rate`` scorer."""

    success_threshold: float = field(
        default=0.5, doc="A response counts as solved when its summed reward is strictly above this."
    )
    reward_key: str | None = reward_key_field()


class GroupSolveRateScorer(GroupRewardScorer):
    """The solve rate of each response's group (equal within a group; in [0, 1])."""

    Config = GroupSolveRateConfig

    def per_group(self, rewards: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
        """Fraction of responses per group whose reward is above ``success_threshold``, (G,)."""
        import torch

        if rewards.numel() and not bool(torch.isfinite(rewards).all()):
            raise SampleError("scorer 'group_solve_rate': rewards must be finite, got NaN or infinite values")
        success = (rewards > self.config.success_threshold).to(rewards.dtype)
        return group_mean(success, gid, num_groups)
