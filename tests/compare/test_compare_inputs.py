"""Bounds on what ``--seeds``, ``--set``, ``--target``, ``--budget`` and ``--jobs`` accept: a huge seed count is
refused before anything is allocated, a deeply nested value gets a located error (not a RecursionError), a long
``--set`` never becomes a file name (for ``flexkit compare`` and ``flexkit run``), and targets outside [0, 1],
budgets that are not whole numbers and repeated values are refused before any run."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit import ConfigError
from flexkit.cli.main import main
from flexkit.compare import compare, parse_seeds, parse_setting
from flexkit.config._overrides import MAX_FOLDER_NAME, MAX_SEEDS, MAX_VALUE_DEPTH, folder_name, run_setting
from tests.compare.test_compare import PIPELINE


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "sim.toml"
    path.write_text(PIPELINE.replace("total_steps = 30", "total_steps = 10").replace("checkpoint_every = 30",
                                                                                       "checkpoint_every = 10"))
    return path


def test_a_huge_seed_count_is_refused_before_anything_is_allocated(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    tracemalloc.start()
    with pytest.raises(ValueError, match=f"at most {MAX_SEEDS} seeds"):
        parse_seeds("1000000000000")
    with pytest.raises(ValueError, match=f"at most {MAX_SEEDS} seeds"):
        parse_seeds(",".join(["1"] * (MAX_SEEDS + 1)))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 10_000_000  # no list of a trillion seeds
    assert len(parse_seeds(str(MAX_SEEDS))) == MAX_SEEDS
    with pytest.raises(ValueError, match="each seed must be <="):
        parse_seeds("1,99999999999999999999")
    assert main(["compare", "x.toml", "--seeds", "10**12", "--out", str(tmp_path / "o")]) == 2
    assert main(["compare", "x.toml", "--seeds", "999999999999", "--out", str(tmp_path / "o")]) == 2
    assert f"--seeds 999999999999: at most {MAX_SEEDS} seeds" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="at most"):
        compare("x.toml", [parse_setting("a:")], range(MAX_SEEDS + 1), tmp_path / "o", progress=None)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("arguments", "message"), [
    ({"target_accuracy": 30}, "--target: expected accuracies between 0 and 1, got 30"),
    ({"target_accuracy": [0.3, float("nan")]}, "--target: expected accuracies between 0 and 1, got nan"),
    ({"target_accuracy": -0.1}, "--target: expected accuracies between 0 and 1"),
    ({"target_accuracy": "0.3"}, "--target: expected accuracies between 0 and 1, got '0.3'"),
    ({"target_accuracy": [0.3, 0.3]}, "--target: give each value once"),
    ({"budget": float("inf")}, "--budget: expected integers >= 1, got inf"),
    ({"budget": [100, 1.5]}, "--budget: expected integers >= 1, got 1.5"),
    ({"budget": [100, 100]}, "--budget: give each value once"),
    ({"seeds": [0, "1"]}, "--seeds: give at least one seed, each an integer"),
    ({"seeds": [2**40]}, "--seeds: give at least one seed, each an integer"),
    ({"seeds": [0.5]}, "--seeds: give at least one seed, each an integer"),
    ({"jobs": 1.5}, "--jobs: must be an integer >= 1"),
])
def test_compare_refuses_targets_budgets_seeds_and_jobs_it_cannot_use(pipeline_file: Path, tmp_path: Path,
                                                                        arguments: dict, message: str) -> None:
    seeds = arguments.pop("seeds", [0])
    with pytest.raises(ConfigError, match=re.escape(message)):
        compare(pipeline_file, [parse_setting("a:")], seeds, tmp_path / "o", progress=None, **arguments)
    assert not (tmp_path / "o").exists()


def test_cli_refuses_a_target_outside_0_1(pipeline_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("30", "0.3,-0.1", "nan"):
        assert main(["compare", str(pipeline_file), "--target", target, "--out", str(tmp_path / "o")]) == 2
        assert f"--target {target}: expected accuracies between 0 and 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("depth", [MAX_VALUE_DEPTH + 1, 5000, 100_000])
def test_a_deeply_nested_value_gets_a_located_error(depth: int) -> None:
    value = "[" * depth + "]" * depth
    with pytest.raises(ConfigError) as info:
        parse_setting(f"deep:tasksets.0.selector.feature_keys={value}")
    message = str(info.value)
    assert message.startswith("--set deep:") and "tasksets.0.selector.feature_keys: value nested" in message
    assert f"at most {MAX_VALUE_DEPTH} levels" in message
    with pytest.raises(ConfigError, match=r"run\.x: value nested"):
        run_setting([f"run.x={{a = {value}}}"])
    assert parse_setting('ok:x=[[1], {a = "[[[["}]').overrides[0].value == [[1], {"a": "[[[["}]  # quoted brackets


def test_cli_deeply_nested_value(pipeline_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 3000 + "]" * 3000
    assert main(["run", str(pipeline_file), "--set", f"run.x={deep}", "--out", str(tmp_path / "r")]) == 1
    assert main(["compare", str(pipeline_file), "--set", f"a:run.x={deep}", "--out", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert err.count("run.x: value nested 3000 levels deep") == 2 and "RecursionError" not in err


def test_long_setting_names_make_short_distinct_folders() -> None:
    long_a, long_b = "a" * 300, "a" * 299 + "b"
    assert folder_name("random") == "random"
    for name in (long_a, long_b):
        assert len(folder_name(name)) == MAX_FOLDER_NAME and folder_name(name).startswith("a" * 40)
    assert folder_name(long_a) != folder_name(long_b)


LONG_SET = ("tasksets.0.selector.feature_keys=[\"weak_pass_rate\", \"strong_pass_rate\"],"
            "tasksets.0.selector.target_reward=0.5,tasksets.0.selector.tau=0.1,run.eval_every=5,"
            "tasksets.0.selector.m=8,trainer.learning_rate=0.2,trainer.eval_tasks_per_level=20,run.batch_size=8,"
            "trainer.group_size=4")


def test_run_with_a_long_set(pipeline_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The overrides name the pipeline in messages; they are no file name (ENAMETOOLONG before)."""
    assert len(LONG_SET) > 255
    out = tmp_path / "r"
    assert main(["run", str(pipeline_file), "--set", "run.total_steps=10", "--set", LONG_SET, "--out", str(out),
                 "--quiet"]) == 0
    assert json.loads((out / "resolved.json").read_text())["run"]["eval_every"] == 5
    assert "run folder" in capsys.readouterr().out


