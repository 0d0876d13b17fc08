"""Built-in actuators (one module each): select (threshold_band, topk_fraction), reweight (softmax,
difficulty_band) and mix (static, reward_gap)."""

from __future__ import annotations

from flexkit.sample.actuators.difficulty_band import DifficultyBandConfig, DifficultyBandReweighter
from flexkit.sample.actuators.reward_gap import RewardGapConfig, RewardGapMixer
from flexkit.sample.actuators.softmax import SoftmaxConfig, SoftmaxReweighter
from flexkit.sample.actuators.static import StaticConfig, StaticMixer
from flexkit.sample.actuators.threshold_band import ThresholdBandConfig, ThresholdBandSelector
from flexkit.sample.actuators.topk_fraction import TopkFractionConfig, TopkFractionSelector

__all__ = [
    "DifficultyBandConfig",
    "DifficultyBandReweighter",
    "RewardGapConfig",
    "RewardGapMixer",
    "SoftmaxConfig",
    "SoftmaxReweighter",
    "StaticConfig",
    "StaticMixer",
    "ThresholdBandConfig",
    "ThresholdBandSelector",
    "TopkFractionConfig",
    "TopkFractionSelector",
]
