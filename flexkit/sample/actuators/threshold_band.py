"""``threshold_band`` (select): keep the samples whose score lies strictly inside ``(low, high)``.

Source: DataFlex-RL's ``ThresholdBandSelector`` (its selector guide, step 2). With ``group_solve_rate`` and (0.2, 0.8)
it is Online Difficulty Filtering (2504.03380): groups that are all solved or all failed are dropped.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError
from flexkit.sample._actuator import Actuator, Keep
from flexkit.sample._batch import RolloutBatch


@attrs.frozen(kw_only=True)
class ThresholdBandConfig:
    """Parameters of the ``threshold_band`` selector."""

    low: float = field(default=0.0, doc="Keep scores strictly above this.")
    high: float = field(default=1.0, doc="Keep scores strictly below this.")

    def __attrs_post_init__(self) -> None:
        if not self.low < self.high:
            raise ConfigError(f"low must be < high, got low={self.low!r}, high={self.high!r}")


class ThresholdBandFilter(Actuator):
    """Keep samples with ``low < score < high`` (possibly none: every weight is then 0)."""

    Config = ThresholdBandConfig
    mechanism = "select"
    accepts = ("prompt", "response")

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Keep:
        """The indices with a score strictly inside the band."""
        s = scores.detach()
        inside = (s > self.config.low) & (s < self.config.high)
        return Keep(np.flatnonzero(inside.cpu().numpy()))
