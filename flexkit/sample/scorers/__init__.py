"""Built-in scorers (one module each): group_solve_rate, reward, group_reward_std, group_reward_range,
advantage_magnitude, token_prob.

Importing this package loads none of them: the names below are re-exported on first use.
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "AdvantageMagnitudeConfig": "flexkit.sample.scorers.advantage_magnitude",
    "AdvantageMagnitudeScorer": "flexkit.sample.scorers.advantage_magnitude",
    "GroupRewardRangeConfig": "flexkit.sample.scorers.group_reward_range",
    "GroupRewardRangeScorer": "flexkit.sample.scorers.group_reward_range",
    "GroupRewardStdConfig": "flexkit.sample.scorers.group_reward_std",
    "GroupRewardStdScorer": "flexkit.sample.scorers.group_reward_std",
    "GroupSolveRateConfig": "flexkit.sample.scorers.group_solve_rate",
    "GroupSolveRateScorer": "flexkit.sample.scorers.group_solve_rate",
    "RewardConfig": "flexkit.sample.scorers.reward",
    "RewardScorer": "flexkit.sample.scorers.reward",
    "TokenProbConfig": "flexkit.sample.scorers.token_prob",
    "TokenProbScorer": "flexkit.sample.scorers.token_prob",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
