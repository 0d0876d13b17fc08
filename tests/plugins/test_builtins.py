"""The built-ins: registered in one module, through the plugin path; component modules loaded only when needed."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import flexkit.plugins.builtins
import flexkit.sample
import flexkit.selectors
from flexkit.plugins._contract import display_name, group_size_of, registered_name_of
from flexkit.plugins._manager import BUILTIN_PLUGINS, PluginHost, get_plugins
from flexkit.sample import GroupSolveRateScorer, ThresholdBandFilter
from flexkit.selectors import DifficultyBasedSelector, Selector
from tests.fixtures import ROOT

#: Modules holding built-in components (or registering them): no core module may import one.
COMPONENT_PREFIXES = ("flexkit.plugins.builtins", "flexkit.run.simulator", "flexkit.selectors.",
                      "flexkit.sample.scorers.", "flexkit.sample.actuators.")
#: Modules under those prefixes that are part of the core.
CORE = {"flexkit.selectors._base", "flexkit.selectors._members", "flexkit.selectors._grouping"}


def _modules_after(statement: str) -> list[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout)


@pytest.mark.parametrize("statement", [
    "import flexkit.scheduler._scheduler", "import flexkit", "import flexkit.pipeline._pipeline"])
def test_core_imports_load_no_builtin_component(statement: str) -> None:
    loaded = _modules_after(statement)
    assert "flexkit.selectors.difficulty_based" not in loaded
    assert [m for m in loaded if m.startswith(COMPONENT_PREFIXES) and m not in CORE] == []


def test_one_name_loads_one_selector_module() -> None:
    loaded = _modules_after("from flexkit.selectors import RandomSelector")
    assert "flexkit.selectors.random" in loaded
    assert "flexkit.selectors.difficulty_based" not in loaded


def test_builtins_are_one_plugin_loaded_like_an_entry_point() -> None:
    assert BUILTIN_PLUGINS == ("flexkit.plugins.builtins",)
    host = PluginHost.load(entry_points=False)
    [info] = host.plugins
    assert (info.name, info.distribution) == ("flexkit.plugins.builtins", "flexkit-rft")
    fresh = PluginHost()
    assert fresh.add(flexkit.plugins.builtins, name="flexkit.plugins.builtins", distribution="flexkit-rft")
    assert {c.name for c in fresh.all_components()} == {c.name for c in host.all_components()}


def test_no_other_module_registers_components() -> None:
    registering = [str(p.relative_to(ROOT)) for p in (ROOT / "flexkit").rglob("*.py")
                   if re.search(r"^@hookimpl", p.read_text(encoding="utf-8"), re.M) and p.name != "builtins.py"]
    assert registering == []


@pytest.mark.parametrize("package", [flexkit.selectors, flexkit.sample], ids=lambda m: m.__name__)
def test_every_public_name_is_still_importable_from_its_package(package: object) -> None:
    for name in package.__all__:  # type: ignore[attr-defined]
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        package.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_the_registry_names_what_it_builds_and_what_is_built_directly() -> None:
    host = get_plugins()
    built = host.component("scorer", "group_solve_rate").build()
    assert built.registered_name == "group_solve_rate"
    assert registered_name_of(GroupSolveRateScorer()) == "group_solve_rate"  # found in the registry
    assert display_name(ThresholdBandFilter) == "'threshold_band' (ThresholdBandFilter)"
    assert host.name_of(DifficultyBasedSelector) == "difficulty_based"

    class Unregistered(Selector):
        def _select(self, batch_size: int, return_extra_info: bool) -> tuple[object, dict[str, object]]:
            raise NotImplementedError

    assert registered_name_of(Unregistered) is None and display_name(Unregistered) == "Unregistered"


def test_a_config_class_gives_the_default_config() -> None:
    assert DifficultyBasedSelector.Config is flexkit.selectors.DifficultyBasedConfig
    sel = flexkit.selectors.RandomSelector(size=3)
    assert sel.config == flexkit.selectors.RandomConfig()
    assert GroupSolveRateScorer().config == flexkit.sample.GroupSolveRateConfig()
    with pytest.raises(TypeError):  # a config with a required field has no defaults to fall back on
        flexkit.selectors.OfflineEasy2HardSelector(size=3)


def test_a_trainers_group_size_is_its_config_field_and_none_without_one() -> None:
    from flexkit.run.simulator import SimulatorConfig

    assert group_size_of(SimulatorConfig(group_size=4)) == 4
    assert group_size_of(flexkit.selectors.RandomConfig()) is None and group_size_of(None) is None
