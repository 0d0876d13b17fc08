"""``per_advantage`` (reweight): prioritised-replay weights ``|A|^α``, scaled to mean 1.

After Prioritized Experience Replay (Schaul et al., arXiv 1511.05952), which replays a transition with
probability ``P(i) = p_i^α / Σ_k p_k^α`` for a priority ``p_i = |δ_i| + ε`` (its TD error). Here the priority
is the sample's advantage magnitude and the probability becomes a loss weight over the batch::

    w_i = (|s_i| + ε)^α / mean_j (|s_j| + ε)^α

``α = 0`` weights every sample equally; larger ``α`` concentrates the update on high-|advantage|
("surprising") samples. Pair it with the ``advantage_magnitude`` scorer (DataFlex-RL's ``per_advantage``
preset); the absolute value is taken here, so any signed score works. Token scores are weighted per token, mean
1 over the response tokens. The normalising sum is accumulated in float64. PER's importance-sampling correction
does not apply: nothing is resampled, every sample is in the batch once. O(B).
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample._actuator import Actuator, Weights
from flexkit.sample._batch import RolloutBatch, as_float
from flexkit.sample.actuators._mean_one import mean_one


@attrs.frozen(kw_only=True)
class PerAdvantageConfig:
    """Parameters of the ``per_advantage`` reweighter."""

    alpha: float = field(default=0.5, ge=0, doc="α: priority exponent (0: uniform weights).")
    epsilon: float = field(
        default=1e-8, ge=0, doc="ε added to |score| so that zero scores keep a small weight (PER's ε)."
    )


class PerAdvantageReweighter(Actuator):
    """Weights ``(|score| + ε)^α`` scaled to mean 1 (over samples, or response tokens for token scores)."""

    Config = PerAdvantageConfig
    mechanism = "reweight"
    accepts = ("prompt", "response", "token")

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Weights:
        """Mean-1 prioritised weights."""
        s = as_float(scores)
        raw = (s.double().abs() + self.config.epsilon) ** self.config.alpha
        mask = batch["response_mask"] if s.ndim == 2 else None
        return Weights(mean_one(raw, mask, s.dtype))
