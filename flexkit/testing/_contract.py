"""The component contract, one check per clause; each raises ``AssertionError`` naming the component and the clause.

A component (a registered ``stage:name``) must

1. be built from its default config with its stage's generic context (:func:`check_builds`);
2. carry its state through a real checkpoint (JSON and ``.npz``) into a fresh instance whose ``state_dict`` equals
   the original's (:func:`check_state_round_trip`; the stages a pipeline checkpoint holds, :data:`CHECKPOINTED`);
3. resume exactly: run, checkpoint, rebuild with another seed, reload and go on, it produces what the
   uninterrupted run produces (:func:`check_exact_resume`; selectors, scorers, actuators: :data:`DRIVEN`);
4. appear in the generated JSON schema with every key of its config (:func:`check_schema_entry`);
5. be documented: its stage's hook has a docstring, and the component a description (:func:`check_documented`);
6. refuse a bad table, an unknown key and a table where a scalar belongs, each at its key path
   (:func:`check_refuses_bad_table`);
7. follow the component pattern (:mod:`flexkit.plugins._contract`) when its class uses it
   (:func:`check_component_pattern`).

:func:`check_component` runs every check that applies to a stage.
"""

from __future__ import annotations

import inspect
import tempfile
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import pluggy

from flexkit.config._converter import make_converter, structure
from flexkit.config._schema import pipeline_schema
from flexkit.errors import ConfigError
from flexkit.plugins import _hookspecs as hookspecs
from flexkit.plugins._contract import Configurable, FeedbackOperator
from flexkit.plugins._manager import REGISTER_HOOKS, Component, PluginHost
from flexkit.selectors import Selector
from flexkit.testing._registry import build, checkpoint_round_trip, default_table, drive, host, plain, spec_class

__all__ = [
    "CHECKPOINTED",
    "DRIVEN",
    "check_builds",
    "check_component",
    "check_component_pattern",
    "check_documented",
    "check_exact_resume",
    "check_refuses_bad_table",
    "check_schema_entry",
    "check_state_round_trip",
    "find_component",
]

#: Stages whose state a pipeline checkpoint holds (the scheduler's selectors, the sample stage's scorer and
#: actuator, the runner's trainer); feedback operators and storages are rebuilt from the config.
CHECKPOINTED: tuple[str, ...] = ("selector", "scorer", "actuator", "trainer")
#: Stages :func:`flexkit.testing.drive` runs step by step.
DRIVEN: tuple[str, ...] = ("selector", "scorer", "actuator")


