"""Built-in selectors: what picks task indices inside one taskset.

Five selectors after Trinity-RFT's task selection module: ``sequential``,
``shuffle``, ``random``, ``offline_easy2hard`` and ``difficulty_based``; and five from the literature (see
docs/algorithms.md): ``learnability`` (LILO), ``thompson_target`` (MoPPS), ``zero_variance_skip`` (GRESO),
``target_difficulty`` (AdaRFT) and ``prioritized_replay`` (PLR); and ``frontier``, discounted Thompson sampling over
groups of tasks for informative answer groups. One module each; :mod:`flexkit.builtins`
registers them, through the hook third-party plugins implement.

Importing this package is cheap: it loads :mod:`~flexkit.selectors.base` only, and a selector's module when one
of its names is first read from here (``from flexkit.selectors import DifficultyBasedSelector``).
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit.selectors.base import FEATURE_KEYS, Selector, feature_keys_of, read_feature_columns, validate_feedback

#: The module of each name this package re-exports lazily.
_LAZY: dict[str, str] = {
    "DifficultyBasedConfig": "flexkit.selectors.difficulty_based",
    "DifficultyBasedSelector": "flexkit.selectors.difficulty_based",
    "FrontierConfig": "flexkit.selectors.frontier",
    "FrontierSelector": "flexkit.selectors.frontier",
    "LearnabilityConfig": "flexkit.selectors.learnability",
    "LearnabilitySelector": "flexkit.selectors.learnability",
    "OfflineEasy2HardConfig": "flexkit.selectors.offline_easy2hard",
    "OfflineEasy2HardSelector": "flexkit.selectors.offline_easy2hard",
    "PrioritizedReplayConfig": "flexkit.selectors.prioritized_replay",
    "PrioritizedReplaySelector": "flexkit.selectors.prioritized_replay",
    "RandomConfig": "flexkit.selectors.random",
    "RandomSelector": "flexkit.selectors.random",
    "SequentialConfig": "flexkit.selectors.sequential",
    "SequentialSelector": "flexkit.selectors.sequential",
    "ShuffleConfig": "flexkit.selectors.shuffle",
    "ShuffleSelector": "flexkit.selectors.shuffle",
    "TargetDifficultyConfig": "flexkit.selectors.target_difficulty",
    "TargetDifficultySelector": "flexkit.selectors.target_difficulty",
    "ThompsonTargetConfig": "flexkit.selectors.thompson_target",
    "ThompsonTargetSelector": "flexkit.selectors.thompson_target",
    "ZeroVarianceSkipConfig": "flexkit.selectors.zero_variance_skip",
    "ZeroVarianceSkipSelector": "flexkit.selectors.zero_variance_skip",
}

__all__ = [
    "FEATURE_KEYS",
    "Selector",
    "feature_keys_of",
    "read_feature_columns",
    "validate_feedback",
    *sorted(_LAZY),
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
