"""Shared pieces of the built-in scorers: the reward-field option, with :class:`RewardFieldScorer` (the base of the
scorers that read it) and :class:`GroupRewardScorer` (of those that score a statistic of each group), and
vectorised per-group statistics."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from flexkit.config import field
from flexkit.sample._batch import REWARD_REQUIREMENT, RolloutBatch
from flexkit.sample._scorer import Scorer

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


class RewardFieldScorer(Scorer):
    """Base of the scorers of the rewards: their config has a ``reward_key`` (:func:`reward_key_field`), and
    each instance requires the field it names (plus ``uid`` when the scorer :attr:`~Scorer.needs_groups`)."""

    requires = reward_requires(None)

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        requires = reward_requires(self.config.reward_key)
        self.requires = (*requires, "uid") if self.needs_groups else requires


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


class GroupRewardScorer(RewardFieldScorer):
    """Base of the scorers of a statistic of the rewards within each group (``uid``): every response scores its
    group's value, (B,). Subclasses implement :meth:`per_group`."""

    timing = "post_reward"
    granularity = "prompt"
    needs_groups = True

    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
        """Each response's group statistic, (B,)."""
        rewards = batch.sequence_rewards(self.config.reward_key)
        gid, num_groups = group_ids(batch, rewards.device)
        return self.per_group(rewards, gid, num_groups)[gid]

    @abc.abstractmethod
    def per_group(self, rewards: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
        """The (G,) statistic of the summed ``rewards`` (B,) per group; ``gid`` (B,) is each response's group."""
