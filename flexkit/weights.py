"""Loss weights: kept for ``flexkit.weights.X``; the module is :mod:`flexkit.sample.weights`."""

from __future__ import annotations

from flexkit.sample.weights import (
    AGGREGATIONS,
    LOG_RATIO_CLAMP,
    aggregate,
    combine,
    keep_mask,
    keep_to_sample_weights,
    policy_loss,
    to_token_weights,
)

__all__ = [
    "AGGREGATIONS",
    "LOG_RATIO_CLAMP",
    "aggregate",
    "combine",
    "keep_mask",
    "keep_to_sample_weights",
    "policy_loss",
    "to_token_weights",
]
