"""The sample-level stage (after DataFlex-RL's actuators): scorers, actuators and per-token loss weights.

After rewards, a **scorer** turns a :class:`RolloutBatch` into scores and an **actuator** turns the scores
into an action: :class:`Keep` (select), :class:`Weights` (reweight) or :class:`Mix` (taskset proportions).
Keep / weights become per-token loss weights (:mod:`flexkit.sample._weights`); mix proportions feed the scheduler.
:class:`SampleStage` wires one scorer and one actuator. The built-in scorers and actuators (one module each,
under :mod:`~flexkit.sample.scorers` and :mod:`~flexkit.sample.actuators`) are registered by
:mod:`flexkit.plugins.builtins` through the hooks third-party plugins implement; this package re-exports them lazily,
so importing it loads none of them (nor torch).
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit.sample import actuators as _actuators  # the subpackages load no component module
from flexkit.sample import scorers as _scorers
from flexkit.sample._actuator import ACTION_OF, Action, Actuator, Keep, Mix, Weights
from flexkit.sample._batch import REWARD_FIELDS, TOKEN_FIELDS, RolloutBatch
from flexkit.sample._scorer import (
    GRANULARITIES,
    GROUP_ESTIMATORS,
    MECHANISMS,
    TIMINGS,
    Scorer,
    check_compatible,
    register_group_estimator,
)
from flexkit.sample._stage import SampleStage

#: Each built-in component name this package re-exports lazily, and the subpackage that (lazily) holds it.
_LAZY: dict[str, str] = {name: pkg.__name__ for pkg in (_scorers, _actuators) for name in pkg.__all__}

__all__ = [
    "ACTION_OF",
    "Action",
    "Actuator",
    "GRANULARITIES",
    "GROUP_ESTIMATORS",
    "Keep",
    "MECHANISMS",
    "Mix",
    "REWARD_FIELDS",
    "RolloutBatch",
    "SampleStage",
    "Scorer",
    "TIMINGS",
    "TOKEN_FIELDS",
    "Weights",
    "check_compatible",
    "register_group_estimator",
    *sorted(_LAZY),
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
