"""A plugin's own bug while its component is built is a ComponentError naming the component and its plugin,
never a config issue of the taskset; flexkit errors (a bad taskset) stay config issues at ``tasksets[i]``. A
plugin's own error once the component is built (read while the scheduler is wired) surfaces as itself, never as a
config issue of ``run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.errors import ComponentError, ConfigError
from flexkit.pipeline._pipeline import pipeline_from_dict

PLUGIN = '''
from flexkit import Selector, TasksetError, hookimpl


class Broken(Selector):
    def _select(self, n):
        return self.rng.integers(0, self.size, n)


def broken(config, *, size, seed, features):
    raise ValueError("boom: a bug in the plugin")


class Faulty(Broken):
    @property
    def learns_from_feedback(self):
        raise ValueError("boom: a bug in the plugin's property")


def faulty(config, *, size, seed, features):
    return Faulty(config, size=size, seed=seed, features=features)


def refusing(config, *, size, seed, features):
    raise TasksetError("rows lack the 'f9' column", taskset="a")


@hookimpl
def flexkit_register_selectors(register):
    register("broken_g24", broken)
    register("refusing_g24", refusing)
    register("faulty_g24", faulty)
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


def test_a_plugin_bug_while_the_scheduler_is_wired_is_not_a_config_issue_of_run(tmp_path: Path) -> None:
    """Regression: ``build_scheduler`` caught every ``ValueError`` around the scheduler's construction and reported
    it as a ``run`` config issue, so a selector property's own bug read as a problem of ``[run]``."""
    with pytest.raises(ValueError, match="boom: a bug in the plugin's property") as info:
        scheduler_of(tmp_path, "faulty_g24")
    assert type(info.value) is ValueError and not isinstance(info.value, ConfigError)


def test_the_schedulers_own_argument_errors_stay_config_issues_of_run(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n')
    data = {"run": {"batch_size": 2}, "tasksets": [{"name": "a", "path": "a.jsonl"}]}
    with pytest.raises(ConfigError) as info:
        _ = pipeline_from_dict(data, base_dir=tmp_path).scheduler
    [issue] = info.value.issues
    assert issue.path == "run" and "batch_size 2 exceeds the 1 tasks of one epoch" in issue.message


def test_a_builtin_selector_refusing_its_feature_columns_is_a_config_issue_not_a_bug(tmp_path: Path) -> None:
    """A built-in's refusal of the data is the user's problem (a TasksetError), not a ComponentError of flexkit."""
    (tmp_path / "a.jsonl").write_text('{"f0": 2.0, "f1": 0.5}\n{"f0": 0.1, "f1": 0.5}\n')
    data = {"run": {"batch_size": 1}, "tasksets": [{"name": "a", "path": "a.jsonl", "selector": {
        "type": "difficulty_based", "feature_keys": ["f0", "f1"]}}]}
    with pytest.raises(ConfigError) as info:
        _ = pipeline_from_dict(data, base_dir=tmp_path).scheduler
    [issue] = info.value.issues
    assert issue.path == "tasksets[0]"
    assert issue.message == "difficulty_based: feature column 'f0' must hold pass rates in [0, 1], got 2.0"
