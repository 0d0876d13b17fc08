"""``flexkit run --set`` and the override rule shared with ``flexkit compare``: replacing a component's ``type``
drops the old component's parameters; an inline table replaces the whole table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexkit import ConfigError
from flexkit.cli.main import main
from flexkit.compare import apply_overrides, parse_setting, run_setting
from tests.cli.test_runner import PIPELINE, step_records, write

DATA = {"run": {"seed": 0},
        "tasksets": [{"name": "a", "selector": {"type": "difficulty_based", "tau": 0.1, "m": 8}}]}


def test_replacing_a_type_drops_the_old_components_parameters() -> None:
    out = apply_overrides(DATA, parse_setting("r:tasksets[0].selector.type=random"))
    assert out["tasksets"][0]["selector"] == {"type": "random"}
    assert DATA["tasksets"][0]["selector"]["tau"] == 0.1  # the input is untouched


def test_keys_the_setting_gives_survive_in_any_order() -> None:
    before = apply_overrides(DATA, parse_setting("s:tasksets.0.selector.seed_like=3,tasksets.0.selector.type=x"))
    after = apply_overrides(DATA, parse_setting("s:tasksets.0.selector.type=x,tasksets.0.selector.seed_like=3"))
    assert before["tasksets"][0]["selector"] == after["tasksets"][0]["selector"] == {"type": "x", "seed_like": 3}


def test_the_same_type_or_a_table_without_one_keeps_its_keys() -> None:
    same = apply_overrides(DATA, parse_setting("s:tasksets.0.selector.type=difficulty_based"))
    assert same["tasksets"][0]["selector"] == DATA["tasksets"][0]["selector"]
    fresh = apply_overrides({"run": {"seed": 1}}, parse_setting("s:run.type=odd"))
    assert fresh["run"] == {"seed": 1, "type": "odd"}


def test_the_inline_table_form_still_replaces_the_whole_table() -> None:
    out = apply_overrides(DATA, parse_setting('s:tasksets.0.selector={type = "random", seed_like = 1}'))
    assert out["tasksets"][0]["selector"] == {"type": "random", "seed_like": 1}


def test_run_settings_merge_every_set_option() -> None:
    setting = run_setting(["tasksets.0.selector.tau=0.3", "tasksets.0.selector.type=thompson_target,run.seed=4"])
    out = apply_overrides(DATA, setting)
    assert out["tasksets"][0]["selector"] == {"type": "thompson_target", "tau": 0.3}
    assert out["run"]["seed"] == 4
    with pytest.raises(ConfigError, match=r"--set tau: 'tau': expected KEY=VALUE"):
        run_setting(["run.seed=1", "tau"])


def test_cli_run_with_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--set", "run.total_steps=12",
                 "--set", "tasksets[1].selector.type=random,trainer.group_size=2"]) == 0
    resolved = json.loads((tmp_path / "r" / "resolved.json").read_text())
    assert resolved["run"]["total_steps"] == 12 and resolved["trainer"]["config"]["group_size"] == 2
    assert resolved["tasksets"][1]["selector"]["type"] == "random"  # difficulty_based's tau & co. were dropped
    assert len(step_records(tmp_path / "r")) == 12
    assert "eval accuracy" in capsys.readouterr().out


def test_cli_run_override_errors_name_the_set_and_the_file(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--set", "run.total_steps=0"]) == 1
    err = capsys.readouterr().err
    assert f"{path} [--set run.total_steps=0]: run.total_steps: must be >= 1" in err
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--set", "tasksets.5.name=x"]) == 1
    assert "--set tasksets.5.name=x: tasksets.5.name: index 5 out of range" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_resume_with_a_larger_total_steps_extends_a_finished_run(tmp_path: Path) -> None:
    path = write(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--quiet", "--set", "run.total_steps=20"]) == 0
    assert main(["run", str(path), "--resume", str(tmp_path / "r"), "--quiet", "--set", "run.total_steps=30"]) == 0
    assert [m["step"] for m in step_records(tmp_path / "r")] == list(range(30))


def test_compare_accepts_a_replaced_type(tmp_path: Path) -> None:
    from flexkit.compare import compare

    path = write(tmp_path, PIPELINE.replace("total_steps = 60", "total_steps = 10"))
    result = compare(path, [parse_setting("random:tasksets[1].selector.type=random")], [0], tmp_path / "out",
                     progress=None)
    assert result.results[0].runs[0].curve[0][0] == 0


@pytest.mark.parametrize("text", ["run.total_steps=2\nrun.eval_every=0", "run.total_steps=2\nzzz = 5"])
def test_regression_an_override_value_with_a_line_break_and_more_keys_is_refused(text: str) -> None:
    """``tomllib`` parsed the whole document and the keys after the line break were dropped without a word."""
    with pytest.raises(ConfigError, match="is not one TOML value: it holds a line break and further keys"):
        run_setting([text])
