"""``topk_fraction`` (select): keep the top ``fraction`` of the batch by score.

Source: DataFlex-RL's top-fraction selector. ``k = ceil(fraction · B)``,
at least 1; ties are broken deterministically by sample index (the earlier sample wins). With
``largest = false`` the lowest scores are kept instead.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample._actuator import Actuator, Keep
from flexkit.sample._batch import RolloutBatch


@attrs.frozen(kw_only=True)
class TopkFractionConfig:
    """Parameters of the ``topk_fraction`` selector."""

    fraction: float = field(default=0.5, gt=0, le=1, doc="Share of the batch to keep (at least one sample).")
    largest: bool = field(default=True, doc="Keep the highest scores (true) or the lowest (false).")


def keep_count(fraction: float, batch_size: int) -> int:
    """``ceil(fraction · batch_size)`` (robust to float round-off), clipped to ``1 .. batch_size``."""
    k = math.ceil(fraction * batch_size - 1e-9)
    return max(1, min(batch_size, k)) if batch_size else 0


class TopkFractionFilter(Actuator):
    """Keep the ``ceil(fraction·B)`` best-scoring samples; equal scores are taken in index order."""

    Config = TopkFractionConfig
    mechanism = "select"
    accepts = ("prompt", "response")

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Keep:
        """The indices of the top ``k`` scores (a stable sort, so ties go to the lower index)."""
        import torch

        s = scores.detach().cpu()
        k = keep_count(self.config.fraction, s.shape[0])
        order = torch.sort(s, descending=self.config.largest, stable=True).indices
        return Keep(order[:k].numpy())
