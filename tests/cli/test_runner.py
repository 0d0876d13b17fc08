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
