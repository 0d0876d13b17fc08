"""``token_prob``: the behaviour policy's probability of each generated token, ``exp(old_log_probs)``.

Source: DataFlex-RL's per-token probability scorer, which feeds the
``α·π + (1−α)`` token reweighter. Low-probability tokens are the "forking" tokens of high-entropy-minority
work (2506.01939).

Timing: ``post_advantage``. ``old_log_probs`` are computed by the trainer after rewards and before advantages
(verl's order), so they are guaranteed to exist at ``post_advantage``, and the weights derived from them stay
fixed across PPO epochs and micro-batches. ``in_loss`` would use the current policy's log-probs inside each
micro-batch, making the weights move during the update (and need per-micro-batch calls); a plugin can
subclass this scorer with ``timing = "in_loss"`` if it wants that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from flexkit.sample._batch import RolloutBatch, as_float
from flexkit.sample._scorer import Scorer

if TYPE_CHECKING:
    import torch


@attrs.frozen(kw_only=True)
class TokenProbConfig:
    """The ``token_prob`` scorer takes no parameters."""


class TokenProbScorer(Scorer):
    """``exp(old_log_probs)`` per token, (B, T) (positions outside ``response_mask`` are left as computed)."""

    Config = TokenProbConfig
    requires = ("old_log_probs", "response_mask")
    timing = "post_advantage"
    granularity = "token"
    needs_groups = False

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Token probabilities under the behaviour policy, (B, T)."""
        return as_float(batch["old_log_probs"]).exp()
