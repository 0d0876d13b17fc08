"""Run folders left by crashes, kills and full or read-only disks continue from the command line, and the
command line reports every such problem as a message, never as a traceback."""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flexkit.cli.main import main
from flexkit.pipeline._checkpoint import STATE_FILE, load_state, save_state
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from tests.checkpoint.test_kill_checkpoint import crash_before, stale_files
from tests.cli.test_runner import PIPELINE, read_metrics, step_records, write
from tests.fixtures import ROOT, Crash, CrashAt, without_clock_text


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An uninterrupted run of the test pipeline (60 steps, checkpoints every 20) and the summary it printed."""
    root = tmp_path_factory.mktemp("reference")
    path = write(root)
    out = io.StringIO()
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        assert main(["run", str(path), "--out", str(root / "run"), "--quiet"]) == 0
    finally:
        sys.stdout = sys_stdout
    return root / "run", out.getvalue()


def _metrics(run_dir: Path) -> str:
    """The run's ``metrics.jsonl`` as written, but for its wall clock (``flexkit/run/seconds``)."""
    return without_clock_text((run_dir / "metrics.jsonl").read_text())


def _summary(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("run folder:")]


def _crash_at(path: Path, run_dir: Path, step: int) -> None:
    """Run in-process until the batch of ``step`` is handed out, then crash (as a killed process would stop)."""
    pipe = load_pipeline(path)
    crasher = CrashAt(step)
    pipe.plugins.pm.register(crasher)
    try:
        with pytest.raises(Crash, match="injected crash"):
            run_pipeline(pipe, run_dir=run_dir, progress=None)
    finally:
        pipe.plugins.pm.unregister(crasher)


# -- item: a kill in the first checkpoint save ----------------------------------------------------------------


def test_regression_a_crash_inside_the_first_save_leaves_a_folder_the_command_line_continues(
    tmp_path: Path, reference: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a kill during the FIRST checkpoint save left ``checkpoint/`` without ``state.json``; then
    ``--resume`` said "no checkpoint yet" and ``--out`` said "already holds a run", so only deleting files by
    hand continued the run. Now ``--out`` on that folder starts again (the leftovers go with the next save)."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    crash_before("os.replace(tmp, root / STATE_FILE)",
                 lambda: run_pipeline(load_pipeline(path), run_dir=run_dir, progress=None))
    assert not (run_dir / "checkpoint" / STATE_FILE).exists() and stale_files(run_dir / "checkpoint")
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 1
    assert "no checkpoint yet" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    assert _metrics(run_dir) == _metrics(reference[0])
    assert _summary(capsys.readouterr().out) == _summary(reference[1])
    assert not stale_files(run_dir / "checkpoint")


def test_a_folder_without_any_file_yet_says_how_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path)
    assert main(["run", str(path), "--resume", str(tmp_path / "missing")]) == 1
    assert "no run folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()  # a kill right after the folder was created
    assert main(["run", str(path), "--resume", str(tmp_path / "empty")]) == 1
    assert "no checkpoint yet" in capsys.readouterr().err


# -- item: metrics, finished runs, the progress display, a shortened schedule ------------------------------------


def test_regression_a_torn_last_metrics_line_does_not_stop_resume(tmp_path: Path,
                                                                  reference: tuple[Path, str]) -> None:
    """Regression: a torn last line of ``metrics.jsonl`` (a kill or a full disk in mid-write) made ``--resume``
    crash with a ``JSONDecodeError`` traceback. It is dropped (it is past the checkpoint anyway)."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    _crash_at(path, run_dir, 45)
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write('{"step": 45, "reward_me')
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    assert _metrics(run_dir) == _metrics(reference[0])


def test_a_damaged_metrics_line_before_the_end_is_a_clear_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path, run_dir = write(tmp_path), tmp_path / "run"
    _crash_at(path, run_dir, 45)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[2] = "{garbage\n"
    (run_dir / "metrics.jsonl").write_text("".join(lines))
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "metrics.jsonl line 3 is damaged" in err and "Traceback" not in err


def test_regression_resuming_a_finished_run_prints_its_real_summary(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: ``--resume`` on a finished run printed before = after (the last evaluation was not restored)
    and no rollout count. It now prints what the run printed, and changes nothing."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    first = capsys.readouterr().out
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    again = capsys.readouterr().out
    assert _summary(again) == _summary(first) and "rollouts generated" in again
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics
    all_levels = next(line for line in again.splitlines() if line.startswith("all levels")).split()
    assert all_levels[2] != all_levels[3]  # before != after


def test_regression_a_resumed_progress_display_shows_the_last_evaluation(tmp_path: Path) -> None:
    """Regression: after ``--resume`` the progress line showed the run's first evaluation until the next one."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    _crash_at(path, run_dir, 45)  # checkpoint at 40; evaluations after steps 10, 20, 30, 40
    expected = next(m for m in read_metrics(run_dir) if m["step"] == 39)["flexkit/eval/accuracy"]
    shown = io.StringIO()
    run_pipeline(load_pipeline(path), run_dir=run_dir, resume=True, progress=shown)
    first_line = shown.getvalue().splitlines()[0]
    assert "step 42/60" in first_line and f"eval {expected:.3f}" in first_line, first_line


