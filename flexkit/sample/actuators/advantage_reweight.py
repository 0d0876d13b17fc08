"""``advantage_reweight`` (reweight): damp low-probability tokens, ``w_t = α·π(t) + (1 − α)``, mean 1.

Advantage Reweighting (Yang et al., "Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs", arXiv
2505.12929): the gradient of a token's log-probability grows as its probability falls, so the few
low-probability tokens of a response dominate a policy-gradient update. The paper scales each token's advantage
by a weight that grows with the token's probability under the policy::

    Â_t ← [α · π_θ(t) + (1 − α)] · Â_t,        α ∈ [0, 1]

``α = 0`` is plain GRPO; a token with ``π → 0`` keeps ``1 − α`` of its advantage, one with ``π → 1`` all of it.
Pair it with the ``token_prob`` scorer (``π = exp(old_log_probs)`` per token, as DataFlex-RL does). A weight
multiplying the per-token loss is the same as multiplying the advantage. With ``normalize`` (the default, as
DataFlex-RL) the weights are scaled to mean 1 over the batch's response tokens, accumulated in float64, so the
update's scale stays that of the unweighted loss; ``normalize = false`` gives the paper's raw weights. It
accepts token scores only (a pipeline pairing it with another scorer is refused when it loads). O(B·T).
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.config import field
from flexkit.errors import SampleError
from flexkit.sample._actuator import Actuator, Weights
from flexkit.sample._batch import RolloutBatch, as_float
from flexkit.sample.actuators._mean_one import mean_one


@attrs.frozen(kw_only=True)
class AdvantageReweightConfig:
    """Parameters of the ``advantage_reweight`` reweighter."""

    alpha: float = field(default=0.5, ge=0, le=1, doc="α: weight α·π + (1 − α); 0 leaves every token at 1.")
    normalize: bool = field(
        default=True, doc="Scale the weights to mean 1 over response tokens (false: the paper's raw weights)."
    )


class AdvantageReweighter(Actuator):
    """Per-token weights ``α·π + (1 − α)`` from token probabilities, mean 1 over response tokens."""

    Config = AdvantageReweightConfig
    mechanism = "reweight"
    accepts = ("token",)

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """``α·π + (1 − α)`` on response tokens (0 elsewhere), normalised to mean 1 unless ``normalize`` is off."""
        import torch

        pi = as_float(scores)
        if pi.ndim != 2:
            raise SampleError(f"actuator 'advantage_reweight' needs (B, T) token scores, got shape {tuple(pi.shape)}")
        batch.require(["response_mask"], who="actuator 'advantage_reweight'")
        mask = batch["response_mask"].to(device=pi.device, dtype=torch.bool)
        if bool((pi[mask] < 0).any()):
            raise SampleError("actuator 'advantage_reweight' needs token probabilities >= 0 (the token_prob "
                              f"scorer's), got {float(pi[mask].min())!r}")
        alpha = self.config.alpha
        raw = alpha * pi.double() + (1.0 - alpha)
        if self.config.normalize:
            return Weights(mean_one(raw, mask, pi.dtype))
        return Weights((raw * mask).to(pi.dtype))
