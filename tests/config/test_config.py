"""Strict config loading: every mistake of a file reported at once, with its key path."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from flexkit import ConfigError
from flexkit.config import field
from flexkit.config._converter import make_converter, structure
from flexkit.config._loader import parse_toml
from flexkit.pipeline._pipeline import load_pipeline, pipeline_from_dict

MINIMAL = {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "a.jsonl"}]}


def messages(exc: ConfigError) -> dict[str, str]:
    return {issue.path: issue.message for issue in exc.issues}


def test_minimal_pipeline_gets_defaults() -> None:
    pipe = pipeline_from_dict(MINIMAL)
    cfg = pipe.config
    assert cfg.run.batch_size == 4 and cfg.run.seed == 0
    assert cfg.tasksets[0].selector.type == "sequential"
    assert cfg.tasksets[0].storage.type == "file"
    assert cfg.tasksets[0].storage.config.path == "a.jsonl"
    assert cfg.feedback.operator.type == "pass_rate_calculator"
    assert cfg.feedback.out_of_range == "clip"


def test_three_mistakes_all_reported_with_paths(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(
        '[run]\nbatch_size = 8\nsed = 1\n\n[[tasksets]]\nname = "m"\npath = "m.jsonl"\nweight = "2"\n\n'
        '[tasksets.selector]\ntype = "shuffle"\n\n[[tasksets]]\nname = "n"\npath = "n.jsonl"\nweight = -1\n'
    )
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    found = messages(info.value)
    assert found["run.sed"].startswith("unknown key (did you mean 'seed'?)")
    assert found["tasksets[0].weight"] == "expected a number, got string '2'"
    assert found["tasksets[1].weight"] == "must be > 0, got -1"
    report = str(info.value)
    assert report.count(str(path)) == 3 and "Traceback" not in report


@pytest.mark.parametrize(
    ("value", "expected"),
    [("false", "expected an integer, got string 'false'"), (1.9, "expected an integer, got float 1.9"),
     (True, "expected an integer, got boolean True")],
)
def test_no_coercion_of_ints(value: object, expected: str) -> None:
    data = {"run": {"batch_size": value}, "tasksets": MINIMAL["tasksets"]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data)
    assert messages(info.value) == {"run.batch_size": expected}


def test_no_coercion_of_bools_and_strings() -> None:
    @attrs.frozen(kw_only=True)
    class Cfg:
        flag: bool = False
        name: str = "x"
        ratio: float = field(default=0.5, ge=0, le=1)

    conv = make_converter()
    assert structure(conv, {"ratio": 1}, Cfg).ratio == 1.0  # an int is a fine float
    with pytest.raises(ConfigError) as info:
        structure(conv, {"flag": "false", "name": 3, "ratio": 1.5}, Cfg)
    assert messages(info.value) == {
        "flag": "expected a boolean, got string 'false'",
        "name": "expected a string, got integer 3",
        "ratio": "must be <= 1, got 1.5",
    }


def test_nan_and_inf_rejected_where_finite_numbers_are_expected() -> None:
    data = {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "a", "weight": float("inf")}]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data)
    assert messages(info.value) == {"tasksets[0].weight": "must be a finite number, got inf"}


def test_unknown_component_lists_registered_and_closest() -> None:
    data = {**MINIMAL, "tasksets": [{"name": "a", "path": "a", "selector": {"type": "shufle"}}]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data)
    msg = messages(info.value)["tasksets[0].selector.type"]
    assert "unknown selector 'shufle' (did you mean 'shuffle'?)" in msg
    assert "registered: " in msg and "sequential" in msg


def test_unknown_component_parameter_is_an_error_not_ignored() -> None:
    data = {**MINIMAL, "tasksets": [{"name": "a", "path": "a", "selector": {"type": "shuffle", "sed": 3}}]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data)
    assert "unknown key for selector 'shuffle'" in messages(info.value)["tasksets[0].selector.sed"]


def test_missing_required_and_wrong_table_types() -> None:
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict({"run": [], "tasksets": [{"path": "a"}]})
    assert messages(info.value) == {
        "run": "expected a table, got array []",
        "tasksets[0].name": "missing required key",
    }


def test_empty_tasksets_and_duplicate_names() -> None:
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict({"run": {"batch_size": 1}, "tasksets": []})
    assert messages(info.value) == {"tasksets": "must have at least 1 item(s), got 0"}
    dup = {"run": {"batch_size": 1}, "tasksets": [{"name": "a", "path": "x"}, {"name": "a", "path": "y"}]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(dup)
    assert messages(info.value) == {"tasksets[1].name": "duplicate taskset name 'a' (also tasksets[0])"}


def test_epochs_and_steps_are_exclusive() -> None:
    data = {"run": {"batch_size": 1, "total_epochs": 2, "total_steps": 5}, "tasksets": MINIMAL["tasksets"]}
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict(data)
    assert messages(info.value) == {"run.total_steps": "set total_epochs or total_steps, not both"}


def test_toml_syntax_error_has_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        parse_toml("[run]\nbatch_size = = 3\n", "p.toml")
    text = str(info.value)
    assert text.startswith("p.toml: line 2, column 14: TOML syntax error")


def test_regression_a_byte_order_mark_is_read_past() -> None:
    """A UTF-8 file some editors write with a BOM was 'line 1, column 1: TOML syntax error: Invalid statement'."""
    assert parse_toml("\ufeff[run]\nbatch_size = 3\n".encode()) == {"run": {"batch_size": 3}}
    assert parse_toml("\ufeff[run]\n") == {"run": {}}


def test_missing_file_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_pipeline(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[run]")
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_pipeline(bad)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
