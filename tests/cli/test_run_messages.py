"""``flexkit run`` talks like the tools people know: Ctrl-C names the last checkpoint and the exact ``--resume``
command, a resumed run says where it continues, a finished run says why it stopped, and ``-v`` /
``--log-format json`` work after the subcommand and cover every message."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flexkit.cli.main import build_parser, main, resume_command
from flexkit.run._runner import ROLLOUT_BUDGET, STEP_LIMIT, stop_reason
from tests.fixtures import ROOT

SIMULATED = str(ROOT / "examples" / "simulated.toml")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flexkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_stop_reason() -> None:
    assert stop_reason(10, 10, 500, None) == STEP_LIMIT
    assert stop_reason(10, 10, 500, 400) == STEP_LIMIT  # both at once: the step limit
    assert stop_reason(4, 10, 512, 500) == ROLLOUT_BUDGET
    assert stop_reason(4, 10, 499, 500) == STEP_LIMIT  # a resumed finished run with fewer steps recorded


def test_a_finished_run_says_why_it_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", SIMULATED, "--out", str(tmp_path / "a"), "--quiet", "--set", "run.total_steps=6"]) == 0
    assert "stopped: step limit reached (6 of 6 steps" in capsys.readouterr().out
    assert main(["run", SIMULATED, "--out", str(tmp_path / "b"), "--quiet",
                 "--set", "run.total_steps=50,run.max_rollouts=1000"]) == 0
    out = capsys.readouterr().out
    assert "stopped: rollout budget spent ([run] max_rollouts = 1,000) after step 4 of 50" in out


def test_a_resumed_run_says_where_it_continues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(tmp_path / "r")
    assert main(["run", SIMULATED, "--out", run, "--quiet", "--set", "run.total_steps=4"]) == 0
    capsys.readouterr()
    assert main(["run", SIMULATED, "--resume", run, "--quiet", "--set", "run.total_steps=6"]) == 0
    assert f"resuming {run} from its checkpoint at step 4 of 6 (1,024 rollouts so far)" in capsys.readouterr().err
    assert main(["run", SIMULATED, "--resume", run, "--quiet", "--set", "run.total_steps=6", "--log-format",
                 "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    finished = next(e for e in events if e["event"] == "run_already_finished")
    assert finished["step"] == 6 and finished["level"] == "info" and "nothing to train" in finished["message"]


def test_the_resume_command_repeats_the_options() -> None:
    setting = "run.seed=1,tasksets.0.selector={type=\"random\"}"
    args = build_parser().parse_args(["run", "my pipe.toml", "--set", setting, "--plugin", "hooks.py", "--out", "x"])
    command = resume_command(args, Path("runs/my run"))
    assert shlex.split(command) == ["flexkit", "run", "my pipe.toml", "--set",
                                    "run.seed=1,tasksets.0.selector={type=\"random\"}", "--plugin", "hooks.py",
                                    "--resume", "runs/my run"]


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT's default disposition (a suite started in the background by a shell without job
    control runs with SIGINT ignored, and the child would inherit it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_a_long_run(run: Path, stop: signal.Signals) -> tuple[int, str]:
    """Start a long simulator run into ``run``, send it ``stop`` once its first checkpoint is written; its exit
    status and stderr."""
    command = [sys.executable, "-m", "flexkit", "run", SIMULATED, "--out", str(run), "--quiet",
               "--set", "run.total_steps=100000,run.checkpoint_every=5,run.eval_every=0"]
    proc = subprocess.Popen(command, cwd=run.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run / "checkpoint" / "state.json").exists():
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(stop)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_names_the_last_checkpoint_and_the_resume_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    status, err = _stop_a_long_run(run, signal.SIGINT)
    assert status == 130, err
    assert "Traceback" not in err
    step = int(err.split("the last checkpoint is at step ", 1)[1].split()[0])
    assert step >= 5 and step % 5 == 0
    resume = err.split("continue with: ", 1)[1].splitlines()[0]
    words = shlex.split(resume)
    assert words[:3] == ["flexkit", "run", SIMULATED] and words[-2:] == ["--resume", str(run)]
    assert "run.total_steps=100000,run.checkpoint_every=5,run.eval_every=0" in words
    # the printed command works as given (with a shorter run so that it ends)
    words[words.index("run.total_steps=100000,run.checkpoint_every=5,run.eval_every=0")] = (
        f"run.total_steps={step + 2},run.checkpoint_every=5,run.eval_every=0")
    done = _cli(*words[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"resuming {run} from its checkpoint at step {step} of {step + 2}" in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to a child process")
def test_regression_sigterm_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM (a job scheduler's stop) ended a run with status 143 and no word of its checkpoint or how to go on."""
    run = tmp_path / "run"
    status, err = _stop_a_long_run(run, signal.SIGTERM)
    assert status == 143, err
    assert "Traceback" not in err
    assert "the last checkpoint is at step " in err
    assert shlex.split(err.split("continue with: ", 1)[1].splitlines()[0])[-2:] == ["--resume", str(run)]


