"""The component contract, checked for every registered component of every stage (built-ins and the installed
first-party plugins), parametrised by ``stage:name`` from the plugin registry: a newly registered component is
covered without editing this file, and fails the suite when it cannot

1. be built from its default config with its stage's generic context (``tests/registry.py``);
2. carry its state through a checkpoint (the checkpoint code's JSON and ``.npz``) into a fresh instance, whose
   ``state_dict`` then equals the original's (the stages a pipeline checkpoint holds: :data:`CHECKPOINTED`);
3. resume exactly (selectors, scorers, actuators): run, checkpoint, rebuild with another seed, reload and go
   on, it produces what the uninterrupted run produces;
4. appear in the generated JSON schema with every key of its config;
5. be documented: its stage's registration hook in ``flexkit/hookspecs.py``, and its own description;
6. refuse a bad table: an unknown key, and a table where a scalar belongs, each reported at its key path;
7. follow the component pattern (:mod:`flexkit.configurable`) when its class uses it: ``Config`` is the
   registered config class, the built object knows its registered name, and a selector says whether it learns
   from feedback exactly when it overrides the learning hook; a feedback operator is a ``FeedbackOperator``.

A component that cannot be built generically goes in :data:`NOT_BUILDABLE` with the reason.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import pytest

from flexkit import hookspecs
from flexkit.config.components import STAGES
from flexkit.config.converter import make_converter, structure
from flexkit.config.schema import pipeline_schema
from flexkit.configurable import Configurable
from flexkit.errors import ConfigError
from flexkit.feedback import FeedbackOperator
from flexkit.plugins import REGISTER_HOOKS, Component
from flexkit.selectors import Selector
from tests.registry import (
    build,
    checkpoint_round_trip,
    default_table,
    drive,
    host,
    plain,
    registered,
    spec_class,
)

#: Stages whose state a pipeline checkpoint holds (the scheduler's selectors, the sample stage's scorer and
#: actuator, the runner's trainer); feedback operators and storages are rebuilt from the config.
CHECKPOINTED: tuple[str, ...] = ("selector", "scorer", "actuator", "trainer")
#: Stages :func:`tests.registry.drive` can run step by step.
DRIVEN: tuple[str, ...] = ("selector", "scorer", "actuator")
#: ``(stage, name)`` of components with no cheap generic construction, and why (their own tests cover them).
NOT_BUILDABLE: dict[tuple[str, str], str] = {}


def components(*stages: str) -> list[Any]:
    """``pytest.param`` per registered component of ``stages``, skipped (with the reason) if not buildable."""
    params = []
    for c in registered(*stages):
        reason = NOT_BUILDABLE.get((c.stage, c.name))
        marks = [pytest.mark.skip(reason=f"{c.stage} {c.name!r}: {reason}")] if reason else []
        params.append(pytest.param(c, id=f"{c.stage}:{c.name}", marks=marks))
    return params


def test_the_registry_loads_every_stage_cleanly() -> None:
    assert not host().failures, host().failures
    assert set(REGISTER_HOOKS) == set(STAGES)
    for stage in STAGES:
        assert host().names(stage), f"no {stage} is registered"
    stale = set(NOT_BUILDABLE) - {(c.stage, c.name) for c in registered()}
    assert not stale, f"NOT_BUILDABLE names components that are not registered: {stale}"


@pytest.mark.parametrize("component", components())
def test_builds_from_its_default_config(component: Component, tmp_path: Path) -> None:
    built = build(component, tmp_path)
    if component.stage == "selector":
        assert built.get_indices(1).shape == (1,)
    elif component.stage == "storage":
        assert len(built) > 0 and len(built.read([0])) == 1
    elif component.stage in DRIVEN:
        drive(component.stage, built, range(1), np.random.default_rng(0))


@pytest.mark.parametrize("component", components(*CHECKPOINTED))
def test_state_survives_a_checkpoint(component: Component, tmp_path: Path) -> None:
    original = build(component, tmp_path, seed=0)
    if component.stage in DRIVEN:
        drive(component.stage, original, range(3), np.random.default_rng(0))
    loaded = checkpoint_round_trip(original.state_dict(), tmp_path / "checkpoint")
    fresh = build(component, tmp_path, seed=1)
    fresh.load_state_dict(loaded)
    assert plain(fresh.state_dict()) == plain(original.state_dict())


@pytest.mark.parametrize("component", components(*DRIVEN))
def test_resume_continues_the_uninterrupted_run(component: Component, tmp_path: Path) -> None:
    steps, stop = 8, 3
    straight = build(component, tmp_path, seed=7)
    expected = drive(component.stage, straight, range(steps), np.random.default_rng(1))

    first = build(component, tmp_path, seed=7)
    plan = np.random.default_rng(1)
    got = drive(component.stage, first, range(stop), plan)
    state = checkpoint_round_trip(first.state_dict(), tmp_path / "checkpoint")
    resumed = build(component, tmp_path, seed=8)  # another seed: any randomness must come from the state
    resumed.load_state_dict(state)
    got += drive(component.stage, resumed, range(stop, steps), plan)

    assert got == expected
    assert plain(resumed.state_dict()) == plain(straight.state_dict())


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


@pytest.mark.parametrize("component", components())
def test_has_an_entry_in_the_json_schema(component: Component) -> None:
    key = spec_class(component.stage).DISCRIMINATOR
    # only this component of its stage (every component of the others: selectors sit inside storage branches)
    schema = pipeline_schema(host(), lambda c: c.stage != component.stage or c.name == component.name)
    branches = [n for n in _nodes(schema) if (n.get("properties") or {}).get(key, {}).get("const") == component.name]
    assert branches, f"no schema branch with {key} = {component.name!r}"
    config_keys = {f.alias for f in attrs.fields(component.config_cls)}
    for branch in branches:
        assert config_keys <= set(branch["properties"]), config_keys - set(branch["properties"])
        assert branch["additionalProperties"] is False


@pytest.mark.parametrize("component", components())
def test_is_documented(component: Component) -> None:
    hook = getattr(hookspecs, REGISTER_HOOKS[component.stage], None)
    assert getattr(hook, "flexkit_spec", None) is not None, f"{REGISTER_HOOKS[component.stage]} is not a hookspec"
    assert len((inspect.getdoc(hook) or "").split()) >= 8, f"{hook.__name__} needs a real docstring"
    assert component.description, f"{component.stage} {component.name!r} has no description (factory docstring)"


def _scalar_keys(config_cls: type) -> list[str]:
    """Config keys whose values are TOML scalars (booleans, numbers, strings, choices; optional or not)."""

    def scalar(t: Any) -> bool:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if typing.get_origin(t) is Literal or t in (bool, int, float, str):
            return True
        return type(None) in typing.get_args(t) and len(args) == 1 and scalar(args[0])

    return [f.alias for f in attrs.fields(attrs.resolve_types(config_cls)) if scalar(f.type)]


@pytest.mark.parametrize("component", components())
def test_a_bad_table_is_refused_at_its_key_path(component: Component, tmp_path: Path) -> None:
    spec = spec_class(component.stage)
    converter = make_converter(host())
    table = {spec.DISCRIMINATOR: component.name, **default_table(component, tmp_path)}
    assert structure(converter, table, spec).type == component.name
    for key, value in [("no_such_key", 1), *((k, {"not": "a scalar"}) for k in _scalar_keys(component.config_cls))]:
        with pytest.raises(ConfigError) as error:
            structure(converter, {**table, key: value}, spec)
        assert key in [issue.path for issue in error.value.issues], str(error.value)


@pytest.mark.parametrize("component", components())
def test_follows_the_component_pattern(component: Component, tmp_path: Path) -> None:
    built = build(component, tmp_path)
    if component.stage == "feedback":
        assert isinstance(built, FeedbackOperator)
    if not isinstance(built, Configurable):
        return
    if type(built).Config is not None:
        assert type(built).Config is component.config_cls, "Config differs from the registered config class"
    assert built.registered_name == component.name
    if isinstance(built, Selector):
        overrides_update = type(built)._update is not Selector._update
        assert type(built).learns_from_feedback == overrides_update, (
            f"learns_from_feedback = {type(built).learns_from_feedback} but _update is "
            f"{'' if overrides_update else 'not '}overridden")