def test_regression_total_steps_below_the_checkpoint_is_a_clear_error(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: resuming with ``total_steps`` below the checkpoint's step exited 0 silently."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    _crash_at(path, run_dir, 45)
    (tmp_path / "short").mkdir()
    shorter = write(tmp_path / "short", PIPELINE.replace("total_steps = 60", "total_steps = 30"))
    assert main(["run", str(shorter), "--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "is at step 40, past the 30 steps this pipeline now runs" in err
    assert len(step_records(run_dir)) == 45  # nothing touched


def test_a_run_finished_by_its_rollout_budget_resumes_to_the_same_end(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A run that stopped on ``[run] max_rollouts`` is finished: ``--resume`` adds no step."""
    path = write(tmp_path, PIPELINE.replace("checkpoint_every = 20", "checkpoint_every = 20\nmax_rollouts = 600"))
    run_dir = tmp_path / "run"
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    first, metrics = capsys.readouterr().out, (run_dir / "metrics.jsonl").read_bytes()
    assert len(step_records(run_dir)) < 60
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics
    assert _summary(capsys.readouterr().out) == _summary(first)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda extra: extra.pop("trainer"), "extra.trainer: missing"),
    (lambda extra: extra["runner"].__setitem__("step", 30), "extra.runner.step: 30, but the scheduler has handed "
                                                            "out 40 batches"),
    (lambda extra: extra["runner"].__setitem__("rollouts", -5), "extra.runner.rollouts: expected a count"),
    (lambda extra: extra["runner"].__setitem__("last_eval", "high"), "extra.runner.last_eval"),
    (lambda extra: extra["trainer"].__setitem__("skill", "high"), "the state of trainer 'simulator' does not fit"),
])
def test_a_malformed_runner_or_trainer_state_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        edit: object, match: str) -> None:
    path, run_dir = write(tmp_path), tmp_path / "run"
    _crash_at(path, run_dir, 45)
    state, meta = load_state(run_dir / "checkpoint")
    edit(state["extra"])  # type: ignore[operator]
    save_state(run_dir / "checkpoint", state, meta=meta)
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


# -- item: full and read-only disks ---------------------------------------------------------------------------


def test_regression_a_full_disk_during_a_checkpoint_keeps_the_old_one(
    tmp_path: Path, reference: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a write error in a checkpoint save (a full disk) came out of the CLI as a raw ``OSError``
    traceback and left the new partial files. It is a one-line error now; the previous checkpoint stays as it
    was, the partial files are removed, and ``--resume`` continues to the exact end once there is room."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    real, calls = os.fsync, []

    def full_disk(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 5:  # the second save (step 40): its arrays file cannot be flushed to disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "the previous checkpoint is kept" in err and "Traceback" not in err
    assert not stale_files(run_dir / "checkpoint")
    assert load_state(run_dir / "checkpoint")[0]["extra"]["runner"]["step"] == 20
    monkeypatch.undo()
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    assert _metrics(run_dir) == _metrics(reference[0])


def test_regression_a_read_only_disk_is_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a read-only file system gave a raw ``OSError`` traceback (creating the run folder, or
    replacing ``state.json``)."""
    import flexkit.pipeline._checkpoint as ckpt_module

    path = write(tmp_path)

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(ckpt_module.os, "replace", read_only)
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Read-only file system; nothing was saved" in err and "Traceback" not in err
    monkeypatch.undo()
    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["run", str(path), "--out", str(tmp_path / "other"), "--quiet"]) == 1
    assert "cannot write the run folder" in capsys.readouterr().err


def test_a_run_folder_under_a_file_is_a_message_from_the_real_command(tmp_path: Path) -> None:
    path = write(tmp_path)
    (tmp_path / "file").write_text("")
    result = subprocess.run([sys.executable, "-m", "flexkit", "run", str(path), "--out", str(tmp_path / "file" / "r"),
                             "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot write the run folder" in result.stderr and "Not a directory" in result.stderr


def _file_size_limit(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")
def test_a_file_size_limit_mid_run_is_a_message_and_the_run_resumes_exactly(tmp_path: Path,
                                                                          reference: tuple[Path, str]) -> None:
    """A real write failure (``RLIMIT_FSIZE``: ``File too large``, as a full disk fails a write) in the middle
    of ``flexkit run``: a one-line error, and ``--resume`` then ends with the uninterrupted run's metrics."""
    path, run_dir = write(tmp_path), tmp_path / "run"
    lines = (reference[0] / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    limit = len(b"".join(lines[:30]))  # metrics.jsonl fails around step 30, past the first checkpoint
    result = subprocess.run([sys.executable, "-m", "flexkit", "run", str(path), "--out", str(run_dir), "--quiet"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            preexec_fn=lambda: _file_size_limit(limit))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "File too large" in result.stderr and "--resume" in result.stderr
    assert load_state(run_dir / "checkpoint")[0]["extra"]["runner"]["step"] == 20
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    assert _metrics(run_dir) == _metrics(reference[0])
    assert json.loads(lines[-1])["step"] == 59


def test_regression_resuming_a_finished_run_removes_what_its_interrupted_last_save_left(tmp_path: Path) -> None:
    """A run killed inside its last save, after ``state.json`` was replaced and before the old arrays file was
    removed, finished there; its ``--resume`` saves nothing, so the leftover stayed (seen in the kill campaign)."""
    path = write(tmp_path)
    run_dir = tmp_path / "r"
    assert main(["run", str(path), "--out", str(run_dir), "--quiet"]) == 0
    ckpt = run_dir / "checkpoint"
    current = json.loads((ckpt / STATE_FILE).read_text())["arrays"]
    (ckpt / "arrays-0123456789abcdef0123456789abcdef.npz").write_bytes((ckpt / current).read_bytes())
    (ckpt / f".{STATE_FILE}.0123.tmp").write_text("{}")
    assert stale_files(ckpt)
    assert main(["run", str(path), "--resume", str(run_dir), "--quiet"]) == 0
    assert not stale_files(ckpt)
    assert load_state(ckpt)[0]  # the committed checkpoint is whole
