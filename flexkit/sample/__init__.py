"""The sample-level stage (after DataFlex-RL's actuators): scorers, actuators and per-token loss weights.

After rewards, a **scorer** turns a :class:`RolloutBatch` into scores and an **actuator** turns the scores
into an action: :class:`Keep` (select), :class:`Weights` (reweight) or :class:`Mix` (taskset proportions).
Keep / weights become per-token loss weights (:mod:`flexkit.sample.weights`); mix proportions feed the scheduler.
:class:`SampleStage` wires one scorer and one actuator. The built-in components are registered here through
the same hooks third-party plugins implement. Importing this package does not import torch.
"""

from __future__ import annotations

from typing import Any

from flexkit.hookspecs import hookimpl
from flexkit.sample.actuator import ACTION_OF, Action, Actuator, Keep, Mix, Weights
from flexkit.sample.actuators import (
    DifficultyBandConfig,
    DifficultyBandReweighter,
    RewardGapConfig,
    RewardGapMixer,
    SoftmaxConfig,
    SoftmaxReweighter,
    StaticConfig,
    StaticMixer,
    ThresholdBandConfig,
    ThresholdBandSelector,
    TopkFractionConfig,
    TopkFractionSelector,
)
from flexkit.sample.actuators.category_bandit import CategoryBandit, CategoryBanditConfig
from flexkit.sample.actuators.exp3 import Exp3Config, Exp3Mixer
from flexkit.sample.actuators.group_filter import GroupKeep
from flexkit.sample.actuators.pass_rate_band import PassRateBand, PassRateBandConfig
from flexkit.sample.actuators.zero_variance_filter import ZeroVarianceFilter, ZeroVarianceFilterConfig
from flexkit.sample.batch import REWARD_FIELDS, TOKEN_FIELDS, RolloutBatch, SampleError
from flexkit.sample.scorer import (
    GRANULARITIES,
    GROUP_ESTIMATORS,
    MECHANISMS,
    TIMINGS,
    Scorer,
    check_compatible,
    register_group_estimator,
)
from flexkit.sample.scorers import (
    AdvantageMagnitudeConfig,
    AdvantageMagnitudeScorer,
    GroupRewardStdConfig,
    GroupRewardStdScorer,
    GroupSolveRateConfig,
    GroupSolveRateScorer,
    RewardConfig,
    RewardScorer,
    TokenProbConfig,
    TokenProbScorer,
)
from flexkit.sample.scorers.group_reward_range import GroupRewardRangeConfig, GroupRewardRangeScorer
from flexkit.sample.stage import SampleStage

__all__ = [
    "ACTION_OF",
    "GRANULARITIES",
    "GROUP_ESTIMATORS",
    "MECHANISMS",
    "REWARD_FIELDS",
    "TIMINGS",
    "TOKEN_FIELDS",
    "Action",
    "Actuator",
    "AdvantageMagnitudeConfig",
    "AdvantageMagnitudeScorer",
    "CategoryBandit",
    "CategoryBanditConfig",
    "DifficultyBandConfig",
    "DifficultyBandReweighter",
    "Exp3Config",
    "Exp3Mixer",
    "GroupKeep",
    "GroupRewardRangeConfig",
    "GroupRewardRangeScorer",
    "GroupRewardStdConfig",
    "GroupRewardStdScorer",
    "GroupSolveRateConfig",
    "GroupSolveRateScorer",
    "Keep",
    "Mix",
    "PassRateBand",
    "PassRateBandConfig",
    "RewardConfig",
    "RewardGapConfig",
    "RewardGapMixer",
    "RewardScorer",
    "RolloutBatch",
    "SampleError",
    "SampleStage",
    "Scorer",
    "SoftmaxConfig",
    "SoftmaxReweighter",
    "StaticConfig",
    "StaticMixer",
    "ThresholdBandConfig",
    "ThresholdBandSelector",
    "TokenProbConfig",
    "TokenProbScorer",
    "TopkFractionConfig",
    "TopkFractionSelector",
    "Weights",
    "ZeroVarianceFilter",
    "ZeroVarianceFilterConfig",
    "check_compatible",
    "flexkit_register_actuators",
    "flexkit_register_scorers",
    "register_group_estimator",
]


@hookimpl
def flexkit_register_scorers(register: Any) -> None:
    """Register the built-in scorers (each class is its own factory)."""
    register("group_solve_rate", GroupSolveRateScorer, GroupSolveRateConfig)
    register("reward", RewardScorer, RewardConfig)
    register("group_reward_std", GroupRewardStdScorer, GroupRewardStdConfig)
    register("advantage_magnitude", AdvantageMagnitudeScorer, AdvantageMagnitudeConfig)
    register("token_prob", TokenProbScorer, TokenProbConfig)
    register("group_reward_range", GroupRewardRangeScorer, GroupRewardRangeConfig,
             description="max - min reward within each group (0 exactly when all are equal; for DAPO filtering).")


@hookimpl
def flexkit_register_actuators(register: Any) -> None:
    """Register the built-in actuators (each class is its own factory)."""
    register("threshold_band", ThresholdBandSelector, ThresholdBandConfig)
    register("topk_fraction", TopkFractionSelector, TopkFractionConfig)
    register("softmax", SoftmaxReweighter, SoftmaxConfig)
    register("difficulty_band", DifficultyBandReweighter, DifficultyBandConfig)
    register("static", StaticMixer, StaticConfig)
    register("reward_gap", RewardGapMixer, RewardGapConfig)
    register("zero_variance_filter", ZeroVarianceFilter, ZeroVarianceFilterConfig,
             description="DAPO (2503.14476): drop groups with equal rewards; report the groups to refill.")
    register("pass_rate_band", PassRateBand, PassRateBandConfig,
             description="Online Difficulty Filtering (2504.03380): keep groups with a pass rate in a band.")
    register("category_bandit", CategoryBandit, CategoryBanditConfig,
             description="SEC (2505.14970): TD(0) on mean |advantage| per taskset, Boltzmann mix.")
    register("exp3", Exp3Mixer, Exp3Config,
             description="Online Data Mixing (2312.02406): EXP3 over tasksets with decaying exploration.")
