"""flexkit's built-in components, all registered here (as llm registers its own in ``default_plugins``).

This module is the one entry of :data:`flexkit.plugins._manager.BUILTIN_PLUGINS`, and
:meth:`flexkit.PluginHost.add` loads it exactly as it loads a third-party entry point: through the
registration hooks of :mod:`flexkit.plugins._hookspecs`. No other module registers anything.

The tables of :mod:`flexkit.plugins._builtin_table` give each component's ``type`` name, its factory as
``"module:attribute"``, and optionally a description (default: the factory docstring's first line) and a config
class (default: the factory's ``Config``, see :mod:`flexkit.plugins._contract`). A component module is imported only
when the hooks run, so importing this module, or the packages the components live in, loads none of them. A new
component is one module plus one line in that table.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from flexkit._estimators import BUILTIN_GROUP_ESTIMATORS
from flexkit.plugins._builtin_table import ACTUATORS, FEEDBACK, SCORERS, SELECTORS, STORAGES, TRAINERS, Builtin
from flexkit.plugins._hookspecs import Register, hookimpl


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
    """GRPO's family of group advantage estimators (:data:`flexkit._estimators.BUILTIN_GROUP_ESTIMATORS`)."""
    return sorted(BUILTIN_GROUP_ESTIMATORS)
