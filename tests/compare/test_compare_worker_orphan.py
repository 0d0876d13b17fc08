"""A compare worker ends when its parent is gone (regression: a killed ``compare`` left its runs going on, and
running the command again cleared and reran those run folders while the orphans still wrote into them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flexkit.compare._worker import ORPHANED_EXIT
from flexkit.config._loader import read_toml_file
from tests.fixtures import ROOT

PARENT = """
import subprocess, sys, time
proc = subprocess.Popen([sys.executable, "-m", "flexkit.compare._worker", sys.argv[1]])
print(proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and re-parenting")
def test_a_worker_whose_compare_was_killed_ends_within_seconds(tmp_path: Path) -> None:
    data = read_toml_file(ROOT / "examples" / "simulated.toml")
    data["run"].update(total_steps=10**6, eval_every=0, checkpoint_every=0)
    job = {"index": 0, "seed": 0, "data": data, "base_dir": str(ROOT / "examples"), "source": "simulated.toml",
           "plugins": [], "run_dir": str(tmp_path / "run"), "result": str(tmp_path / "result.json"), "threads": 1}
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "job.json")], stdout=subprocess.PIPE,
                              text=True, env=env)
    worker = int(parent.stdout.readline())  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "metrics.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "run" / "metrics.jsonl").exists()  # the run is under way
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break  # gone (reaped by init)
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker went on after its parent was killed")
    assert not (tmp_path / "result.json").exists()
    assert ORPHANED_EXIT not in (0, 1)


def test_regression_the_job_files_of_a_killed_compare_are_removed_by_the_next(tmp_path: Path) -> None:
    """A compare with --jobs above 1 killed outright (kill -9) left its temporary .jobs-* folder in the output
    folder for good; the next comparison there (which holds the folder's lock) removes it."""
    from flexkit.compare._execution import JOBS_PREFIX, run_in_processes

    stale = tmp_path / f"{JOBS_PREFIX}killed"
    stale.mkdir()
    (stale / "0-0.job.json").write_text("{}")
    keep = tmp_path / "jobs-notes"  # not a job folder: left alone
    keep.mkdir()
    assert list(run_in_processes([], 2, tmp_path)) == []
    assert not list(tmp_path.glob(JOBS_PREFIX + "*"))
    assert keep.is_dir()
