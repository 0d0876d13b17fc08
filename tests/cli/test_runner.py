"""flexkit run: the simulator backend end to end, run folders, metrics, exact resume after a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexkit import ConfigError, FlexkitError
from flexkit.cli.main import main
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from tests.fixtures import EXAMPLES, crash_run, read_metrics, without_clock

PIPELINE = """
[run]
batch_size = 16
seed = 5
total_steps = 60
eval_every = 10
checkpoint_every = 20

[[tasksets]]
name = "easy"
storage_type = "simulated"
size = 300
levels = [1, 2]

[[tasksets]]
name = "hard"
storage_type = "simulated"
size = 300
levels = [3, 4]
seed = 1

[tasksets.selector]
type = "difficulty_based"
feature_keys = ["weak_pass_rate", "strong_pass_rate"]
target_reward = 0.5
tau = 0.2

[sample]
mechanism = "select"
[sample.scorer]
type = "group_solve_rate"
[sample.actuator]
type = "threshold_band"
low = 0.0
high = 1.0

[trainer]
type = "simulator"
group_size = 4
"""




def write(tmp_path: Path, text: str = PIPELINE) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def step_records(run_dir: Path) -> list[dict]:
    """The metrics records of training steps (without the ``"step": -1`` evaluation before training)."""
    return [m for m in read_metrics(run_dir) if m["step"] >= 0]


def test_run_writes_folder_metrics_and_checkpoint(tmp_path: Path) -> None:
    result = run_pipeline(load_pipeline(write(tmp_path)), run_dir=tmp_path / "run", progress=None)
    run_dir = tmp_path / "run"
    assert (run_dir / "pipeline.toml").read_text() == PIPELINE
    resolved = json.loads((run_dir / "resolved.json").read_text())
    assert resolved["trainer"]["config"]["group_size"] == 4 and resolved["run"]["eval_every"] == 10
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics] == list(range(-1, 60))
    validation = {k: v for k, v in metrics[0].items() if k.startswith("flexkit/val/")}  # the validation split
    assert sorted(validation) == ["flexkit/val/accuracy", *(f"flexkit/val/accuracy/{level}" for level in range(1, 5))]
    assert metrics[0] == {"step": -1, "flexkit/run/rollouts": 0, "flexkit/run/generated_tokens": 0,  # before training
                          **{k.replace("eval_", "flexkit/eval/"): v for k, v in result.first_eval.items()},
                          **validation, "flexkit/run/seconds": metrics[0]["flexkit/run/seconds"]}
    assert validation["flexkit/val/accuracy/2"] != result.first_eval["eval_accuracy/2"]  # other tasks
    first = metrics[1]
    assert {"step", "reward_mean", "flexkit/feedback/pass_rate_mean", "flexkit/sample/kept_fraction",
            "flexkit/taskset_mix"} <= set(first)
    evals = [m for m in metrics if "flexkit/eval/accuracy" in m]
    assert [m["step"] for m in evals] == [-1, 9, 19, 29, 39, 49, 59]
    assert {"flexkit/eval/accuracy/1", "flexkit/eval/accuracy/4"} <= set(evals[-1])
    assert (run_dir / "checkpoint" / "state.json").exists()
    assert result.last_eval["eval_accuracy"] > result.first_eval["eval_accuracy"]


def test_resume_after_a_crash_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    crash_run(load_pipeline(path), tmp_path / "broken", 45)
    assert len(step_records(tmp_path / "broken")) == 45  # everything up to the crash was flushed
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    assert without_clock(read_metrics(tmp_path / "broken")) == without_clock(read_metrics(tmp_path / "full"))


def test_refuses_to_overwrite_a_run_and_needs_a_trainer(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    with pytest.raises(FlexkitError, match="already holds a run"):
        run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    no_trainer = write(tmp_path, PIPELINE.split("[trainer]")[0])
    with pytest.raises(ConfigError, match=r"needs a \[trainer\] table"):
        run_pipeline(load_pipeline(no_trainer), run_dir=tmp_path / "other", progress=None)


def test_regression_a_folder_that_is_no_run_folder_is_refused_with_what_it_is(tmp_path: Path) -> None:
    """--resume on a compare folder (or a folder of other files) advised starting the run again there, and a new
    run wrote its files among a compare's or someone's data without a word."""
    path = write(tmp_path)
    compare_dir = tmp_path / "cmp"
    (compare_dir / "uniform" / "seed0").mkdir(parents=True)  # a compare folder before its results.json
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("{}\n")
    for folder in (compare_dir, data):
        kind = "a flexkit compare folder" if folder is compare_dir else r"not a flexkit run folder \(it holds"
        with pytest.raises(FlexkitError, match=f"{folder} is {kind}"):
            run_pipeline(load_pipeline(path), run_dir=folder, resume=True, progress=None)
        with pytest.raises(FlexkitError, match=f"{folder} is {kind}"):
            run_pipeline(load_pipeline(path), run_dir=folder, progress=None)
    (compare_dir / "results.json").write_text("{}")
    with pytest.raises(FlexkitError, match=r"is a flexkit compare folder, not a run folder: .* same flexkit compare"):
        run_pipeline(load_pipeline(path), run_dir=compare_dir, progress=None)
    (tmp_path / "empty").mkdir()  # a run killed right after creating its folder: it starts again there
    assert run_pipeline(load_pipeline(path), run_dir=tmp_path / "empty", progress=None).steps == 60


def test_regression_a_resume_with_other_run_settings_says_so_and_records_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run resumed without the --set it was started with ran on the file's [run] settings (a finished 20-step run
    trained 380 more steps) without a word, and resolved.json kept the old settings."""
    import json

    from structlog.testing import capture_logs

    from flexkit import _log

    monkeypatch.setattr(_log, "_cli_format", None)  # library use (a CLI test in this process may have set it)
    path = write(tmp_path)
    crash_run(load_pipeline(path, overrides=["run.total_steps=30"]), tmp_path / "run", 25)
    with capture_logs() as logs:
        run_pipeline(load_pipeline(path, overrides=["run.total_steps=30"]), run_dir=tmp_path / "run", resume=True,
                     progress=None)
    assert not [e for e in logs if e["event"] == "resumed_with_other_settings"]
    with capture_logs() as logs:
        result = run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", resume=True, progress=None)
    warned = [e for e in logs if e["event"] == "resumed_with_other_settings"]
    assert result.steps == 60 and len(warned) == 1
    assert warned[0]["changes"] == ["run.total_steps: 30 → 60"]
    assert json.loads((tmp_path / "run" / "resolved.json").read_text())["run"]["total_steps"] == 60


