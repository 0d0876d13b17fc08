"""Built-in actuators (one module each): select (threshold_band, topk_fraction, zero_variance_filter,
pass_rate_band, gfpo, max_variance), reweight (softmax, difficulty_band, advantage_reweight, per_advantage) and
mix (static, reward_gap, category_bandit, exp3, dump_ucb, tscl).

Importing this package loads none of them: the names below are re-exported on first use.
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit.plugins._builtin_table import ACTUATORS, lazy_table

_LAZY: dict[str, str] = {**lazy_table(ACTUATORS), "GroupKeep": "flexkit.sample.actuators.group_filter"}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
