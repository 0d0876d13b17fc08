"""Where every built-in component lives, written once: its registered name, its factory as ``"module:attribute"``,
an optional description and config class, and the other names its package re-exports.

:mod:`flexkit.plugins.builtins` registers the components from these tables (through the hooks third-party plugins
implement), and the packages :mod:`flexkit.selectors`, :mod:`flexkit.sample.scorers` and
:mod:`flexkit.sample.actuators` build their lazy re-exports from them (:func:`lazy_table`). Importing this module
imports no component. A new built-in component is one module plus one line here.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["ACTUATORS", "FEEDBACK", "SCORERS", "SELECTORS", "STORAGES", "TRAINERS", "Builtin", "lazy_table"]


@attrs.frozen
class Builtin:
    """One built-in component: ``name``, ``factory`` (``"module:attribute"``), description, config class, and
    the other names its package re-exports from the factory's module."""

    name: str
    factory: str
    description: str | None = None
    #: ``"module:attribute"`` of the attrs config class; ``None``: the factory's ``Config``.
    config: str | None = None
    #: Other names of the factory's module that its package re-exports (its config class, helpers).
    exports: tuple[str, ...] = ()


SELECTORS: tuple[Builtin, ...] = (
    Builtin("sequential", "flexkit.selectors.sequential:SequentialSelector", exports=("SequentialConfig",)),
    Builtin("shuffle", "flexkit.selectors.shuffle:ShuffleSelector", exports=("ShuffleConfig",)),
    Builtin("random", "flexkit.selectors.random:RandomSelector", exports=("RandomConfig",)),
    Builtin(
        "offline_easy2hard",
        "flexkit.selectors.offline_easy2hard:OfflineEasy2HardSelector",
        exports=("OfflineEasy2HardConfig",),
    ),
    Builtin(
        "difficulty_based",
        "flexkit.selectors.difficulty_based.model:DifficultyBasedSelector",
        exports=("DifficultyBasedConfig",),
    ),
    Builtin(
        "learnability",
        "flexkit.selectors.learnability:LearnabilitySelector",
        "LILO (2502.12272): the most learnable p(1-p) of a candidate pool, shrunk estimates.",
        exports=("LearnabilityConfig",),
    ),
    Builtin(
        "frontier",
        "flexkit.selectors.frontier:FrontierSelector",
        "Discounted Thompson sampling over task groups for informative (mixed-reward) answer groups.",
        exports=("FrontierConfig",),
    ),
    Builtin(
        "thompson_target",
        "flexkit.selectors.thompson_target:ThompsonTargetSelector",
        "MoPPS (2507.04632): Beta-Bernoulli Thompson draws nearest a target success rate.",
        exports=("ThompsonTargetConfig",),
    ),
    Builtin(
        "zero_variance_skip",
        "flexkit.selectors.zero_variance_skip:ZeroVarianceSkipSelector",
        "GRESO (2506.02177): skip tasks with all-correct / all-wrong streaks, probabilistically.",
        exports=("ZeroVarianceSkipConfig",),
    ),
    Builtin(
        "target_difficulty",
        "flexkit.selectors.target_difficulty:TargetDifficultySelector",
        "AdaRFT (2504.05520): tasks nearest a target difficulty that follows the mean reward.",
        exports=("TargetDifficultyConfig",),
    ),
    Builtin(
        "prioritized_replay",
        "flexkit.selectors.prioritized_replay:PrioritizedReplaySelector",
        "PLR (2010.03934): replay seen tasks by score rank and staleness, or draw unseen ones.",
        exports=("PrioritizedReplayConfig",),
    ),
)

SCORERS: tuple[Builtin, ...] = (
    Builtin(
        "group_solve_rate",
        "flexkit.sample.scorers.group_solve_rate:GroupSolveRateScorer",
        exports=("GroupSolveRateConfig",),
    ),
    Builtin("reward", "flexkit.sample.scorers.reward:RewardScorer", exports=("RewardConfig",)),
    Builtin(
        "group_reward_std",
        "flexkit.sample.scorers.group_reward_std:GroupRewardStdScorer",
        exports=("GroupRewardStdConfig",),
    ),
    Builtin(
        "advantage_magnitude",
        "flexkit.sample.scorers.advantage_magnitude:AdvantageMagnitudeScorer",
        exports=("AdvantageMagnitudeConfig",),
    ),
    Builtin("token_prob", "flexkit.sample.scorers.token_prob:TokenProbScorer", exports=("TokenProbConfig",)),
    Builtin(
        "group_reward_range",
        "flexkit.sample.scorers.group_reward_range:GroupRewardRangeScorer",
        "max - min reward within each group (0 exactly when all are equal; for DAPO filtering).",
        exports=("GroupRewardRangeConfig",),
    ),
)

