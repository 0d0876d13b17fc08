"""flexkit compare survives failing and killed runs: the others finish, the reports cover what finished and list
what failed, the command exits 1, and the same command continues the folder (reusing the finished runs)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from flexkit import FlexkitError
from flexkit.cli.main import main
from flexkit.compare import compare, parse_setting
from tests.compare.test_compare import PIPELINE

#: A trainer plugin that fails on purpose: FLEXKIT_TEST_FAIL="SEED:raise,SEED:kill" picks the seeds and how.
FLAKY_PLUGIN = '''
import os
import signal

from flexkit import hookimpl
from flexkit.run.simulator import SimulatorTrainer


class FlakyTrainer(SimulatorTrainer):
    def __init__(self, config=None, *, seed=0):
        super().__init__(config, seed=seed)
        plan = dict(item.split(":") for item in os.environ.get("FLEXKIT_TEST_FAIL", "").split(",") if item)
        self.fail = plan.get(str(seed.entropy))

    def update(self, batch, weights, *, step):
        if step == 12 and self.fail == "raise":
            raise RuntimeError("boom: the trainer failed on purpose")
        if step == 12 and self.fail == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 12 and self.fail == "interrupt":
            raise KeyboardInterrupt
        return super().update(batch, weights, step=step)


@hookimpl
def flexkit_register_trainers(register):
    register("flaky", FlakyTrainer, FlakyTrainer.Config)
'''


@pytest.fixture
def flaky(tmp_path: Path) -> tuple[Path, str]:
    """A pipeline whose trainer fails on the seeds FLEXKIT_TEST_FAIL names, and its plugin file."""
    plugin = tmp_path / "flaky_plugin.py"
    plugin.write_text(FLAKY_PLUGIN)
    path = tmp_path / "flaky.toml"
    path.write_text(PIPELINE.replace('type = "simulator"', 'type = "flaky"'))
    return path, str(plugin)


def _mtimes(out: Path, name: str, seed: int) -> float:
    return (out / name / f"seed{seed}" / "metrics.jsonl").stat().st_mtime_ns


def test_a_failing_run_does_not_discard_the_others_and_the_rerun_continues(
        flaky: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, plugin = flaky
    out = tmp_path / "out"
    argv = ["compare", str(path), "--set", "a:", "--set", "b:trainer.learning_rate=0.3", "--seeds", "2",
            "--plugin", plugin, "--out", str(out)]
    monkeypatch.setenv("FLEXKIT_TEST_FAIL", "1:raise")
    assert main(argv) == 1  # runs failed: exit 1, after the reports
    captured = capsys.readouterr()
    assert "a seed 1: FAILED (exit status 1)" in captured.err and "b seed 1: FAILED" in captured.err
    assert "2 run(s) FAILED: a seed 1, b seed 1" in captured.err
    data = json.loads((out / "results.json").read_text())
    assert [(f["setting"], f["seed"], f["exit_status"]) for f in data["failed"]] == [("a", 1, 1), ("b", 1, 1)]
    assert all("RuntimeError: boom: the trainer failed on purpose" in f["stderr_tail"] for f in data["failed"])
    for setting in data["settings"]:
        assert [r["seed"] for r in setting["runs"]] == [0] and setting["finished"] == 1
        assert setting["final"]["eval_accuracy"]["n"] == 1
    md = (out / "results.md").read_text()
    assert "Failed runs (2;" in md and "- **a** seed 1" in md and "boom" in md and "| failed |" in md
    assert "| a |" in captured.out and "| 1/2 |" in captured.out
    assert not (out / "a" / "seed1" / "setting.json").exists()
    before = {name: _mtimes(out, name, 0) for name in "ab"}

    monkeypatch.delenv("FLEXKIT_TEST_FAIL")
    assert main(argv) == 0  # the same command: the failed runs again, the finished ones reused
    err = capsys.readouterr().err
    assert "(2 finished before, reused)" in err and err.count(": reused (") == 2
    assert {name: _mtimes(out, name, 0) for name in "ab"} == before
    data = json.loads((out / "results.json").read_text())
    assert data["failed"] == [] and all([r["seed"] for r in s["runs"]] == [0, 1] for s in data["settings"])
    fresh = compare(path, [parse_setting("a:"), parse_setting("b:trainer.learning_rate=0.3")], [1],
                    tmp_path / "fresh", plugins=[plugin], progress=None, plots=False)
    for saved, res in zip(data["settings"], fresh.results, strict=True):  # as if it had never failed
        assert saved["runs"][1]["curve"] == [list(p) for p in res.runs[0].curve]
        assert saved["runs"][1]["final"] == res.runs[0].final


def test_a_killed_run_in_its_own_process_fails_alone(flaky: tuple[Path, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path, plugin = flaky
    monkeypatch.setenv("FLEXKIT_TEST_FAIL", "1:kill,2:raise")
    stream = io.StringIO()
    result = compare(path, [parse_setting("a:")], [0, 1, 2], tmp_path / "out", plugins=[plugin], jobs=3,
                     progress=stream, plots=False)
    failures = {f.seed: f for _name, f in result.failures}
    assert sorted(failures) == [1, 2]
    assert failures[1].exit_status == -9 and "killed by signal 9" in failures[1].stderr_tail
    assert failures[2].exit_status == 1 and "RuntimeError: boom" in failures[2].stderr_tail
    assert [r.seed for r in result.results[0].runs] == [0]
    assert (tmp_path / "out" / "a" / "seed2" / "stderr.log").read_text().count("boom") >= 1
    assert "a seed 1: FAILED (exit status -9)" in stream.getvalue()


def test_ctrl_c_writes_the_reports_of_what_finished(flaky: tuple[Path, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path, plugin = flaky
    out = tmp_path / "out"
    monkeypatch.setenv("FLEXKIT_TEST_FAIL", "1:interrupt")
    assert main(["compare", str(path), "--set", "a:", "--seeds", "2", "--plugin", plugin, "--out", str(out),
                 "--quiet"]) == 130
    data = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in data["settings"][0]["runs"]] == [0] and data["failed"] == []
    assert "interrupted" in capsys.readouterr().err
    monkeypatch.delenv("FLEXKIT_TEST_FAIL")
    assert main(["compare", str(path), "--set", "a:", "--seeds", "2", "--plugin", plugin, "--out", str(out),
                 "--quiet"]) == 0
    data = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in data["settings"][0]["runs"]] == [0, 1]


def test_an_interrupted_comparison_continues(tmp_path: Path) -> None:
    """A comparison killed mid-run leaves a run folder without setting.json: the same call runs it again from
    the start and reuses the others; a folder of another setting is refused."""
    path = tmp_path / "sim.toml"
    path.write_text(PIPELINE)
    settings = [parse_setting("a:")]
    first = compare(path, settings, [0, 1], tmp_path / "out", progress=None, plots=False)
    seed1 = tmp_path / "out" / "a" / "seed1"
    (seed1 / "setting.json").unlink()  # as if killed before the run finished
    lines = (seed1 / "metrics.jsonl").read_text().splitlines()
    (seed1 / "metrics.jsonl").write_text("\n".join(lines[:5]) + "\n")
    kept = _mtimes(tmp_path / "out", "a", 0)
    again = compare(path, settings, [0, 1], tmp_path / "out", progress=None, plots=False)
    assert _mtimes(tmp_path / "out", "a", 0) == kept
    assert [(r.seed, r.curve, r.final) for r in again.results[0].runs] == \
        [(r.seed, r.curve, r.final) for r in first.results[0].runs]
    with pytest.raises(FlexkitError, match="already holds a run of another pipeline, setting or seed"):
        compare(path, [parse_setting("a:trainer.learning_rate=0.3")], [0], tmp_path / "out", progress=None)
    (seed1 / "setting.json").unlink()
    (seed1 / "notes.txt").write_text("mine")
    with pytest.raises(FlexkitError, match="is not an unfinished run of this comparison"):
        compare(path, settings, [0, 1], tmp_path / "out", progress=None)
    assert (seed1 / "notes.txt").read_text() == "mine"  # nothing of the user's is removed
    other = tmp_path / "out" / "b"
    other.mkdir()
    (other / "seed0").write_text("a file")
    with pytest.raises(FlexkitError, match=r"a file, not a folder"):
        compare(path, [parse_setting("b:")], [0], tmp_path / "out", progress=None)


@pytest.mark.parametrize(("edit", "damage"), [
    ({"last_eval": None}, "last_eval is not a table of finite numbers"),
    ({"last_eval": {"eval_accuracy": "high"}}, "last_eval is not a table of finite numbers"),
    ({"last_eval": {"eval_accuracy": float("nan")}}, "last_eval is not a table of finite numbers"),
    ({"first_eval": [0.1]}, "first_eval is not a table of finite numbers"),
    ({"seconds": "ten"}, "seconds is not a finite number"),
    ({"seconds": float("inf")}, "seconds is not a finite number"),
])
def test_a_damaged_setting_file_is_refused_naming_it(tmp_path: Path, edit: dict, damage: str) -> None:
    """A finished run whose setting.json was edited into nonsense is refused with what is wrong and the mend
    (it raised TypeError when the folder was reused), and the run folder is left as it is."""
    path = tmp_path / "sim.toml"
    path.write_text(PIPELINE)
    compare(path, [parse_setting("a:")], [0], tmp_path / "out", progress=None, plots=False)
    setting_file = tmp_path / "out" / "a" / "seed0" / "setting.json"
    setting_file.write_text(json.dumps({**json.loads(setting_file.read_text()), **edit}))
    before = setting_file.read_text()
    with pytest.raises(FlexkitError, match=re.escape(f"is damaged ({damage}); delete")):
        compare(path, [parse_setting("a:")], [0], tmp_path / "out", progress=None, plots=False)
    assert setting_file.read_text() == before


_EVAL_PLUGIN = '''
import flexkit
from flexkit.run.simulator import SimulatorConfig, SimulatorTrainer

MODE = {mode!r}


class OddEvaluation(SimulatorTrainer):
    def evaluate(self, *, step):
        metrics = dict(super().evaluate(step=step))
        if MODE == "renamed":
            return {{"val/acc": metrics["eval_accuracy"]}}
        if MODE == "nan":
            metrics["eval_accuracy"] = float("nan")
        if MODE == "none_level":
            metrics["eval_accuracy/1"] = None
        return metrics


@flexkit.hookimpl
def flexkit_register_trainers(register):
    register("odd_eval", OddEvaluation, SimulatorConfig)
'''


def _odd_pipeline(tmp_path: Path, mode: str) -> Path:
    (tmp_path / "odd_eval.py").write_text(_EVAL_PLUGIN.format(mode=mode))
    (tmp_path / "p.toml").write_text(
        'plugins = ["./odd_eval.py"]\n\n[run]\nbatch_size = 8\ntotal_steps = 4\neval_every = 2\n\n'
        '[[tasksets]]\nname = "g"\nstorage_type = "simulated"\nsize = 80\nlevels = [1, 2]\n\n'
        '[trainer]\ntype = "odd_eval"\n')
    return tmp_path / "p.toml"


@pytest.mark.parametrize(("mode", "got"), [("renamed", "no such key (keys: ['val/acc'])"), ("nan", "nan")])
def test_regression_a_trainer_without_a_finite_eval_accuracy_fails_its_runs_with_a_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, got: str) -> None:
    """Every run used to finish, then the report crashed (KeyError 'eval_accuracy'), or reported NaN and called
    its own runs damaged on the next invocation."""
    path = _odd_pipeline(tmp_path, mode)
    out = tmp_path / "out"
    assert main(["compare", str(path), "--seeds", "0,1", "--out", str(out)]) == 1
    report = (out / "results.md").read_text()
    assert f"the run's first evaluation has {got}" in report and "2 run(s) FAILED" in capsys.readouterr().err
    assert len(json.loads((out / "results.json").read_text())["settings"][0]["failed"]) == 2


def test_regression_a_level_accuracy_of_none_is_left_out_not_a_crash(tmp_path: Path) -> None:
    path = _odd_pipeline(tmp_path, "none_level")
    out = tmp_path / "out"
    assert main(["compare", str(path), "--seeds", "0,1", "--out", str(out)]) == 0
    setting = json.loads((out / "results.json").read_text())["settings"][0]
    assert "eval_accuracy/1" not in setting["final"] and "eval_accuracy/2" in setting["final"]
    assert main(["compare", str(path), "--seeds", "0,1", "--out", str(out)]) == 0  # its runs reused, not "damaged"