def test_compare_with_a_long_set_and_name(pipeline_file: Path, tmp_path: Path) -> None:
    name = "n" * 200
    result = compare(pipeline_file, [parse_setting(f"{name}:{LONG_SET}"), parse_setting("short:")], [0],
                     tmp_path / "o", progress=None, plots=False)
    run = result.results[0].runs[0]
    assert run.run_dir == tmp_path / "o" / folder_name(name) / "seed0" and len(run.run_dir.parent.name) <= 64
    assert json.loads((run.run_dir / "setting.json").read_text())["setting"] == name
    assert [x for x, _ in run.curve] == [0, 5, 10]
    assert f"| {name} |" in result.markdown


@given(st.lists(st.text(alphabet="abcXYZ019_.-", min_size=1, max_size=300), min_size=2, max_size=6, unique=True))
@settings(max_examples=200, deadline=None)
def test_folder_names_are_short_and_distinct(names: list[str]) -> None:
    folders = [folder_name(name) for name in names]
    assert all(len(f) <= MAX_FOLDER_NAME for f in folders)
    assert len(set(folders)) == len(folders)
    assert all(f == n for f, n in zip(folders, names, strict=True) if len(n) <= MAX_FOLDER_NAME)


@given(st.integers(min_value=1, max_value=MAX_VALUE_DEPTH + 20))
@settings(max_examples=60, deadline=None)
def test_nesting_up_to_the_bound_parses_and_beyond_is_refused(depth: int) -> None:
    text = "[" * depth + "1" + "]" * depth
    if depth <= MAX_VALUE_DEPTH:
        value = parse_setting(f"s:x={text}").overrides[0].value
        for _ in range(depth):
            assert isinstance(value, list) and len(value) == 1
            value = value[0]
        assert value == 1
    else:
        with pytest.raises(ConfigError, match=f"nested {depth} levels deep"):
            parse_setting(f"s:x={text}")


@pytest.mark.parametrize("name", ["results.json", "results.md", "accuracy.png", "levels.png", "Results.JSON"])
def test_regression_a_setting_named_like_a_report_is_refused_before_any_run(
        pipeline_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """A setting named ``results.json`` trained every run, then failed writing the report ("Is a directory")."""
    out = tmp_path / "out"
    assert main(["compare", str(pipeline_file), "--set", "base:", "--set", f"{name}:", "--seeds", "1",
                 "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{name!r} is reserved" in err and "results.json, results.md, accuracy.png, levels.png" in err, err
    assert not out.exists()  # nothing ran


def test_regression_a_setting_its_trainer_does_not_honour_is_refused_before_any_run(
        pipeline_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``[replay]`` with the simulator (no replay support) started every run and failed each; now refused up
    front, naming the setting and the key."""
    out = tmp_path / "out"
    assert main(["compare", str(pipeline_file), "--set", "base:", "--set", "replayed:replay={groups=4}",
                 "--seeds", "2", "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "replayed" in err and "replay" in err and "supports_replay" in err, err
    assert not out.exists()  # not even the first setting's runs
