"""A plugin's own bug while its component is built is a ComponentError naming the component and its plugin,
never a config issue of the taskset; flexkit errors (a bad taskset) stay config issues at ``tasksets[i]``."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.errors import ComponentError, ConfigError
from flexkit.pipeline import pipeline_from_dict

PLUGIN = '''
from flexkit import Selector, TasksetError, hookimpl


class Broken(Selector):
    def _select(self, n):
        return self.rng.integers(0, self.size, n)


def broken(config, *, size, seed, features):
    raise ValueError("boom: a bug in the plugin")


def refusing(config, *, size, seed, features):
    raise TasksetError("rows lack the 'f9' column", taskset="a")


@hookimpl
def flexkit_register_selectors(register):
    register("broken_g24", broken)
    register("refusing_g24", refusing)
'''


def scheduler_of(tmp_path: Path, selector: str) -> object:
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n')
    (tmp_path / "bugs_g24.py").write_text(PLUGIN)
    data = {"plugins": ["./bugs_g24.py"], "run": {"batch_size": 1},
            "tasksets": [{"name": "a", "path": "a.jsonl", "selector": {"type": selector}}]}
    return pipeline_from_dict(data, base_dir=tmp_path).scheduler


def test_a_plugin_bug_while_building_is_a_component_error(tmp_path: Path) -> None:
    with pytest.raises(ComponentError) as info:
        scheduler_of(tmp_path, "broken_g24")
    message = str(info.value)
    assert "selector 'broken_g24'" in message and "local plugin" in message
    assert message.startswith("tasksets[0]: ") and "raised ValueError while it was built: boom: a bug" in message
    assert not isinstance(info.value, ConfigError)


def test_a_flexkit_error_while_building_stays_a_config_issue_of_the_taskset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        scheduler_of(tmp_path, "refusing_g24")
    [issue] = info.value.issues
    assert issue.path == "tasksets[0]" and "rows lack the 'f9' column" in issue.message
