"""``zero_variance_filter`` (select): drop the groups whose rewards are all equal, and report the refill need.

DAPO's dynamic sampling (Yu et al., arXiv 2503.14476): a group whose responses all got the same reward (all
correct or all wrong) has zero GRPO advantage and only dilutes the batch, so it is dropped and the trainer
samples more prompts until the batch holds the wanted number of groups, with a cap on generation rounds. Pair
it with the ``group_reward_range`` scorer (exactly 0 for equal rewards) or ``group_reward_std``. A group is
kept when its score is strictly above ``min_spread``. The returned
:class:`~flexkit.sample.actuators.group_filter.GroupKeep` carries ``kept_groups``, ``groups_needed`` and
``refill`` (see :mod:`flexkit.sample.actuators.group_filter`). O(B) per call.
"""

from __future__ import annotations

import attrs
import numpy as np

from flexkit.config import field
from flexkit.sample.actuators.group_filter import GroupFilter, max_rounds_field, target_groups_field


@attrs.frozen(kw_only=True)
class ZeroVarianceFilterConfig:
    """Parameters of the ``zero_variance_filter`` actuator."""

    min_spread: float = field(default=0.0, ge=0, doc="Keep groups whose score (reward range or std) exceeds this.")
    target_groups: int | None = target_groups_field()
    max_rounds: int = max_rounds_field()


class ZeroVarianceFilter(GroupFilter):
    """Keep groups with a reward spread above ``min_spread``; count what the step still needs."""

    Config = ZeroVarianceFilterConfig

    def keep_mask(self, scores: np.ndarray) -> np.ndarray:
        """Samples whose group spread is strictly above ``min_spread``."""
        mask: np.ndarray = scores > self.config.min_spread
        return mask
