"""Built-in selectors: what picks task indices inside one taskset.

Five selectors after Trinity-RFT's task selection module: ``sequential``,
``shuffle``, ``random``, ``offline_easy2hard`` and ``difficulty_based``; and five from the literature (see
docs/algorithms.md): ``learnability`` (LILO), ``thompson_target`` (MoPPS), ``zero_variance_skip`` (GRESO),
``target_difficulty`` (AdaRFT) and ``prioritized_replay`` (PLR); and ``frontier``, discounted Thompson sampling over
groups of tasks for informative answer groups. One module each; :mod:`flexkit.plugins.builtins`
registers them, through the hook third-party plugins implement.

Importing this package is cheap: it loads :mod:`~flexkit.selectors._base` only, and a selector's module when one
of its names is first read from here (``from flexkit.selectors import DifficultyBasedSelector``).
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit.plugins._builtin_table import SELECTORS, lazy_table
from flexkit.selectors._base import FEATURE_KEYS, Selector, feature_keys_of, read_feature_columns, validate_feedback

#: The module of each name this package re-exports lazily.
_LAZY: dict[str, str] = lazy_table(SELECTORS)

__all__ = [
    "FEATURE_KEYS",
    "Selector",
    "feature_keys_of",
    "read_feature_columns",
    "validate_feedback",
    *sorted(_LAZY),
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
