"""A factory that builds no component of its stage is refused when it is built (issue G2, item 3).

It used to be accepted, and failed later with an ``AttributeError`` (``'dict' object has no attribute
'get_indices'``) at the first read, feedback or step, without naming the plugin. ``Component.build`` now checks
what the factory returned against :data:`flexkit.plugins._contract.REQUIRED` and names the component, its plugin and its
distribution.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from flexkit import ComponentError, hookimpl
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.plugins._contract import REQUIRED
from flexkit.plugins._manager import REGISTER_HOOKS, PluginHost
from flexkit.sample.scorers import RewardScorer


def host_with(stage: str, factory: Any, distribution: str | None = "acme-parts") -> PluginHost:
    plugin = types.ModuleType("acme_parts")
    setattr(plugin, REGISTER_HOOKS[stage], hookimpl(lambda register: register("part", factory)))
    host = PluginHost.load(entry_points=False)
    assert host.add(plugin, name="acme", distribution=distribution)
    return host


class Half:
    """Has some methods of every stage, not all."""

    def state_dict(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("stage", sorted(REQUIRED))
@pytest.mark.parametrize("returned", ["none", "dict", "half", "class"])
def test_a_factory_returning_no_component_fails_at_build_naming_it(stage: str, returned: str) -> None:
    value = {"none": None, "dict": {"x": 1}, "half": Half(), "class": RewardScorer}[returned]
    host = host_with(stage, lambda config, **context: value)
    with pytest.raises(ComponentError) as info:
        host.component(stage, "part").build()
    message = str(info.value)
    assert message.startswith(f"{stage} 'part' (plugin 'acme', distribution 'acme-parts'): its factory ")
    if returned == "class":
        assert "returned the class RewardScorer, not an instance" in message
    else:
        assert "which is not" in message and "it lacks" in message


def test_the_pipeline_refuses_them_where_it_builds_them(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps({"id": i}) for i in range(4)) + "\n")
    (tmp_path / "junk.py").write_text(
        "from flexkit import hookimpl\n"
        "class NoProcess:\n    pass\n"
        "@hookimpl\ndef flexkit_register_scorers(register):\n    register('junk', lambda config: object())\n"
        "@hookimpl\ndef flexkit_register_feedback(register):\n    register('junk', lambda config: NoProcess())\n"
        "@hookimpl\ndef flexkit_register_storages(register):\n"
        "    register('junk', lambda config, **context: [{'id': 0}])\n")
    base = {"plugins": ["./junk.py"], "run": {"batch_size": 2},
            "tasksets": [{"name": "t", "path": "t.jsonl", "selector": {"type": "shuffle"}}]}
    sample = {"mechanism": "select", "scorer": {"type": "junk"}, "actuator": {"type": "threshold_band"}}
    with pytest.raises(ComponentError, match=r"scorer 'junk' \(local plugin './junk.py'\).*lacks __call__"):
        pipeline_from_dict({**base, "sample": sample}, base_dir=tmp_path)
    pipe = pipeline_from_dict({**base, "feedback": {"type": "junk"}}, base_dir=tmp_path)
    with pytest.raises(ComponentError, match=r"feedback 'junk' .*returned NoProcess, which is not a feedback "
                                             r"operator .*lacks process"):
        pipe.feedback_operator  # noqa: B018 - building it is the test
    storage = {**base, "tasksets": [{"name": "t", "storage_type": "junk", "selector": {"type": "shuffle"}}]}
    with pytest.raises(ComponentError, match=r"tasksets\[0\]: storage 'junk' .*returned list, which is not a taskset "
                                          r".*lacks read"):
        pipeline_from_dict(storage, base_dir=tmp_path).scheduler  # noqa: B018


def test_components_built_by_the_host_record_their_plugin_and_distribution() -> None:
    from flexkit.plugins._manager import get_plugins

    sel = get_plugins().component("selector", "shuffle").build(size=4)
    assert (sel.registered_name, sel.registered_plugin, sel.registered_distribution) == (
        "shuffle", "flexkit.plugins.builtins", "flexkit-rft")
