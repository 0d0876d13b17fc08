"""``pass_rate_band`` (select): train only on groups whose pass rate lies in a band, and report the refill need.

Online Difficulty Filtering (Bae et al., arXiv 2504.03380): after rollouts, keep the prompts whose group pass
rate ``p`` satisfies ``low ≤ p ≤ high`` (the paper's band is 0.25–0.75), and keep sampling until the batch is
full. Pair it with the ``group_solve_rate`` scorer. Unlike ``threshold_band`` (strict bounds, no accounting)
the band is closed by default (``inclusive``) and the returned
:class:`~flexkit.sample.actuators.group_filter.GroupKeep` says how many groups the trainer should refill.
O(B) per call.
"""

from __future__ import annotations

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError
from flexkit.sample.actuators.group_filter import GroupFilter, max_rounds_field, target_groups_field


@attrs.frozen(kw_only=True)
class PassRateBandConfig:
    """Parameters of the ``pass_rate_band`` actuator."""

    low: float = field(default=0.25, ge=0, le=1, doc="Lowest pass rate kept.")
    high: float = field(default=0.75, ge=0, le=1, doc="Highest pass rate kept.")
    inclusive: bool = field(default=True, doc="Keep pass rates equal to low or high (false: strictly inside).")
    target_groups: int | None = target_groups_field()
    max_rounds: int = max_rounds_field()

    def __attrs_post_init__(self) -> None:
        if not self.low <= self.high or (not self.inclusive and self.low == self.high):
            raise ConfigError(f"the band is empty: low={self.low!r}, high={self.high!r}, inclusive={self.inclusive}")


class PassRateBand(GroupFilter):
    """Keep groups with a pass rate inside ``[low, high]``; count what the step still needs."""

    Config = PassRateBandConfig

    def keep_mask(self, scores: np.ndarray) -> np.ndarray:
        """Samples whose group pass rate lies in the band."""
        c = self.config
        if c.inclusive:
            mask: np.ndarray = (scores >= c.low) & (scores <= c.high)
            return mask
        mask = (scores > c.low) & (scores < c.high)
        return mask
