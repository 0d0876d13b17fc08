"""The ``flexkit_group_estimators`` hook: a plugin declares its own group advantage estimators, which a
``needs_groups`` scorer then accepts; the built-ins declare GRPO's family through the same hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit import ConfigError, load_pipeline
from flexkit._estimators import BUILTIN_GROUP_ESTIMATORS
from flexkit.pipeline._pipeline import group_estimators
from flexkit.plugins._manager import get_plugins

PIPELINE = """
{plugins}
[run]
batch_size = 8
total_steps = 2

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 100
levels = [1, 2]

[tasksets.selector]
type = "random"

[sample]
mechanism = "select"
estimator = "my_group_est"
[sample.scorer]
type = "group_solve_rate"
[sample.actuator]
type = "threshold_band"

[trainer]
type = "simulator"
group_size = 8
"""


def _write(tmp_path: Path, hooks: str | None) -> Path:
    if hooks is not None:
        (tmp_path / "hooks.py").write_text("from flexkit import hookimpl\n\n\n@hookimpl\n"
                                           f"def flexkit_group_estimators():\n    return {hooks}\n")
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.format(plugins='plugins = ["./hooks.py"]' if hooks is not None else ""))
    return path


def test_the_builtins_declare_grpos_family_through_the_hook() -> None:
    declared = [set(names) for names in get_plugins().hook.flexkit_group_estimators()]
    assert set(BUILTIN_GROUP_ESTIMATORS) in declared
    assert {"grpo", "rloo", "dr_grpo"} <= group_estimators(get_plugins())
    assert "gae" not in group_estimators(get_plugins())


def test_a_plugin_declares_its_own_group_estimator(tmp_path: Path) -> None:
    (tmp_path / "without").mkdir()
    with pytest.raises(ConfigError, match="'my_group_est' is not a group advantage estimator"):
        load_pipeline(_write(tmp_path / "without", None))
    pipe = load_pipeline(_write(tmp_path, '["my_group_est"]'))
    assert pipe.sample_stage.estimator == "my_group_est"


@pytest.mark.parametrize("bad", ['"my_group_est"', "3", '[""]', "[3]"])
def test_a_declaration_that_is_not_a_list_of_names_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="flexkit_group_estimators hook returned"):
        load_pipeline(_write(tmp_path, bad))
