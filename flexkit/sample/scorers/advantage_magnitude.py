"""``advantage_magnitude``: how strongly each response pushes the policy, ``|A|`` over its response tokens.

Source: DataFlex-RL's |advantage| scorer (mean/sum/max per sequence). The
same signal drives PLR (2010.03934) and SEC (2505.14970). Runs after advantages are computed
(``timing = "post_advantage"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from flexkit.config import field
from flexkit.sample._batch import RolloutBatch, as_float, masked_sum
from flexkit.sample._scorer import Scorer

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class AdvantageMagnitudeConfig:
    """Parameters of the ``advantage_magnitude`` scorer."""

    reduce: Literal["mean", "sum", "max"] = field(
        default="mean",
        choices=("mean", "sum", "max"),
        doc="How |advantage| is reduced over a response's tokens: mean, sum or max (0 for an empty response).",
    )


class AdvantageMagnitudeScorer(Scorer):
    """``|advantages|`` reduced over each response's tokens (``response_mask``), (B,)."""

    Config = AdvantageMagnitudeConfig
    requires = ("advantages", "response_mask")
    timing = "post_advantage"
    granularity = "response"
    needs_groups = False

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Reduced |advantage| per response, (B,)."""
        import torch

        magnitude = as_float(batch["advantages"]).abs()
        mask = batch["response_mask"].to(device=magnitude.device)
        if self.config.reduce == "max":
            return torch.where(mask.bool(), magnitude, torch.zeros((), dtype=magnitude.dtype,
                                                                   device=magnitude.device)).amax(dim=-1)
        total = masked_sum(magnitude, mask)
        if self.config.reduce == "sum":
            return total
        mean: torch.Tensor = total / mask.to(magnitude.dtype).sum(dim=-1).clamp(min=1)
        return mean
