"""``difficulty_band`` (reweight): a raw weight inside a band of scores and another outside, normalised to mean 1.

Two rules, chosen by ``mode``:

- ``"absolute"`` (the default): weight ``inside`` for scores in the fixed band ``[low, high]``, ``outside``
  elsewhere. A soft form of ``threshold_band`` (Online Difficulty Filtering, 2504.03380) that keeps some signal
  from too-easy and too-hard groups. The band is closed here (a reweight, unlike DataFlex-RL's strict select).
- ``"quantile"``: DataFlex-RL's ``difficulty_band`` rule. The band is ``[q_low, q_high]``, the ``low_q`` and
  ``high_q`` quantiles of this batch's scores (linear interpolation, as ``torch.quantile``); scores inside
  get ``focus_weight``, the others 1. With a single score, every weight is 1. For token scores the quantiles
  are over the response tokens (DataFlex-RL takes them over every position of the flattened batch, padding
  included).

The raw weights are then scaled to mean 1 over the batch (over response tokens for token scores), so the
loss scale does not depend on how many samples fall in the band. If every raw weight is 0 (``outside = 0``
and nothing inside), all weights stay 0. Each mode refuses the other mode's keys (``low_q``, ``high_q`` and
``focus_weight`` belong to the quantile mode; ``low``, ``high``, ``inside`` and ``outside`` to the absolute one).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from flexkit.config import field
from flexkit.errors import ConfigError
from flexkit.sample._actuator import Actuator, Weights, sample_weights_normalised
from flexkit.sample._batch import RolloutBatch

#: Defaults of the absolute band, and of the quantile band (applied when its keys are unset).
ABSOLUTE_DEFAULTS = {"low": 0.2, "high": 0.8, "inside": 1.0, "outside": 0.1}
QUANTILE_DEFAULTS = {"low_q": 0.25, "high_q": 0.75, "focus_weight": 2.0}


@attrs.frozen(kw_only=True)
class DifficultyBandConfig:
    """Parameters of the ``difficulty_band`` reweighter."""

    mode: Literal["absolute", "quantile"] = field(
        default="absolute", choices=("absolute", "quantile"),
        doc='"absolute": the fixed band [low, high]; "quantile": the band between this batch\'s low_q and '
        "high_q quantiles (DataFlex-RL's rule).",
    )
    low: float = field(default=0.2, doc="Lower edge of the band (inclusive). Absolute mode.")
    high: float = field(default=0.8, doc="Upper edge of the band (inclusive). Absolute mode.")
    inside: float = field(default=1.0, ge=0, doc="Raw weight of scores inside the band. Absolute mode.")
    outside: float = field(default=0.1, ge=0, doc="Raw weight of scores outside the band. Absolute mode.")
    low_q: float | None = field(
        default=None, ge=0, le=1, doc="Quantile of the band's lower edge (inclusive; default 0.25). Quantile mode."
    )
    high_q: float | None = field(
        default=None, ge=0, le=1, doc="Quantile of the band's upper edge (inclusive; default 0.75). Quantile mode."
    )
    focus_weight: float | None = field(
        default=None, ge=0, doc="Raw weight inside the band; 1 outside (default 2.0). Quantile mode."
    )

    def __attrs_post_init__(self) -> None:
        values = attrs.asdict(self, recurse=False)
        if self.mode == "quantile":
            other = [k for k, v in ABSOLUTE_DEFAULTS.items() if values[k] != v]
            if other:
                raise ConfigError(f"{', '.join(other)} apply to mode = \"absolute\"; the quantile band uses "
                                  "low_q, high_q and focus_weight")
            if not self.quantile("low_q") <= self.quantile("high_q"):
                raise ConfigError(f"low_q must be <= high_q, got low_q={self.quantile('low_q')!r}, "
                                  f"high_q={self.quantile('high_q')!r}")
            return
        other = [k for k in QUANTILE_DEFAULTS if values[k] is not None]
        if other:
            raise ConfigError(f"{', '.join(other)} apply to mode = \"quantile\"; set mode = \"quantile\" to use them")
        if not self.low <= self.high:
            raise ConfigError(f"low must be <= high, got low={self.low!r}, high={self.high!r}")
        if self.inside == 0 and self.outside == 0:
            raise ConfigError("inside and outside cannot both be 0")

    def quantile(self, key: str) -> float:
        """The quantile-mode value of ``key`` (``low_q``, ``high_q``, ``focus_weight``), its default when unset."""
        value = attrs.asdict(self, recurse=False)[key]
        return float(QUANTILE_DEFAULTS[key] if value is None else value)


def linear_quantile(sorted_values: Any, q: float) -> Any:
    """The ``q`` quantile of ascending ``sorted_values`` by linear interpolation (``torch.quantile``'s default),
    without ``torch.quantile``'s limit of 16 million elements."""
    import torch

    last = sorted_values.numel() - 1
    rank = torch.tensor(q, dtype=sorted_values.dtype, device=sorted_values.device) * last  # in the scores' dtype
    below = int(rank)
    return torch.lerp(sorted_values[below], sorted_values[min(below + 1, last)], rank - below)


class DifficultyBandReweighter(Actuator):
    """Band weights by an absolute or a quantile band (module docstring), scaled to mean 1."""

    Config = DifficultyBandConfig
    mechanism = "reweight"
    accepts = ("prompt", "response", "token")

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """Band weights with mean 1 (over samples, or over response tokens for token scores)."""
        import torch

        s = scores.detach()
        dtype = torch.promote_types(s.dtype, torch.float32)
        s = s.to(dtype)
        c = self.config
        mask = batch["response_mask"] if s.ndim == 2 else None
        if c.mode == "quantile":
            valid = s[mask.to(device=s.device, dtype=torch.bool)] if mask is not None else s.reshape(-1)
            if valid.numel() <= 1:
                ones = torch.ones_like(s)
                return Weights(sample_weights_normalised(ones, mask))
            ordered = torch.sort(valid).values
            low, high = linear_quantile(ordered, c.quantile("low_q")), linear_quantile(ordered, c.quantile("high_q"))
            inside_w, outside_w = c.quantile("focus_weight"), 1.0
        else:
            low, high, inside_w, outside_w = c.low, c.high, c.inside, c.outside
        inside = (s >= low) & (s <= high)
        raw = torch.where(inside, torch.tensor(inside_w, dtype=dtype, device=s.device),
                          torch.tensor(outside_w, dtype=dtype, device=s.device))
        return Weights(sample_weights_normalised(raw, mask))
