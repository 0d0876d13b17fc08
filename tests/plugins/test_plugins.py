"""The plugin manager: entry points, built-ins through the same path, failures reported, strict mode."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pluggy
import pytest

import flexkit
from flexkit import ComponentError, ConfigError, PluginError, hookimpl
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.plugins import _hookspecs as hookspecs
from flexkit.plugins._manager import BUILTIN_PLUGINS, REGISTER_HOOKS, PluginHost, get_plugins, load_local_module

GOOD = """
import attrs
from flexkit import hookimpl
from flexkit.config import field

@attrs.frozen(kw_only=True)
class StrideConfig:
    stride: int = field(default=1, ge=1, doc="step")

def make(config, **context):
    return ("stride", config.stride, context)

@hookimpl
def flexkit_register_selectors(register):
    register("stride", make, StrideConfig)
"""

TASKSETS = [{"name": "a", "path": "a.jsonl"}]


def test_builtins_register_through_the_plugin_path() -> None:
    host = get_plugins()
    assert {p.name for p in host.plugins} >= set(BUILTIN_PLUGINS)
    for component in host.all_components():
        if component.plugin in BUILTIN_PLUGINS:
            assert component.distribution == "flexkit-rft"
            assert component.version == flexkit.__version__
    assert "pass_rate_calculator" in host.names("feedback")
    assert "file" in host.names("storage")


def test_entry_point_plugin_is_discovered_and_usable_by_name(fake_dist) -> None:
    fake_dist("stride-dist", {"stride_mod": GOOD}, {"stride": "stride_mod"}, version="2.3")
    host = get_plugins()
    comp = host.component("selector", "stride")
    assert (comp.plugin, comp.distribution, comp.version) == ("stride", "stride-dist", "2.3")
    pipe = pipeline_from_dict({"run": {"batch_size": 2},
                               "tasksets": [{"name": "a", "path": "a", "selector": {"type": "stride", "stride": 3}}]})
    assert pipe.config.tasksets[0].selector.config.stride == 3
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict({"run": {"batch_size": 2},
                            "tasksets": [{"name": "a", "path": "a", "selector": {"type": "stride", "stride": 0}}]})
    assert str(info.value) == "tasksets[0].selector.stride: must be >= 1, got 0"


def test_import_failure_is_reported_and_others_keep_working(fake_dist) -> None:
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom at import')"}, {"broken": "broken_mod"})
    fake_dist("stride-dist", {"stride_mod": GOOD}, {"stride": "stride_mod"})
    host = PluginHost.load()
    assert "stride" in host.names("selector")
    [failure] = host.failures
    assert (failure.plugin, failure.distribution, failure.phase) == ("broken", "broken-dist", "import")
    assert "boom at import" in failure.error


def test_registration_failure_is_reported_and_rolled_back(fake_dist) -> None:
    source = GOOD.replace('register("stride", make, StrideConfig)',
                          'register("half", make, StrideConfig)\n    raise ValueError("boom in hook")')
    fake_dist("half-dist", {"half_mod": source}, {"half": "half_mod"})
    host = PluginHost.load()
    assert "half" not in host.names("selector")
    [failure] = host.failures
    assert failure.phase == "register" and "boom in hook" in failure.error and failure.distribution == "half-dist"


def test_misspelt_hook_fails_loudly(fake_dist) -> None:
    fake_dist("typo-dist", {"typo_mod": GOOD.replace("flexkit_register_selectors", "flexkit_register_selector")},
              {"typo": "typo_mod"})
    host = PluginHost.load()
    [failure] = host.failures
    assert failure.phase == "register" and "flexkit_register_selector" in failure.error


def test_same_name_from_two_distributions_is_an_error_naming_both(fake_dist) -> None:
    fake_dist("one-dist", {"one_mod": GOOD}, {"one": "one_mod"})
    fake_dist("two-dist", {"two_mod": GOOD}, {"two": "two_mod"})
    host = PluginHost.load()
    [failure] = host.failures
    assert failure.phase == "conflict"
    assert "one-dist" in failure.error and "two-dist" in failure.error
    with pytest.raises(ConfigError) as info:
        host.component("selector", "stride")
    assert "one-dist" in str(info.value) and "two-dist" in str(info.value)


def test_builtin_name_cannot_be_silently_overridden(fake_dist) -> None:
    fake_dist("shadow-dist", {"shadow_mod": GOOD.replace('"stride"', '"pass_rate_calculator"').replace(
        "flexkit_register_selectors", "flexkit_register_feedback")}, {"shadow": "shadow_mod"})
    host = PluginHost.load()
    assert [f.phase for f in host.failures] == ["conflict"]
    assert "flexkit" in host.failures[0].error and "shadow-dist" in host.failures[0].error


def test_same_plugin_registering_a_name_twice_is_reported(fake_dist) -> None:
    source = GOOD.replace('register("stride", make, StrideConfig)',
                          'register("stride", make, StrideConfig)\n    register("stride", make, StrideConfig)')
    fake_dist("twice-dist", {"twice_mod": source}, {"twice": "twice_mod"})
    host = PluginHost.load()
    assert "registered twice" in host.failures[0].error


@pytest.mark.parametrize("bad", ['register("Bad Name", make, StrideConfig)', 'register("ok", make, dict)',
                                 'register("ok", 42, StrideConfig)'])
def test_register_checks_its_arguments(fake_dist, bad: str) -> None:
    fake_dist("bad-dist", {"bad_mod": GOOD.replace('register("stride", make, StrideConfig)', bad)},
              {"bad": "bad_mod"})
    host = PluginHost.load()
    assert len(host.failures) == 1 and host.failures[0].phase == "register"


def test_unknown_hook_argument_is_a_registration_failure_naming_plugin_and_argument(fake_dist) -> None:
    fake_dist("arg-dist", {"arg_mod": GOOD.replace("def flexkit_register_selectors(register):\n    register(",
                                                   "def flexkit_register_selectors(reg):\n    reg(")},
              {"arg": "arg_mod"})
    host = PluginHost.load()
    [failure] = host.failures
    assert failure.phase == "register" and "stride" not in host.names("selector")
    assert "'arg'" in str(failure) and "reg" in failure.error


def test_registration_hook_arguments_are_matched_by_name() -> None:
    """Each argument a hook implementation declares gets the value of that name (``register`` the registrar),
    never the registrar under another name: with a registration hook that declares an argument the host does
    not pass, a plugin asking for it fails to register, naming the plugin and the argument."""
    specs = types.SimpleNamespace(**{name: getattr(hookspecs, name) for name in REGISTER_HOOKS.values()})

    @hookspecs.hookspec
    def flexkit_register_selectors(register: Any, extra: Any) -> None:
        """A registration hook with one more argument than the host passes."""

    specs.flexkit_register_selectors = flexkit_register_selectors
    seen: dict[str, Any] = {}

    class ByName:
        @hookimpl
        def flexkit_register_selectors(self, register: Any) -> None:
            seen["register"] = register
            register("by_name", lambda config: config)

    class AsksForExtra:
        @hookimpl
        def flexkit_register_selectors(self, register: Any, extra: Any) -> None:
            seen["extra"] = extra

    host = PluginHost()
    host.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    host.pm.add_hookspecs(specs)
    assert host.add(ByName(), name="by-name") and "by_name" in host.names("selector")
    assert callable(seen["register"]) and not host.failures
    assert not host.add(AsksForExtra(), name="asks-for-extra")
    [failure] = host.failures
    assert failure.phase == "register" and "extra" not in seen
    assert "'asks-for-extra'" in str(failure) and "'extra'" in failure.error
    assert host.pm.get_plugin("asks-for-extra") is None  # rolled back

def test_strict_mode_makes_failures_fatal(fake_dist, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    monkeypatch.setenv("FLEXKIT_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="broken-dist"):
        get_plugins()


def test_allow_list_restricts_entry_points(fake_dist, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dist("stride-dist", {"stride_mod": GOOD}, {"stride": "stride_mod"})
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    monkeypatch.setenv("FLEXKIT_LOAD_PLUGINS", "")
    host = get_plugins()
    assert "stride" not in host.names("selector") and not host.failures
    assert "sequential" in host.names("selector")  # built-ins always load
    monkeypatch.setenv("FLEXKIT_LOAD_PLUGINS", "stride-dist")
    host = get_plugins()
    assert "stride" in host.names("selector") and not host.failures


def test_local_plugins_from_pipeline_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text(GOOD)
    data = {"plugins": ["./hooks.py"], "run": {"batch_size": 1},
            "tasksets": [{"name": "a", "path": "a", "selector": {"type": "stride"}}]}
    pipe = pipeline_from_dict(data, base_dir=tmp_path)
    assert pipe.config.tasksets[0].selector.type == "stride"
    assert "stride" not in get_plugins().names("selector")  # local plugins do not leak into the default


def test_local_plugin_failures_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("raise ImportError('nope')")
    data = {"plugins": ["./missing.py", "./bad.py", "no_such_module_xyz"], "run": {"batch_size": 1},
            "tasksets": TASKSETS}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data, base_dir=tmp_path)
    paths = [i.path for i in info.value.issues]
    assert paths == ["plugins[0]", "plugins[1]", "plugins[2]"]
    assert "nope" in info.value.issues[1].message


def test_load_local_module_by_name_and_path(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("VALUE = 7\n")
    assert load_local_module("x.py", tmp_path).VALUE == 7
    assert load_local_module("json").__name__ == "json"


def test_lifecycle_hook_relay_is_exposed() -> None:
    assert hasattr(get_plugins().hook, "flexkit_register_selectors")


def test_every_registration_hook_reaches_its_stage(tmp_path: Path) -> None:
    """One local plugin implementing every registration hook lands one component in each stage."""
    (tmp_path / "all_hooks.py").write_text(
        "from flexkit import hookimpl\n"
        "def make(config, **context):\n    return config\n"
        "@hookimpl\ndef flexkit_register_selectors(register):\n    register('s1', make)\n"
        "@hookimpl\ndef flexkit_register_scorers(register):\n    register('c1', make)\n"
        "@hookimpl\ndef flexkit_register_actuators(register):\n    register('a1', make)\n"
        "@hookimpl\ndef flexkit_register_feedback(register):\n    register('f1', make)\n"
        "@hookimpl\ndef flexkit_register_storages(register):\n    register('st1', make)\n"
        "@hookimpl\ndef flexkit_register_trainers(register):\n    register('tr1', make)\n"
    )
    host = PluginHost.load(["all_hooks.py"], base_dir=tmp_path)
    for stage, name in [("selector", "s1"), ("scorer", "c1"), ("actuator", "a1"), ("feedback", "f1"),
                        ("storage", "st1"), ("trainer", "tr1")]:
        comp = host.component(stage, name)
        assert comp.plugin == "all_hooks.py" and comp.distribution is None
        assert comp.factory(comp.config_cls()) == comp.config_cls()
        with pytest.raises(ComponentError, match=f"{stage} {name!r} .*not .*it lacks"):
            comp.build()  # the factory returns its config, which is no component: refused when built
    info = next(p for p in host.plugins if p.name == "all_hooks.py")
    assert set(info.hooks) == {"flexkit_register_selectors", "flexkit_register_scorers",
                               "flexkit_register_actuators", "flexkit_register_feedback",
                               "flexkit_register_storages", "flexkit_register_trainers"}


def test_loading_every_builtin_plugin_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, flexkit; from flexkit.plugins._manager import get_plugins; host = get_plugins(); "
            "assert host.names('scorer') and host.names('trainer'); "
            "assert 'torch' not in sys.modules, 'torch imported at plugin load'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
