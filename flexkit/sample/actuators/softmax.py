"""``softmax`` (reweight): ``w = softmax(score / temperature)``, scaled to mean 1.

Source: DataFlex-RL's softmax reweighter (normalised to mean 1). For (B,)
scores ``w_b = B · exp(s_b/τ) / Σ_c exp(s_c/τ)``; for token scores the softmax runs over the response tokens
(``response_mask``) of the whole batch and the mean over those tokens is 1. ``temperature < 0`` is not
allowed; to favour *low* scores, use a scorer whose score is high for what you want, or ``negate = true``.
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample.actuator import Actuator, Weights
from flexkit.sample.batch import RolloutBatch


@attrs.frozen(kw_only=True)
class SoftmaxConfig:
    """Parameters of the ``softmax`` reweighter."""

    temperature: float = field(default=1.0, gt=0, doc="Softmax temperature τ: large τ gives nearly equal weights.")
    negate: bool = field(default=False, doc="Use −score, so low scores get the large weights.")


class SoftmaxReweighter(Actuator):
    """Mean-1 softmax weights over the batch (per sample, or per response token for token scores)."""

    name = "softmax"
    mechanism = "reweight"
    accepts = ("prompt", "response", "token")

    def __init__(self, config: SoftmaxConfig | None = None) -> None:
        super().__init__(config if config is not None else SoftmaxConfig())

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """``count · softmax(±score/τ)`` over samples or response tokens."""
        import torch

        s = scores.detach()
        s = s.to(torch.promote_types(s.dtype, torch.float32))
        logits = (-s if self.config.negate else s) / self.config.temperature
        if s.ndim == 2:
            mask = batch["response_mask"].to(device=s.device, dtype=torch.bool)
            logits = logits.masked_fill(~mask, float("-inf"))
            count = mask.sum()
            if int(count) == 0:
                return Weights(torch.zeros_like(s))
            w = torch.softmax(logits.reshape(-1), dim=0).reshape(s.shape) * count.to(s.dtype)
            return Weights(w)
        return Weights(torch.softmax(logits, dim=0) * s.shape[0])
