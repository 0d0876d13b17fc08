"""Built-in selectors: what picks task indices inside one taskset.

Five selectors after Trinity-RFT's task selection module: ``sequential``,
``shuffle``, ``random``, ``offline_easy2hard`` and ``difficulty_based``; and five from the literature (see
docs/algorithms.md): ``learnability`` (LILO), ``thompson_target`` (MoPPS), ``zero_variance_skip`` (GRESO),
``target_difficulty`` (AdaRFT) and ``prioritized_replay`` (PLR). They are registered as flexkit's
built-in plugin through :func:`flexkit_register_selectors`, the same hook third-party plugins implement.
"""

from __future__ import annotations

from typing import Any

from flexkit.hookspecs import hookimpl
from flexkit.selectors.base import Selector, read_feature_columns, validate_feedback
from flexkit.selectors.difficulty_based import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.learnability import LearnabilityConfig, LearnabilitySelector
from flexkit.selectors.offline_easy2hard import OfflineEasy2HardConfig, OfflineEasy2HardSelector
from flexkit.selectors.prioritized_replay import PrioritizedReplayConfig, PrioritizedReplaySelector
from flexkit.selectors.random import RandomConfig, RandomSelector
from flexkit.selectors.sequential import SequentialConfig, SequentialSelector
from flexkit.selectors.shuffle import ShuffleConfig, ShuffleSelector
from flexkit.selectors.target_difficulty import TargetDifficultyConfig, TargetDifficultySelector
from flexkit.selectors.thompson_target import ThompsonTargetConfig, ThompsonTargetSelector
from flexkit.selectors.zero_variance_skip import ZeroVarianceSkipConfig, ZeroVarianceSkipSelector

__all__ = [
    "DifficultyBasedConfig",
    "DifficultyBasedSelector",
    "LearnabilityConfig",
    "LearnabilitySelector",
    "OfflineEasy2HardConfig",
    "OfflineEasy2HardSelector",
    "PrioritizedReplayConfig",
    "PrioritizedReplaySelector",
    "RandomConfig",
    "RandomSelector",
    "Selector",
    "SequentialConfig",
    "SequentialSelector",
    "ShuffleConfig",
    "ShuffleSelector",
    "TargetDifficultyConfig",
    "TargetDifficultySelector",
    "ThompsonTargetConfig",
    "ThompsonTargetSelector",
    "ZeroVarianceSkipConfig",
    "ZeroVarianceSkipSelector",
    "flexkit_register_selectors",
    "read_feature_columns",
    "validate_feedback",
]


@hookimpl
def flexkit_register_selectors(register: Any) -> None:
    """Register the built-in selectors (each class is its own factory)."""
    register("sequential", SequentialSelector, SequentialConfig)
    register("shuffle", ShuffleSelector, ShuffleConfig)
    register("random", RandomSelector, RandomConfig)
    register("offline_easy2hard", OfflineEasy2HardSelector, OfflineEasy2HardConfig)
    register("difficulty_based", DifficultyBasedSelector, DifficultyBasedConfig)
    register("learnability", LearnabilitySelector, LearnabilityConfig,
             description="LILO (2502.12272): the most learnable p(1-p) of a candidate pool, shrunk estimates.")
    register("thompson_target", ThompsonTargetSelector, ThompsonTargetConfig,
             description="MoPPS (2507.04632): Beta-Bernoulli Thompson draws nearest a target success rate.")
    register("zero_variance_skip", ZeroVarianceSkipSelector, ZeroVarianceSkipConfig,
             description="GRESO (2506.02177): skip tasks with all-correct / all-wrong streaks, probabilistically.")
    register("target_difficulty", TargetDifficultySelector, TargetDifficultyConfig,
             description="AdaRFT (2504.05520): tasks nearest a target difficulty that follows the mean reward.")
    register("prioritized_replay", PrioritizedReplaySelector, PrioritizedReplayConfig,
             description="PLR (2010.03934): replay seen tasks by score rank and staleness, or draw unseen ones.")
