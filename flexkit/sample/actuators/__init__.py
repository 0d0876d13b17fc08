"""Built-in actuators (one module each): select (threshold_band, topk_fraction, zero_variance_filter,
pass_rate_band, gfpo, max_variance), reweight (softmax, difficulty_band, advantage_reweight, per_advantage) and
mix (static, reward_gap, category_bandit, exp3, dump_ucb, tscl).

Importing this package loads none of them: the names below are re-exported on first use.
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "AdvantageReweightConfig": "flexkit.sample.actuators.advantage_reweight",
    "AdvantageReweighter": "flexkit.sample.actuators.advantage_reweight",
    "CategoryBandit": "flexkit.sample.actuators.category_bandit",
    "CategoryBanditConfig": "flexkit.sample.actuators.category_bandit",
    "DifficultyBandConfig": "flexkit.sample.actuators.difficulty_band",
    "DifficultyBandReweighter": "flexkit.sample.actuators.difficulty_band",
    "DumpUcbConfig": "flexkit.sample.actuators.dump_ucb",
    "DumpUcbMixer": "flexkit.sample.actuators.dump_ucb",
    "Exp3Config": "flexkit.sample.actuators.exp3",
    "Exp3Mixer": "flexkit.sample.actuators.exp3",
    "GfpoConfig": "flexkit.sample.actuators.gfpo",
    "GfpoFilter": "flexkit.sample.actuators.gfpo",
    "GroupKeep": "flexkit.sample.actuators.group_filter",
    "MaxVarianceConfig": "flexkit.sample.actuators.max_variance",
    "MaxVarianceFilter": "flexkit.sample.actuators.max_variance",
    "PassRateBand": "flexkit.sample.actuators.pass_rate_band",
    "PassRateBandConfig": "flexkit.sample.actuators.pass_rate_band",
    "PerAdvantageConfig": "flexkit.sample.actuators.per_advantage",
    "PerAdvantageReweighter": "flexkit.sample.actuators.per_advantage",
    "RewardGapConfig": "flexkit.sample.actuators.reward_gap",
    "RewardGapMixer": "flexkit.sample.actuators.reward_gap",
    "SoftmaxConfig": "flexkit.sample.actuators.softmax",
    "SoftmaxReweighter": "flexkit.sample.actuators.softmax",
    "StaticConfig": "flexkit.sample.actuators.static",
    "StaticMixer": "flexkit.sample.actuators.static",
    "ThresholdBandConfig": "flexkit.sample.actuators.threshold_band",
    "ThresholdBandFilter": "flexkit.sample.actuators.threshold_band",
    "TopkFractionConfig": "flexkit.sample.actuators.topk_fraction",
    "TopkFractionFilter": "flexkit.sample.actuators.topk_fraction",
    "TsclConfig": "flexkit.sample.actuators.tscl",
    "TsclMixer": "flexkit.sample.actuators.tscl",
    "ZeroVarianceFilter": "flexkit.sample.actuators.zero_variance_filter",
    "ZeroVarianceFilterConfig": "flexkit.sample.actuators.zero_variance_filter",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
