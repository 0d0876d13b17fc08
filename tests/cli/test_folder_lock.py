"""One command per folder: a second ``flexkit run`` on a run folder, or a second ``flexkit compare`` on a
comparison's folder, is refused at once naming the holder's pid; the lock of a killed process is taken over.
Each is checked with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flexkit.errors import FlexkitError
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._lock import LOCK_FILE, hold_folder
from flexkit.run._runner import run_pipeline
from tests.cli.test_runner import PIPELINE, step_records, write
from tests.fixtures import read_metrics

#: A run that goes on until it is killed (one checkpoint, at its end: a kill leaves no checkpoint).
LONG = PIPELINE.replace("total_steps = 60", "total_steps = 1000000").replace("checkpoint_every = 20",
                                                                            "checkpoint_every = 1000000")


def _flexkit(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "flexkit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]


def _wait_for_holder(folder: Path, proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    """Wait until ``proc`` holds ``folder``'s lock (its pid in the lock file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if (folder / LOCK_FILE).read_text().split() == [str(proc.pid)]:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{proc.pid} did not take the lock of {folder}")


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


def test_regression_a_second_run_on_a_folder_is_refused_naming_the_first_and_a_killed_ones_lock_is_taken(
        tmp_path: Path) -> None:
    long_path = write(tmp_path, LONG)
    run_dir = tmp_path / "run"
    first = _flexkit("run", str(long_path), "--out", str(run_dir), "--quiet")
    try:
        _wait_for_holder(run_dir, first)
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "flexkit", "run", str(long_path), "--out", str(run_dir),
                                 "--quiet"], capture_output=True, text=True, timeout=300)
        assert second.returncode == 1, second
        assert f"pid {first.pid}" in second.stderr and "in use" in second.stderr, second.stderr
        assert time.monotonic() - started < 120  # refused at once, not after a run
        assert first.poll() is None  # the first run goes on
    finally:
        _kill(first)  # SIGKILL: the kernel drops its lock; the file still names it
    assert (run_dir / LOCK_FILE).read_text().split() == [str(first.pid)]
    again = subprocess.run([sys.executable, "-m", "flexkit", "run", str(long_path), "--out", str(run_dir),
                            "--quiet", "--set", "run.total_steps=20"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert [m["step"] for m in read_metrics(run_dir)] == list(range(-1, 20))  # one run's records, in order
    assert (run_dir / LOCK_FILE).read_text() == ""  # released at its end


def test_regression_a_run_on_a_folder_another_process_holds_is_refused_in_process(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom flexkit.run._lock import hold_folder\n"
         "with hold_folder(Path(sys.argv[1]), 'test'):\n    print('held', flush=True)\n    time.sleep(600)\n",
         str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(FlexkitError, match=f"is in use: .*pid {holder.pid}"):
            run_pipeline(load_pipeline(path), run_dir=run_dir, progress=None)
        assert not (run_dir / "metrics.jsonl").exists()  # refused before it wrote anything
    finally:
        holder.kill()
        holder.wait()
    run_pipeline(load_pipeline(path), run_dir=run_dir, progress=None)  # the lock went with its holder
    assert len(step_records(run_dir)) == 60


def test_the_lock_is_released_after_a_run_and_after_a_failed_one(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_dir = tmp_path / "run"
    run_pipeline(load_pipeline(path), run_dir=run_dir, progress=None)
    with pytest.raises(FlexkitError, match="already holds a run"):  # refused by the folder, not by a lock
        run_pipeline(load_pipeline(path), run_dir=run_dir, progress=None)
    with hold_folder(run_dir, "test"):  # nothing holds it now
        assert (run_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_regression_a_second_compare_on_a_folder_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    from tests.compare.test_compare import PIPELINE as COMPARED

    path = tmp_path / "compared.toml"
    path.write_text(COMPARED.replace("total_steps = 30", "total_steps = 1000000")
                    .replace("checkpoint_every = 30", "checkpoint_every = 1000000"))
    out = tmp_path / "out"
    first = _flexkit("compare", str(path), "--set", "a:", "--seeds", "1", "--out", str(out), "--quiet")
    try:
        _wait_for_holder(out, first)
        run_dir = out / "a" / "seed0"
        deadline = time.monotonic() + 120
        while not (run_dir / "metrics.jsonl").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (run_dir / "metrics.jsonl").is_file()  # its run is under way
        second = subprocess.run([sys.executable, "-m", "flexkit", "compare", str(path), "--set", "a:", "--seeds", "1",
                                 "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=300)
        assert second.returncode == 1, second
        assert f"pid {first.pid}" in second.stderr, second.stderr
        assert (run_dir / "metrics.jsonl").is_file() and first.poll() is None  # the first one's run is kept
    finally:
        _kill(first)
