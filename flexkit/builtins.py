"""flexkit's built-in components, all registered here (as llm registers its own in ``default_plugins``).

This module is the one entry of :data:`flexkit.plugins.BUILTIN_PLUGINS`, and
:meth:`flexkit.plugins.PluginHost.add` loads it exactly as it loads a third-party entry point: through the
registration hooks of :mod:`flexkit.hookspecs`. No other module registers anything.

Each stage has a table with one line per component: its ``type`` name, its factory as ``"module:attribute"``,
and optionally a description (default: the factory docstring's first line) and a config class (default: the
factory's ``Config``, see :mod:`flexkit.configurable`). A component module is imported only when the hooks run,
so importing this module, or the packages the components live in, loads none of them. A new component is one
module plus one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import attrs

from flexkit.estimators import BUILTIN_GROUP_ESTIMATORS
from flexkit.hookspecs import Register, hookimpl


@attrs.frozen
class Builtin:
    """One built-in component: ``name``, ``factory`` (``"module:attribute"``), description, config class."""

    name: str
    factory: str
    description: str | None = None
    #: ``"module:attribute"`` of the attrs config class; ``None``: the factory's ``Config``.
    config: str | None = None


SELECTORS: tuple[Builtin, ...] = (
    Builtin("sequential", "flexkit.selectors.sequential:SequentialSelector"),
    Builtin("shuffle", "flexkit.selectors.shuffle:ShuffleSelector"),
    Builtin("random", "flexkit.selectors.random:RandomSelector"),
    Builtin("offline_easy2hard", "flexkit.selectors.offline_easy2hard:OfflineEasy2HardSelector"),
    Builtin("difficulty_based", "flexkit.selectors.difficulty_based.model:DifficultyBasedSelector"),
    Builtin("learnability", "flexkit.selectors.learnability:LearnabilitySelector",
            "LILO (2502.12272): the most learnable p(1-p) of a candidate pool, shrunk estimates."),
    Builtin("frontier", "flexkit.selectors.frontier:FrontierSelector",
            "Discounted Thompson sampling over task groups for informative (mixed-reward) answer groups."),
    Builtin("thompson_target", "flexkit.selectors.thompson_target:ThompsonTargetSelector",
            "MoPPS (2507.04632): Beta-Bernoulli Thompson draws nearest a target success rate."),
    Builtin("zero_variance_skip", "flexkit.selectors.zero_variance_skip:ZeroVarianceSkipSelector",
            "GRESO (2506.02177): skip tasks with all-correct / all-wrong streaks, probabilistically."),
    Builtin("target_difficulty", "flexkit.selectors.target_difficulty:TargetDifficultySelector",
            "AdaRFT (2504.05520): tasks nearest a target difficulty that follows the mean reward."),
    Builtin("prioritized_replay", "flexkit.selectors.prioritized_replay:PrioritizedReplaySelector",
            "PLR (2010.03934): replay seen tasks by score rank and staleness, or draw unseen ones."),
)

SCORERS: tuple[Builtin, ...] = (
    Builtin("group_solve_rate", "flexkit.sample.scorers.group_solve_rate:GroupSolveRateScorer"),
    Builtin("reward", "flexkit.sample.scorers.reward:RewardScorer"),
    Builtin("group_reward_std", "flexkit.sample.scorers.group_reward_std:GroupRewardStdScorer"),
    Builtin("advantage_magnitude", "flexkit.sample.scorers.advantage_magnitude:AdvantageMagnitudeScorer"),
    Builtin("token_prob", "flexkit.sample.scorers.token_prob:TokenProbScorer"),
    Builtin("group_reward_range", "flexkit.sample.scorers.group_reward_range:GroupRewardRangeScorer",
            "max - min reward within each group (0 exactly when all are equal; for DAPO filtering)."),
)

ACTUATORS: tuple[Builtin, ...] = (
    Builtin("threshold_band", "flexkit.sample.actuators.threshold_band:ThresholdBandFilter"),
    Builtin("topk_fraction", "flexkit.sample.actuators.topk_fraction:TopkFractionFilter"),
    Builtin("softmax", "flexkit.sample.actuators.softmax:SoftmaxReweighter"),
    Builtin("difficulty_band", "flexkit.sample.actuators.difficulty_band:DifficultyBandReweighter"),
    Builtin("static", "flexkit.sample.actuators.static:StaticMixer"),
    Builtin("reward_gap", "flexkit.sample.actuators.reward_gap:RewardGapMixer"),
    Builtin("zero_variance_filter", "flexkit.sample.actuators.zero_variance_filter:ZeroVarianceFilter",
            "DAPO (2503.14476): drop groups with equal rewards; report the groups to refill."),
    Builtin("pass_rate_band", "flexkit.sample.actuators.pass_rate_band:PassRateBand",
            "Online Difficulty Filtering (2504.03380): keep groups with a pass rate in a band."),
    Builtin("category_bandit", "flexkit.sample.actuators.category_bandit:CategoryBandit",
            "SEC (2505.14970): TD(0) on mean |advantage| per taskset, Boltzmann mix."),
    Builtin("exp3", "flexkit.sample.actuators.exp3:Exp3Mixer",
            "Online Data Mixing (2312.02406): EXP3 over tasksets with decaying exploration."),
    Builtin("gfpo", "flexkit.sample.actuators.gfpo:GfpoFilter",
            "GFPO (2508.09726): per group keep the k shortest, or the k best reward per token."),
    Builtin("max_variance", "flexkit.sample.actuators.max_variance:MaxVarianceFilter",
            "PODS (2504.13818): per group keep the size-m subset of maximal reward variance."),
    Builtin("advantage_reweight", "flexkit.sample.actuators.advantage_reweight:AdvantageReweighter",
            "Advantage Reweighting (2505.12929): per-token weight α·π + (1 − α), mean 1."),
    Builtin("per_advantage", "flexkit.sample.actuators.per_advantage:PerAdvantageReweighter",
            "Prioritized replay (1511.05952) weights (|A| + ε)^α, normalised to mean 1."),
    Builtin("dump_ucb", "flexkit.sample.actuators.dump_ucb:DumpUcbMixer",
            "DUMP (2504.09710): UCB over tasksets' recent mean |advantage| and sample counts."),
    Builtin("tscl", "flexkit.sample.actuators.tscl:TsclMixer",
            "TSCL (1707.00183): softmax of |slope| of each taskset's recent reward curve."),
)

FEEDBACK: tuple[Builtin, ...] = (
    Builtin("pass_rate_calculator", "flexkit.feedback:PassRateCalculator"),
)

STORAGES: tuple[Builtin, ...] = (
    Builtin("file", "flexkit.tasksets.storage:open_file_taskset", config="flexkit.tasksets.storage:FileStorageConfig"),
    Builtin("simulated", "flexkit.simulator:make_simulated_taskset", config="flexkit.simulator:SimulatedTasksConfig"),
)

TRAINERS: tuple[Builtin, ...] = (
    Builtin("simulator", "flexkit.simulator:SimulatorTrainer"),
)


def resolve(target: str) -> Any:
    """The object a ``"module:attribute"`` string names (importing the module)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def register_all(register: Register, table: Sequence[Builtin]) -> None:
    """Register every component of ``table``, its config the named class or else the factory's ``Config``."""
    for entry in table:
        factory = resolve(entry.factory)
        config = resolve(entry.config) if entry.config is not None else factory.Config
        register(entry.name, factory, config, description=entry.description)


@hookimpl
def flexkit_register_selectors(register: Register) -> None:
    """Register the built-in selectors."""
    register_all(register, SELECTORS)


@hookimpl
def flexkit_register_scorers(register: Register) -> None:
    """Register the built-in scorers."""
    register_all(register, SCORERS)


@hookimpl
def flexkit_register_actuators(register: Register) -> None:
    """Register the built-in actuators."""
    register_all(register, ACTUATORS)


@hookimpl
def flexkit_register_feedback(register: Register) -> None:
    """Register the built-in feedback operator."""
    register_all(register, FEEDBACK)


@hookimpl
def flexkit_register_storages(register: Register) -> None:
    """Register the built-in taskset storages: ``file`` and the simulator's ``simulated``."""
    register_all(register, STORAGES)


@hookimpl
def flexkit_register_trainers(register: Register) -> None:
    """Register the built-in trainer: the simulator."""
    register_all(register, TRAINERS)


@hookimpl
def flexkit_group_estimators() -> list[str]:
    """GRPO's family of group advantage estimators (:data:`flexkit.estimators.BUILTIN_GROUP_ESTIMATORS`)."""
    return sorted(BUILTIN_GROUP_ESTIMATORS)
