"""How ``flexkit compare`` runs its (setting, seed) jobs: one after another in this process, or several at a time,
each in a process of its own (:mod:`flexkit.compare._worker`). Either way a run that fails becomes a
:class:`~flexkit.compare._results.RunFailure` (exit status and the end of stderr) and the others go on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from flexkit.compare._results import RunFailure
from flexkit.errors import ConfigError, FlexkitError

__all__ = ["JOBS_PREFIX", "Job", "JobResult", "failure_from_exception", "remove_stale_job_folders", "run_in_order",
           "run_in_processes", "tail"]

#: The name prefix of the temporary folder a comparison with ``--jobs`` above 1 keeps its job files in.
JOBS_PREFIX = ".jobs-"

#: Lines of a failed run's stderr that the reports keep.
TAIL_LINES = 20
#: The file a run in a process of its own writes its stderr to, in its run folder.
STDERR_FILE = "stderr.log"


@attrs.frozen(kw_only=True)
class Job:
    """One (setting, seed) run: the index of its setting, its seed, and what a worker needs to run it."""

    index: int
    seed: int
    data: dict[str, Any]
    base_dir: str
    source: str
    plugins: list[str]
    run_dir: str


@attrs.frozen
class JobResult:
    """A finished run's first and last evaluations and wall seconds."""

    first_eval: dict[str, float]
    last_eval: dict[str, float]
    seconds: float


def run_in_order(jobs: Sequence[Job]) -> Iterator[tuple[Job, JobResult | RunFailure]]:
    """Run ``jobs`` one after another in this process; an error fails its run only (exit status 1, as
    ``flexkit run`` ends). Ctrl-C is not an error of a run: it goes on."""
    from flexkit.compare._worker import run_job

    for job in jobs:
        try:
            result = run_job(attrs.asdict(job))
        except Exception as exc:  # any error of one run is that run's failure
            yield job, failure_from_exception(job.seed, Path(job.run_dir), exc)
        else:
            yield job, JobResult(result["first_eval"], result["last_eval"], result["seconds"])


def run_in_processes(jobs: Sequence[Job], workers: int, out_dir: Path,
                     poll: float = 0.05) -> Iterator[tuple[Job, JobResult | RunFailure]]:
    """Run ``jobs``, ``workers`` at a time, each in a process of its own with ``cpu_count // workers`` threads;
    yield each as it ends. A process that exits non-zero or is killed fails its run only (its exit status:
    negative for a signal, and the end of its stderr, kept in the run folder's ``stderr.log``). On Ctrl-C the
    running processes are stopped before the interrupt goes on."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    env = {**os.environ, **{name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                             "OPENBLAS_NUM_THREADS")}}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the modules this process imports
    pending = list(jobs)
    running: list[tuple[Job, subprocess.Popen[bytes], Path, Path]] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_job_folders(out_dir)
    with tempfile.TemporaryDirectory(prefix=JOBS_PREFIX, dir=out_dir) as tmp:
        try:
            while pending or running:
                while pending and len(running) < workers:
                    job = pending.pop(0)
                    running.append(_start(job, Path(tmp), env, threads))
                time.sleep(poll)
                for entry in [e for e in running if e[1].poll() is not None]:
                    running.remove(entry)
                    yield entry[0], _ended(*entry)
        finally:  # Ctrl-C, or the caller stopped: no run outlives the comparison
            for _job, proc, _result, _stderr in running:
                proc.terminate()
            for _job, proc, _result, _stderr in running:
                proc.wait()


def remove_stale_job_folders(out_dir: Path) -> None:
    """Remove the job files a comparison killed outright (``kill -9``: its temporary folder outlived it) left in
    ``out_dir``. Safe only while the caller holds the folder (``flexkit compare``'s lock: no other comparison runs
    there)."""
    for stale in out_dir.glob(JOBS_PREFIX + "*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


def _start(job: Job, tmp: Path, env: dict[str, str], threads: int) -> tuple[Job, subprocess.Popen[bytes], Path, Path]:
    """Start ``job``'s worker process; its stderr goes to the run folder's ``stderr.log``."""
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"{job.index}-{job.seed}"
    job_file, result_file = tmp / f"{name}.job.json", tmp / f"{name}.result.json"
    job_file.write_text(json.dumps({**attrs.asdict(job), "result": str(result_file), "threads": threads},
                                   default=str), encoding="utf-8")
    stderr = run_dir / STDERR_FILE
    with stderr.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "flexkit.compare._worker", str(job_file)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    return job, proc, result_file, stderr


def _ended(job: Job, proc: subprocess.Popen[bytes], result_file: Path, stderr: Path) -> JobResult | RunFailure:
    """What the ended process of ``job`` left: its result, or its failure."""
    if proc.returncode == 0 and result_file.is_file():
        result = json.loads(result_file.read_text(encoding="utf-8"))
        return JobResult(result["first_eval"], result["last_eval"], result["seconds"])
    try:
        text = stderr.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    if proc.returncode is not None and proc.returncode < 0:
        text += f"\n(killed by signal {-proc.returncode})"
    return RunFailure(seed=job.seed, run_dir=Path(job.run_dir), exit_status=proc.returncode,
                      stderr_tail=tail(text) or "(no output on stderr)")


def failure_from_exception(seed: int, run_dir: Path, exc: BaseException) -> RunFailure:
    """A run that raised ``exc`` in this process: exit status 1 (as ``flexkit run`` would end) and the error's
    message (a flexkit error) or the end of its traceback (any other)."""
    if isinstance(exc, ConfigError):
        text = exc.report()
    elif isinstance(exc, FlexkitError):
        text = f"error: {exc}"
    else:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return RunFailure(seed=seed, run_dir=run_dir, exit_status=1, stderr_tail=tail(text))


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])
