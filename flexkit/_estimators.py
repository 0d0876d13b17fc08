"""The built-in group advantage estimators: the names a scorer with ``needs_groups`` accepts as ``[sample]
estimator`` without a plugin declaring more (``flexkit_group_estimators``;
:func:`flexkit.pipeline._pipeline.group_estimators`).
"""

from __future__ import annotations

__all__ = ["BUILTIN_GROUP_ESTIMATORS"]

#: Advantage estimators that sample a group of responses per prompt (``uid``), so group scorers make sense:
#: DataFlex-RL's list (grpo, grpo_passk, rloo, opo, gdpo) plus verl's other group baselines
#: (``reinforce_plus_plus_baseline``, ``gpg``) and Dr. GRPO (arXiv 2503.20783). Not group estimators: ``gae``,
#: ``reinforce_plus_plus``, ``remax``.
BUILTIN_GROUP_ESTIMATORS: frozenset[str] = frozenset({
    "grpo",
    "grpo_passk",
    "rloo",
    "opo",
    "gdpo",
    "reinforce_plus_plus_baseline",
    "gpg",
    "dr_grpo",
})
