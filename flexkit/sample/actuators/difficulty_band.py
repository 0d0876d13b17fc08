"""``difficulty_band`` (reweight): weight ``inside`` for scores in ``[low, high]``, ``outside`` elsewhere.

After DataFlex-RL's band reweighter (a weight inside a band, normalised to
mean 1); a soft form of ``threshold_band`` (Online Difficulty Filtering, 2504.03380) that keeps some signal
from too-easy and too-hard groups. The band is closed here (a reweight, unlike DataFlex-RL's strict select).

The raw weights are then scaled to mean 1 over the batch (over response tokens for token scores), so the
loss scale does not depend on how many samples fall in the band. If every raw weight is 0 (``outside = 0``
and nothing inside), all weights stay 0.
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample.actuator import Actuator, Weights, sample_weights_normalised
from flexkit.sample.batch import RolloutBatch


@attrs.frozen(kw_only=True)
class DifficultyBandConfig:
    """Parameters of the ``difficulty_band`` reweighter."""

    low: float = field(default=0.2, doc="Lower edge of the band (inclusive).")
    high: float = field(default=0.8, doc="Upper edge of the band (inclusive).")
    inside: float = field(default=1.0, ge=0, doc="Raw weight of scores inside the band.")
    outside: float = field(default=0.1, ge=0, doc="Raw weight of scores outside the band.")

    def __attrs_post_init__(self) -> None:
        if not self.low <= self.high:
            raise ValueError(f"low must be <= high, got low={self.low!r}, high={self.high!r}")
        if self.inside == 0 and self.outside == 0:
            raise ValueError("inside and outside cannot both be 0")


class DifficultyBandReweighter(Actuator):
    """``inside`` / ``outside`` raw weights by band membership, scaled to mean 1."""

    name = "difficulty_band"
    mechanism = "reweight"
    accepts = ("prompt", "response", "token")

    def __init__(self, config: DifficultyBandConfig | None = None) -> None:
        super().__init__(config if config is not None else DifficultyBandConfig())

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """Band weights with mean 1 (over samples, or over response tokens for token scores)."""
        import torch

        s = scores.detach()
        dtype = torch.promote_types(s.dtype, torch.float32)
        c = self.config
        inside = (s >= c.low) & (s <= c.high)
        raw = torch.where(inside, torch.tensor(c.inside, dtype=dtype, device=s.device),
                          torch.tensor(c.outside, dtype=dtype, device=s.device))
        mask = batch["response_mask"] if s.ndim == 2 else None
        return Weights(sample_weights_normalised(raw, mask))
