"""Built-in scorers (one module each): group_solve_rate, reward, group_reward_std, advantage_magnitude,
token_prob."""

from __future__ import annotations

from flexkit.sample.scorers.advantage_magnitude import AdvantageMagnitudeConfig, AdvantageMagnitudeScorer
from flexkit.sample.scorers.group_reward_std import GroupRewardStdConfig, GroupRewardStdScorer
from flexkit.sample.scorers.group_solve_rate import GroupSolveRateConfig, GroupSolveRateScorer
from flexkit.sample.scorers.reward import RewardConfig, RewardScorer
from flexkit.sample.scorers.token_prob import TokenProbConfig, TokenProbScorer

__all__ = [
    "AdvantageMagnitudeConfig",
    "AdvantageMagnitudeScorer",
    "GroupRewardStdConfig",
    "GroupRewardStdScorer",
    "GroupSolveRateConfig",
    "GroupSolveRateScorer",
    "RewardConfig",
    "RewardScorer",
    "TokenProbConfig",
    "TokenProbScorer",
]
