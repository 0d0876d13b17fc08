"""Built-in selectors: what picks task indices inside one taskset.

Five selectors after Trinity-RFT's task selection module (see REFERENCE.md, seed 000): ``sequential``,
``shuffle``, ``random``, ``offline_easy2hard`` and ``difficulty_based``. They are registered as flexkit's
built-in plugin through :func:`flexkit_register_selectors`, the same hook third-party plugins implement.
"""

from __future__ import annotations

from typing import Any

from flexkit.hookspecs import hookimpl
from flexkit.selectors.base import Selector, read_feature_columns, validate_feedback
from flexkit.selectors.difficulty_based import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.offline_easy2hard import OfflineEasy2HardConfig, OfflineEasy2HardSelector
from flexkit.selectors.random import RandomConfig, RandomSelector
from flexkit.selectors.sequential import SequentialConfig, SequentialSelector
from flexkit.selectors.shuffle import ShuffleConfig, ShuffleSelector

__all__ = [
    "DifficultyBasedConfig",
    "DifficultyBasedSelector",
    "OfflineEasy2HardConfig",
    "OfflineEasy2HardSelector",
    "RandomConfig",
    "RandomSelector",
    "Selector",
    "SequentialConfig",
    "SequentialSelector",
    "ShuffleConfig",
    "ShuffleSelector",
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
