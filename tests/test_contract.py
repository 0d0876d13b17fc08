"""The component contract (:mod:`flexkit.testing._contract`), checked for every registered component of every stage
(built-ins and the installed first-party plugins), parametrised by ``stage:name`` from the plugin registry: a
newly registered component is covered without editing this file. Each clause is its own test, so a failure names
it; a plugin in another repository runs the same checks with one call, ``flexkit.testing.check_component``.

A component that cannot be built generically goes in :data:`NOT_BUILDABLE` with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flexkit.config._components import STAGES
from flexkit.plugins._manager import REGISTER_HOOKS, Component, plugin_host_for
from flexkit.testing import (
    CHECKPOINTED,
    DRIVEN,
    check_builds,
    check_component,
    check_component_pattern,
    check_documented,
    check_exact_resume,
    check_refuses_bad_table,
    check_schema_entry,
    check_state_round_trip,
    host,
    registered,
)

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
    check_builds(component, tmp_path)


@pytest.mark.parametrize("component", components(*CHECKPOINTED))
def test_state_survives_a_checkpoint(component: Component, tmp_path: Path) -> None:
    check_state_round_trip(component, tmp_path)


@pytest.mark.parametrize("component", components(*DRIVEN))
def test_resume_continues_the_uninterrupted_run(component: Component, tmp_path: Path) -> None:
    check_exact_resume(component, tmp_path)


@pytest.mark.parametrize("component", components())
def test_has_an_entry_in_the_json_schema(component: Component) -> None:
    check_schema_entry(component)


@pytest.mark.parametrize("component", components())
def test_is_documented(component: Component) -> None:
    check_documented(component)


@pytest.mark.parametrize("component", components())
def test_a_bad_table_is_refused_at_its_key_path(component: Component, tmp_path: Path) -> None:
    check_refuses_bad_table(component, tmp_path)


@pytest.mark.parametrize("component", components())
def test_follows_the_component_pattern(component: Component, tmp_path: Path) -> None:
    check_component_pattern(component, tmp_path)


def test_one_call_runs_every_check_of_a_stage(tmp_path: Path) -> None:
    assert check_component("selector", "shuffle", workdir=tmp_path) == [
        "builds", "state_round_trip", "exact_resume", "refuses_bad_table", "component_pattern", "schema_entry",
        "documented"]
    assert check_component("feedback", "pass_rate_calculator") == [
        "builds", "refuses_bad_table", "component_pattern", "schema_entry", "documented"]


FORGETFUL = """
import numpy as np
from flexkit import Selector, hookimpl


class Forgetful(Selector):
    \"\"\"Random picks from its own generator, which its state leaves out: it cannot resume exactly.\"\"\"

    def _init_state(self):
        self.picker = np.random.default_rng(self.size)

    def _select(self, batch_size, return_extra_info):
        return self.picker.integers(0, self.size, batch_size), {}


@hookimpl
def flexkit_register_selectors(register):
    register("forgetful_g24", Forgetful)
"""


def test_the_checks_catch_a_selector_that_does_not_resume(tmp_path: Path) -> None:
    (tmp_path / "forgetful_g24.py").write_text(FORGETFUL)
    plugins = plugin_host_for(["./forgetful_g24.py"], base_dir=tmp_path)
    with pytest.raises(AssertionError, match="selector 'forgetful_g24': the resumed run's outputs differ"):
        check_component("selector", "forgetful_g24", plugins=plugins, workdir=tmp_path / "work")