def _require(condition: object, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _who(component: Component) -> str:
    return f"{component.stage} {component.name!r}"


def find_component(stage: str, name: str, plugins: PluginHost | None = None) -> Component:
    """The registered ``stage`` component ``name`` of ``plugins`` (default: built-ins and installed plugins)."""
    return (plugins or host()).component(stage, name)


def check_builds(component: Component, workdir: Path, *, plugins: PluginHost | None = None) -> None:
    """Clause 1: built from its default config, it works once (a selector picks one index, a storage reads a
    row, a scorer or an actuator runs one step on a synthetic batch)."""
    built = build(component, workdir, plugins=plugins)
    if component.stage == "selector":
        _require(built.get_indices(1).shape == (1,), f"{_who(component)}: get_indices(1) is not one index")
    elif component.stage == "storage":
        _require(len(built) > 0 and len(built.read([0])) == 1, f"{_who(component)}: read([0]) is not one row")
    elif component.stage in DRIVEN:
        drive(component.stage, built, range(1), np.random.default_rng(0))


def check_state_round_trip(component: Component, workdir: Path, *, plugins: PluginHost | None = None) -> None:
    """Clause 2: after a few steps, its state goes through a real checkpoint into a fresh instance (another
    seed) whose ``state_dict`` equals the original's."""
    original = build(component, workdir, seed=0, plugins=plugins)
    if component.stage in DRIVEN:
        drive(component.stage, original, range(3), np.random.default_rng(0))
    loaded = checkpoint_round_trip(original.state_dict(), workdir / "checkpoint")
    fresh = build(component, workdir, seed=1, plugins=plugins)
    fresh.load_state_dict(loaded)
    _require(plain(fresh.state_dict()) == plain(original.state_dict()),
             f"{_who(component)}: state_dict after a checkpoint round trip differs from the original's")


def check_exact_resume(component: Component, workdir: Path, *, plugins: PluginHost | None = None,
                       steps: int = 8, stop: int = 3) -> None:
    """Clause 3: run ``stop`` steps, checkpoint, rebuild with another seed, reload and run to ``steps``: the
    outputs and the final state equal the uninterrupted run's (any randomness must come from the state)."""
    straight = build(component, workdir, seed=7, plugins=plugins)
    expected = drive(component.stage, straight, range(steps), np.random.default_rng(1))
    first = build(component, workdir, seed=7, plugins=plugins)
    plan = np.random.default_rng(1)
    got = drive(component.stage, first, range(stop), plan)
    state = checkpoint_round_trip(first.state_dict(), workdir / "checkpoint")
    resumed = build(component, workdir, seed=8, plugins=plugins)
    resumed.load_state_dict(state)
    got += drive(component.stage, resumed, range(stop, steps), plan)
    _require(got == expected, f"{_who(component)}: the resumed run's outputs differ from the uninterrupted run's")
    _require(plain(resumed.state_dict()) == plain(straight.state_dict()),
             f"{_who(component)}: the resumed run's final state differs from the uninterrupted run's")


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def check_schema_entry(component: Component, *, plugins: PluginHost | None = None) -> None:
    """Clause 4: the pipeline JSON schema has a branch for it holding every key of its config, and no others."""
    key = spec_class(component.stage).DISCRIMINATOR
    # only this component of its stage (every component of the others: selectors sit inside storage branches)
    schema = pipeline_schema(plugins or host(), lambda c: c.stage != component.stage or c.name == component.name)
    branches = [n for n in _nodes(schema) if (n.get("properties") or {}).get(key, {}).get("const") == component.name]
    _require(branches, f"{_who(component)}: no schema branch with {key} = {component.name!r}")
    config_keys = {f.alias for f in attrs.fields(component.config_cls)}
    for branch in branches:
        missing = config_keys - set(branch["properties"])
        _require(not missing, f"{_who(component)}: the schema lacks the config keys {sorted(missing)}")
        _require(branch["additionalProperties"] is False, f"{_who(component)}: the schema allows unknown keys")


def check_documented(component: Component) -> None:
    """Clause 5: its stage's registration hook is a documented hookspec, and the component has a description
    (the first line of its factory's docstring, or ``register(..., description=...)``)."""
    hook_name = REGISTER_HOOKS[component.stage]
    hook = getattr(hookspecs, hook_name, None)
    marked = hook is not None and pluggy.PluginManager(hookspecs.PROJECT_NAME).parse_hookspec_opts(
        hookspecs, hook_name) is not None  # pluggy's own reading of its marks
    _require(marked, f"{hook_name} is not a hookspec")
    _require(len((inspect.getdoc(hook) or "").split()) >= 8, f"{hook_name} needs a real docstring")
    _require(component.description, f"{_who(component)} has no description (factory docstring)")


def _scalar_keys(config_cls: type) -> list[str]:
    """Config keys whose values are TOML scalars (booleans, numbers, strings, choices; optional or not)."""

    def scalar(t: Any) -> bool:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if typing.get_origin(t) is Literal or t in (bool, int, float, str):
            return True
        return type(None) in typing.get_args(t) and len(args) == 1 and scalar(args[0])

    return [f.alias for f in attrs.fields(attrs.resolve_types(config_cls)) if scalar(f.type)]


def check_refuses_bad_table(component: Component, workdir: Path, *, plugins: PluginHost | None = None) -> None:
    """Clause 6: its default table is accepted; the same table with an unknown key, or with a table where a
    scalar belongs, is a :class:`~flexkit.errors.ConfigError` with an issue at that key."""
    spec = spec_class(component.stage)
    converter = make_converter(plugins or host())
    table = {spec.DISCRIMINATOR: component.name, **default_table(component, workdir)}
    _require(structure(converter, table, spec).type == component.name,
             f"{_who(component)}: its default table does not structure to it")
    for key, value in [("no_such_key", 1), *((k, {"not": "a scalar"}) for k in _scalar_keys(component.config_cls))]:
        try:
            structure(converter, {**table, key: value}, spec)
        except ConfigError as error:
            paths = [issue.path for issue in error.issues]
            _require(key in paths, f"{_who(component)}: {key} = {value!r} is refused, but not at its key: {error}")
        else:
            raise AssertionError(f"{_who(component)}: the table with {key} = {value!r} was accepted")


def check_component_pattern(component: Component, workdir: Path, *, plugins: PluginHost | None = None) -> None:
    """Clause 7: a feedback operator is a ``FeedbackOperator``; a :class:`~flexkit.Configurable`'s
    ``Config`` is the registered config class and it knows its registered name; a selector says it learns from
    feedback exactly when it overrides the learning hook."""
    built = build(component, workdir, plugins=plugins)
    if component.stage == "feedback":
        _require(isinstance(built, FeedbackOperator), f"{_who(component)} is not a FeedbackOperator")
    if not isinstance(built, Configurable):
        return
    if type(built).Config is not None:
        _require(type(built).Config is component.config_cls,
                 f"{_who(component)}: Config differs from the registered config class")
    _require(built.registered_name == component.name,
             f"{_who(component)}: registered_name is {built.registered_name!r}")
    if isinstance(built, Selector):
        overrides_update = type(built)._update is not Selector._update
        _require(type(built).learns_from_feedback == overrides_update,
                 f"{_who(component)}: learns_from_feedback = {type(built).learns_from_feedback} but _update is "
                 f"{'' if overrides_update else 'not '}overridden")


def _checks(stage: str) -> list[tuple[str, Callable[..., None]]]:
    checks: list[tuple[str, Callable[..., None]]] = [("builds", check_builds)]
    if stage in CHECKPOINTED:
        checks.append(("state_round_trip", check_state_round_trip))
    if stage in DRIVEN:
        checks.append(("exact_resume", check_exact_resume))
    checks += [("refuses_bad_table", check_refuses_bad_table), ("component_pattern", check_component_pattern)]
    return checks


def check_component(stage: str, name: str, *, plugins: PluginHost | None = None,
                    workdir: str | Path | None = None) -> list[str]:
    """Run every contract check that applies to the ``stage`` component ``name`` (registered in ``plugins``,
    default: the built-ins and the installed plugin distributions); returns the names of the checks run.

    ``workdir`` is a scratch directory (default: a temporary one, removed afterwards). A failing check raises
    ``AssertionError`` naming the component and what it broke. In a plugin's own tests::

        import flexkit.testing

        def test_my_selector_keeps_the_contract():
            flexkit.testing.check_component("selector", "my_selector")
    """
    component = find_component(stage, name, plugins)
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="flexkit-contract-") as scratch:
            return check_component(stage, name, plugins=plugins, workdir=scratch)
    root = Path(workdir)
    ran = []
    for label, check in _checks(stage):
        where = root / label
        where.mkdir(parents=True, exist_ok=True)
        check(component, where, plugins=plugins)
        ran.append(label)
    check_schema_entry(component, plugins=plugins)
    check_documented(component)
    return [*ran, "schema_entry", "documented"]
