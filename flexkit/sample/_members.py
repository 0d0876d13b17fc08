"""The optional members of scorers and actuators, read in one place: declared on
:class:`~flexkit.sample.Scorer` and :class:`~flexkit.sample.Actuator` (each a documented no-op default there), so
the stage calls them on those without asking whether they exist. A plugin scorer or actuator that does not derive
from its base (a duck-typed object with the members of :data:`flexkit.plugins._contract.REQUIRED`) is asked here,
and only here, which of them it has (:func:`~flexkit.plugins._contract.optional_member`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flexkit.plugins._contract import optional_member
from flexkit.sample._actuator import Actuator
from flexkit.sample._scorer import Scorer

__all__ = ["actuator_metrics", "bind"]


def bind(part: Any, taskset_names: Sequence[str]) -> None:
    """Tell a scorer or actuator the pipeline's taskset names (a foreign one without ``bind`` does not take them)."""
    if isinstance(part, (Scorer, Actuator)):
        part.bind(taskset_names)
        return
    found = optional_member(part, "bind")
    if callable(found):
        found(taskset_names)


def actuator_metrics(actuator: Any) -> Mapping[str, Any]:
    """The actuator's own scalars for logging (empty when it gives none)."""
    if isinstance(actuator, Actuator):
        return actuator.metrics()
    found = optional_member(actuator, "metrics")
    return found() if callable(found) else {}