ACTUATORS: tuple[Builtin, ...] = (
    Builtin(
        "threshold_band",
        "flexkit.sample.actuators.threshold_band:ThresholdBandFilter",
        exports=("ThresholdBandConfig",),
    ),
    Builtin(
        "topk_fraction", "flexkit.sample.actuators.topk_fraction:TopkFractionFilter", exports=("TopkFractionConfig",)
    ),
    Builtin("softmax", "flexkit.sample.actuators.softmax:SoftmaxReweighter", exports=("SoftmaxConfig",)),
    Builtin(
        "difficulty_band",
        "flexkit.sample.actuators.difficulty_band:DifficultyBandReweighter",
        exports=("DifficultyBandConfig",),
    ),
    Builtin("static", "flexkit.sample.actuators.static:StaticMixer", exports=("StaticConfig",)),
    Builtin("reward_gap", "flexkit.sample.actuators.reward_gap:RewardGapMixer", exports=("RewardGapConfig",)),
    Builtin(
        "zero_variance_filter",
        "flexkit.sample.actuators.zero_variance_filter:ZeroVarianceFilter",
        "DAPO (2503.14476): drop groups with equal rewards; report the groups to refill.",
        exports=("ZeroVarianceFilterConfig",),
    ),
    Builtin(
        "pass_rate_band",
        "flexkit.sample.actuators.pass_rate_band:PassRateBand",
        "Online Difficulty Filtering (2504.03380): keep groups with a pass rate in a band.",
        exports=("PassRateBandConfig",),
    ),
    Builtin(
        "category_bandit",
        "flexkit.sample.actuators.category_bandit:CategoryBandit",
        "SEC (2505.14970): TD(0) on mean |advantage| per taskset, Boltzmann mix.",
        exports=("CategoryBanditConfig",),
    ),
    Builtin(
        "exp3",
        "flexkit.sample.actuators.exp3:Exp3Mixer",
        "Online Data Mixing (2312.02406): EXP3 over tasksets with decaying exploration.",
        exports=("Exp3Config",),
    ),
    Builtin(
        "gfpo",
        "flexkit.sample.actuators.gfpo:GfpoFilter",
        "GFPO (2508.09726): per group keep the k shortest, or the k best reward per token.",
        exports=("GfpoConfig",),
    ),
    Builtin(
        "max_variance",
        "flexkit.sample.actuators.max_variance:MaxVarianceFilter",
        "PODS (2504.13818): per group keep the size-m subset of maximal reward variance.",
        exports=("MaxVarianceConfig",),
    ),
    Builtin(
        "advantage_reweight",
        "flexkit.sample.actuators.advantage_reweight:AdvantageReweighter",
        "Advantage Reweighting (2505.12929): per-token weight α·π + (1 − α), mean 1.",
        exports=("AdvantageReweightConfig",),
    ),
    Builtin(
        "per_advantage",
        "flexkit.sample.actuators.per_advantage:PerAdvantageReweighter",
        "Prioritized replay (1511.05952) weights (|A| + ε)^α, normalised to mean 1.",
        exports=("PerAdvantageConfig",),
    ),
    Builtin(
        "dump_ucb",
        "flexkit.sample.actuators.dump_ucb:DumpUcbMixer",
        "DUMP (2504.09710): UCB over tasksets' recent mean |advantage| and sample counts.",
        exports=("DumpUcbConfig",),
    ),
    Builtin(
        "tscl",
        "flexkit.sample.actuators.tscl:TsclMixer",
        "TSCL (1707.00183): softmax of |slope| of each taskset's recent reward curve.",
        exports=("TsclConfig",),
    ),
)

FEEDBACK: tuple[Builtin, ...] = (Builtin("pass_rate_calculator", "flexkit.scheduler.feedback:PassRateCalculator"),)

STORAGES: tuple[Builtin, ...] = (
    Builtin("file", "flexkit.tasksets.storage:open_file_taskset", config="flexkit.tasksets.storage:FileStorageConfig"),
    Builtin("simulated", "flexkit.run.simulator:make_simulated_taskset",
            config="flexkit.run.simulator:SimulatedTasksConfig"),
)

TRAINERS: tuple[Builtin, ...] = (Builtin("simulator", "flexkit.run.simulator:SimulatorTrainer"),)


def lazy_table(table: Sequence[Builtin]) -> dict[str, str]:
    """The module of each name a package re-exports lazily for ``table``: each factory's attribute, its config
    class when one is named, and its ``exports``."""
    out: dict[str, str] = {}
    for entry in table:
        module, _, attribute = entry.factory.partition(":")
        out[attribute] = module
        out.update(dict.fromkeys(entry.exports, module))
        if entry.config is not None:
            config_module, _, config_attribute = entry.config.partition(":")
            out[config_attribute] = config_module
    return out