def test_simulator_needs_difficulty_in_rows(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"x": 1}\n' * 8)
    path = write(tmp_path, '[run]\nbatch_size = 4\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\n'
                           '[trainer]\ntype = "simulator"\n')
    with pytest.raises(ConfigError, match="numeric 'difficulty'"):
        run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)


def test_cli_run_prints_the_before_after_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(write(tmp_path)), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "eval accuracy" in out and "level 1" in out and "before" in out and "after" in out


def test_simulated_example_favours_adaptive_selection(tmp_path: Path) -> None:
    """The shipped example runs; on the simulator difficulty_based beats random at equal steps (seed 0)."""
    text = (EXAMPLES / "simulated.toml").read_text().replace("total_steps = 400", "total_steps = 150")
    adaptive = run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "a", progress=None)
    lines = [ln for ln in text.splitlines()
             if not ln.startswith(("feature_keys", "m = ", "target_reward", "tau"))]
    random_text = "\n".join(lines).replace('type = "difficulty_based"', 'type = "random"')
    (tmp_path / "b").mkdir()
    baseline = run_pipeline(load_pipeline(write(tmp_path / "b", random_text)), run_dir=tmp_path / "rb",
                            progress=None)
    assert adaptive.last_eval["eval_accuracy"] > baseline.last_eval["eval_accuracy"]


def test_group_filter_counts_reach_the_metrics(tmp_path: Path) -> None:
    text = PIPELINE.replace('type = "threshold_band"\nlow = 0.0\nhigh = 1.0', 'type = "zero_variance_filter"').replace(
        'type = "group_solve_rate"', 'type = "group_reward_range"')
    run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "run", progress=None)
    metrics = step_records(tmp_path / "run")
    assert all({"flexkit/sample/kept_groups", "flexkit/sample/groups_needed"} <= set(m) for m in metrics)
    assert all(m["flexkit/sample/kept_groups"] <= 16 for m in metrics)
    assert any(m["flexkit/sample/kept_groups"] < 16 for m in metrics)  # some all-equal groups were dropped
    assert all(m["flexkit/sample/kept_groups"] + m["flexkit/sample/groups_needed"] == 16 for m in metrics)


def test_resume_before_the_first_checkpoint_says_to_start_again(tmp_path: Path) -> None:
    path = write(tmp_path)
    crash_run(load_pipeline(path), tmp_path / "early", 5)  # checkpoint_every = 20: nothing saved yet
    with pytest.raises(FlexkitError, match=r"no checkpoint yet.*without --resume"):
        run_pipeline(load_pipeline(path), run_dir=tmp_path / "early", resume=True, progress=None)
    result = run_pipeline(load_pipeline(path), run_dir=tmp_path / "early", progress=None)  # same folder again
    assert result.steps == 60 and len(step_records(tmp_path / "early")) == 60


def test_regression_the_summary_names_label_groups_by_their_value() -> None:
    """Groups of a label column (a TRL run grouped by topic) were printed as "level algebra"."""
    from flexkit.run._result import RunResult, summary_lines

    evals = {"eval_accuracy": 0.5, "eval_accuracy/2": 0.25, "eval_accuracy/algebra": 0.75}
    lines = summary_lines(RunResult(run_dir=Path("r"), steps=1, first_eval=evals, last_eval=evals, last_metrics={}))
    assert any(line.startswith("level 2 ") for line in lines)
    assert any(line.startswith("algebra ") for line in lines) and not any("level algebra" in line for line in lines)


def test_regression_a_part_added_since_the_checkpoint_is_no_older_flexkit(tmp_path: Path) -> None:
    """Resuming with a [sample] stage the run did not have logged that the checkpoint, "written by an older
    flexkit", did not record the feedback operator's parameters (the component tables were paired by position,
    not by name), before the right refusal."""
    from structlog.testing import capture_logs

    plain = PIPELINE.split("[sample]")[0] + "[trainer]" + PIPELINE.split("[trainer]")[1]
    crash_run(load_pipeline(write(tmp_path, plain)), tmp_path / "run", 25)
    with capture_logs() as logs, pytest.raises(FlexkitError, match="from a different pipeline: sample: None in the"):
        run_pipeline(load_pipeline(write(tmp_path)), run_dir=tmp_path / "run", resume=True, progress=None)
    assert not [e for e in logs if "older flexkit" in e["event"]]


def test_regression_a_run_without_evaluations_says_so_in_its_summary() -> None:
    """With [run] eval_every = 0 the summary printed an empty before/after table."""
    from flexkit.run._result import RunResult, summary_lines

    lines = summary_lines(RunResult(run_dir=Path("r"), steps=3, first_eval={}, last_eval={}, last_metrics={}))
    assert "eval accuracy: not evaluated ([run] eval_every = 0)" in lines
    assert not any("before" in line for line in lines)
