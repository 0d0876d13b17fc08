"""Built-in scorers (one module each): group_solve_rate, reward, group_reward_std, group_reward_range,
advantage_magnitude, token_prob.

Importing this package loads none of them: the names below are re-exported on first use.
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit.plugins._builtin_table import SCORERS, lazy_table

_LAZY: dict[str, str] = lazy_table(SCORERS)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
