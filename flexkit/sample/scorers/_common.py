"""Shared pieces of the built-in scorers: the reward-field option and vectorised per-group statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flexkit.config import field
from flexkit.sample.batch import REWARD_REQUIREMENT, RolloutBatch

if TYPE_CHECKING:
    import torch

REWARD_KEY_DOC = (
    "Batch field holding the rewards, (B, T) token-level or (B,) per sequence; unset: token_level_scores, "
    "else rm_scores."
)


def reward_key_field() -> Any:
    """The ``reward_key`` config field shared by reward-based scorers."""
    return field(default=None, doc=REWARD_KEY_DOC)


def reward_requires(reward_key: str | None) -> tuple[str, ...]:
    """``requires`` of a reward-based scorer for a configured ``reward_key``. ``response_mask`` is needed only
    for (B, T) rewards; :meth:`RolloutBatch.sequence_rewards` then names it when it is missing."""
    return (reward_key or REWARD_REQUIREMENT,)


def group_ids(batch: RolloutBatch, device: torch.device) -> tuple[torch.Tensor, int]:
    """The batch's dense group ids as an int64 tensor on ``device``, and the number of groups."""
    import torch

    gid, num_groups = batch.group_index()
    return torch.from_numpy(gid).to(device), num_groups


def group_mean(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """(G,) mean of ``values`` (B,) within each group: one ``index_add_`` for sums, one ``bincount`` for counts
    (no Python loop over groups)."""
    import torch

    sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, gid, values)
    counts = torch.bincount(gid, minlength=num_groups).to(values.dtype)
    return sums / counts.clamp(min=1)