def test_verbosity_and_log_format_after_the_subcommand(tmp_path: Path, fake_dist) -> None:
    args = build_parser().parse_args(["run", "x.toml", "-v"])
    assert args.verbose + args.sub_verbose == 1
    args = build_parser().parse_args(["-v", "run", "x.toml", "-v", "--log-format", "json"])
    assert args.verbose + args.sub_verbose == 2 and args.sub_log_format == "json"
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    site = next(p for p in sys.path if p.endswith("site"))
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {site!r}); from flexkit.cli.main import main; "
         "sys.exit(main(['plugins', '--log-format', 'json']))"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("{") for line in lines), result.stderr  # every message is JSON
    events = [json.loads(line) for line in lines]
    assert {"plugin_failed", "plugin_problem"} <= {e["event"] for e in events}
    problem = next(e for e in events if e["event"] == "plugin_problem")
    assert problem["distribution"] == "broken-dist" and problem["level"] == "warning" and "boom" in problem["error"]


def test_errors_are_json_under_log_format_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "missing.toml"), "--log-format", "json"]) == 1
    event = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert event["level"] == "error" and "missing.toml" in event["message"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nbatch_size = 0\n[[tasksets]]\nname = "t"\nstorage_type = "simulated"\nsize = 8\n')
    assert main(["validate", str(bad), "--log-format", "json"]) == 1
    assert main(["run", str(bad), "--log-format", "json"]) == 1
    event = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert event["event"] == "config_error" and any("run.batch_size" in issue for issue in event["issues"])
    assert main(["run", str(bad)]) == 1  # console: the report as it is
    assert "run.batch_size" in capsys.readouterr().err


@pytest.mark.parametrize("after_commit", [True, False])
def test_ctrl_c_while_a_checkpoint_is_written_names_the_one_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     after_commit: bool) -> None:
    """Regression: a Ctrl-C that landed in the checkpoint write after its commit (during the folder sync) named
    the checkpoint before it, so the printed resume step was one checkpoint behind the disk."""
    from flexkit.pipeline._checkpoint import load_state
    from flexkit.pipeline._pipeline import Pipeline, load_pipeline
    from flexkit.run._runner import RunInterrupted, run_pipeline

    original, calls = Pipeline.save_checkpoint, []

    def interrupted_save(self: Pipeline, directory: str, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) < 3:
            return original(self, directory, **kwargs)
        if after_commit:
            original(self, directory, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Pipeline, "save_checkpoint", interrupted_save)
    pipe = load_pipeline(SIMULATED, overrides=["run.total_steps=100,run.checkpoint_every=5,run.eval_every=0"])
    with pytest.raises(RunInterrupted) as info:
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    on_disk = load_state(tmp_path / "run" / "checkpoint")[0]["extra"]["runner"]["step"]
    assert info.value.checkpoint_step == on_disk == (15 if after_commit else 10)
