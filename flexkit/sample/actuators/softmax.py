"""``softmax`` (reweight): ``w = softmax(score / temperature)``, scaled to mean 1.

Source: DataFlex-RL's softmax reweighter (normalised to mean 1). For (B,)
scores ``w_b = B · exp(s_b/τ) / Σ_c exp(s_c/τ)``; for token scores the softmax runs over the response tokens
(``response_mask``) of the whole batch and the mean over those tokens is 1. ``temperature < 0`` is not
allowed; to favour *low* scores, use a scorer whose score is high for what you want, or ``negate = true``.

The softmax and its normalising sum run in float64 (:mod:`~flexkit.sample.actuators._mean_one`) and the weights
come back in the scores' dtype (at least float32): their mean is 1 within 1e-6 at B = 65,536, where a float32
softmax times ``B`` drifts by up to ~2e-5 (DataFlex-RL then divides by the mean again).
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample._actuator import Actuator, Weights
from flexkit.sample._batch import RolloutBatch, as_float
from flexkit.sample.actuators._mean_one import mean_one


@attrs.frozen(kw_only=True)
class SoftmaxConfig:
    """Parameters of the ``softmax`` reweighter."""

    temperature: float = field(default=1.0, gt=0, doc="Softmax temperature τ: large τ gives nearly equal weights.")
    negate: bool = field(default=False, doc="Use −score, so low scores get the large weights.")


class SoftmaxReweighter(Actuator):
    """Mean-1 softmax weights over the batch (per sample, or per response token for token scores)."""

    Config = SoftmaxConfig
    mechanism = "reweight"
    accepts = ("prompt", "response", "token")

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """``count · softmax(±score/τ)`` over samples or response tokens."""
        import torch

        s = as_float(scores)
        logits = (-s.double() if self.config.negate else s.double()) / self.config.temperature
        mask = None
        if s.ndim == 2:
            mask = batch["response_mask"].to(device=s.device, dtype=torch.bool)
            if int(mask.sum()) == 0:
                return Weights(torch.zeros_like(s))
            logits = logits.masked_fill(~mask, float("-inf"))
        if logits.numel() == 0:
            return Weights(torch.zeros_like(s))
        return Weights(mean_one(torch.exp(logits - logits.max()), mask, s.dtype))
