"""Fault injection on the command line: SIGKILL ``flexkit run`` inside its FIRST checkpoint save and later ones.

A child process (the "zygote", started with ``sys.executable``) imports flexkit and torch once and forks one
worker per command; a worker runs ``flexkit.cli.main.main(["run", ...])`` with its stdout and stderr in files, as
the ``flexkit`` command does. A worker can be told to SIGKILL itself at the ``n``-th Python line executed
inside its ``k``-th call of ``Pipeline.save_checkpoint`` (state dicts, fingerprint with the tasksets' content
digests, encoding, the round-trip check, file writes, renames, cleanup); ``n`` is drawn uniformly from the
number of lines such a save executes (measured on the uninterrupted run). Some kills instead come at a random
wall-clock moment from the parent. A kill is a real SIGKILL: no ``finally`` clause or exit handler runs.

After every kill the folder is continued the way a user (or a job script) would, from the command line only:
``flexkit run FILE --resume DIR``, and when that says the run has no checkpoint yet, ``flexkit run FILE --out
DIR``; those commands can be killed in turn. Every folder must be continuable at every point, and once let
run to the end it must hold exactly the uninterrupted run's ``metrics.jsonl`` (byte for byte, but for the wall
clock, ``flexkit/run/seconds``), print the same summary and hold the same final checkpoint state.
``FLEXKIT_SLOW=1`` runs a 300-kill campaign (``-m slow``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from flexkit.pipeline._checkpoint import STATE_FILE, load_state
from flexkit.testing import without_clock_text
from tests.checkpoint.kill_helpers import (
    CampaignReport,
    ZygoteProcess,
    canonical,
    needs_fork,
    serve_forks,
    stale_files,
)

KILLS_PER_FOLDER = 8

PIPELINE = """
[run]
batch_size = 8
seed = 5
total_steps = 24
eval_every = 6
checkpoint_every = 4

[[tasksets]]
name = "easy"
storage_type = "simulated"
size = 200
levels = [1, 2]

[[tasksets]]
name = "hard"
path = "hard.jsonl"

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


def write_pipeline(folder: Path) -> Path:
    """The pipeline file and its JSONL taskset (a simulated taskset beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with (folder / "hard.jsonl").open("w") as f:
        for i in range(300):
            f.write(json.dumps({"id": i, "difficulty": float(rng.uniform(1, 4)),
                                "weak_pass_rate": float(rng.uniform(0, 0.5)),
                                "strong_pass_rate": float(rng.uniform(0.5, 1))}) + "\n")
    path = folder / "pipeline.toml"
    path.write_text(PIPELINE)
    return path


# -- the child side -------------------------------------------------------------------------------------------


def install_kill_hook(kill_save: int, kill_line: int, count_to: str | None) -> None:
    """SIGKILL this process at the ``kill_line``-th Python line executed inside its ``kill_save``-th call of
    ``Pipeline.save_checkpoint`` (0: never); with ``count_to``, append each save's line count to that file."""
    from flexkit.pipeline._pipeline import Pipeline

    original = Pipeline.save_checkpoint
    saves = 0

    def save_checkpoint(self: Any, directory: Any, *, extra: Any = None) -> Any:
        nonlocal saves
        saves += 1
        if saves != kill_save and count_to is None:
            return original(self, directory, extra=extra)
        lines = 0

        def tracer(frame: Any, event: str, _arg: Any) -> Any:
            nonlocal lines
            if event == "line":
                lines += 1
                if saves == kill_save and lines == kill_line:
                    os.kill(os.getpid(), signal.SIGKILL)
            return tracer

        sys.settrace(tracer)
        try:
            return original(self, directory, extra=extra)
        finally:
            sys.settrace(None)
            if count_to is not None:
                with open(count_to, "a") as f:
                    f.write(f"{lines}\n")

    Pipeline.save_checkpoint = save_checkpoint  # type: ignore[method-assign]


def _worker(job: dict[str, Any]) -> int:
    import torch

    torch.set_num_threads(1)
    for fd, name in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the fds above
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    install_kill_hook(job["kill_save"], job["kill_line"], job.get("count_to"))
    from flexkit.cli.main import main

    os.chdir(job["cwd"])
    code = main(job["argv"])
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _child(payload: str) -> int:
    """Run the job ``payload`` (JSON); an exception is appended to the job's stderr file, exit status 70."""
    job = json.loads(payload)
    try:
        return _worker(job)
    except BaseException as exc:  # a traceback is a failure of the command line: report it
        with open(job["stderr"], "a") as f:
            f.write(f"Traceback-like failure: {type(exc).__name__}: {exc}\n")
        return 70


def zygote() -> None:
    """Import everything once, then fork a worker for each ``run <json>`` line on stdin; report ``pid <pid>``
    when it starts and ``reaped <pid> <status>`` when it ends."""
    import torch  # noqa: F401 - imported before forking so workers start fast

    import flexkit.cli.main
    import flexkit.run.simulator  # noqa: F401
    from flexkit.plugins._manager import get_plugins

    get_plugins()
    serve_forks(_child, announce_pid=True)


# -- the parent side ------------------------------------------------------------------------------------------


@attrs.define
class Outcome:
    """How one command ended: killed, or its exit code with its output."""

    killed: bool
    code: int | None
    stdout: str
    stderr: str
    seconds: float = 0.0


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@attrs.define
class Zygote(ZygoteProcess):
    """The zygote of :func:`zygote`, running its commands in ``workdir``."""

    workdir: Path
    jobs: int = 0

    @classmethod
    def start(cls, workdir: Path) -> Zygote:
        """Start it; its stderr goes to ``workdir/zygote.err``."""
        return cls.spawn("tests.checkpoint.test_kill_run", [], workdir / "zygote.err", workdir=workdir)

    def run(self, argv: list[str], *, kill_save: int = 0, kill_line: int = 0, kill_after: float | None = None,
            count_to: Path | None = None) -> Outcome:
        """Run ``flexkit <argv>`` in a fresh worker (killed as asked) and wait for it."""
        self.jobs += 1
        out, err = self.workdir / f"job{self.jobs}.out", self.workdir / f"job{self.jobs}.err"
        job = {"argv": argv, "stdout": str(out), "stderr": str(err), "cwd": str(self.workdir),
               "kill_save": kill_save, "kill_line": kill_line, "count_to": str(count_to) if count_to else None}
        self.send(f"run {json.dumps(job)}")
        first = self.lines.next()
        started = time.monotonic()
        assert first.startswith("pid "), first
        pid = int(first.split()[1])
        if kill_after is not None:
            time.sleep(kill_after)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reaped = self.lines.next(timeout=120.0)
        assert reaped.startswith(f"reaped {pid} "), reaped
        status = int(reaped.split()[2])
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        return Outcome(killed, code, _text(out), _text(err), time.monotonic() - started)


@attrs.define
class RunKillReport(CampaignReport):
    """What a campaign did and found."""

    kills: int = 0
    first_save_kills: int = 0
    later_save_kills: int = 0
    timed_kills: int = 0
    no_checkpoint_restarts: int = 0
    resumes: int = 0
    finished_folders: int = 0
    identical_folders: int = 0
    not_continuable: int = 0
    max_stale: int = 0
    where: Counter[str] = attrs.field(factory=Counter)


def _summary_body(stdout: str) -> list[str]:
    """The printed summary without its first line (the folder, which differs between folders)."""
    return [line for line in stdout.splitlines() if not line.startswith("run folder:")]


def _final_state(run_dir: Path) -> str:
    state, meta = load_state(run_dir / "checkpoint")
    return canonical({"state": state, "meta": meta})


def _where(run_dir: Path) -> str:
    """What a kill left in the folder."""
    ckpt = run_dir / "checkpoint"
    if not run_dir.exists():
        return "no folder yet"
    if not (ckpt / STATE_FILE).exists():
        return "no committed checkpoint, leftovers" if ckpt.exists() and any(ckpt.iterdir()) else "no checkpoint"
    return "committed checkpoint, leftovers" if stale_files(ckpt) else "committed checkpoint"


def kill_campaign(tmp_path: Path, kills: int, seed: int) -> RunKillReport:
    """Kill ``flexkit run`` ``kills`` times over several folders; continue each from the command line."""
    rng = random.Random(seed)
    pipeline = write_pipeline(tmp_path)
    report = RunKillReport()
    with Zygote.start(tmp_path) as zyg:
        counts = tmp_path / "save-lines.txt"
        ref = zyg.run(["run", str(pipeline), "--out", str(tmp_path / "reference"), "--quiet"], count_to=counts)
        assert ref.code == 0 and not ref.killed, ref.stderr
        save_lines = [int(n) for n in counts.read_text().split()]
        ref_metrics = without_clock_text((tmp_path / "reference" / "metrics.jsonl").read_text())
        ref_state = _final_state(tmp_path / "reference")
        folder = 0
        while report.kills < kills:
            folder += 1
            run_dir = tmp_path / f"run{folder}"
            for _ in range(KILLS_PER_FOLDER):
                if not _kill_once(zyg, rng, pipeline, run_dir, save_lines, ref.seconds, report):
                    break  # the command finished before its kill point: the run is complete
            outcome = _continue(zyg, pipeline, run_dir, report)
            assert outcome.code == 0, outcome.stderr
            report.finished_folders += 1
            metrics = without_clock_text((run_dir / "metrics.jsonl").read_text())
            assert metrics == ref_metrics, f"{run_dir}: metrics differ"
            assert _summary_body(outcome.stdout) == _summary_body(ref.stdout), (outcome.stdout, ref.stdout)
            assert _final_state(run_dir) == ref_state, f"{run_dir}: the final checkpoint differs"
            assert not stale_files(run_dir / "checkpoint")
            report.identical_folders += 1
    return report


def _command(pipeline: Path, run_dir: Path, report: RunKillReport, zyg: Zygote) -> list[str]:
    """The command that continues ``run_dir``: ``--resume``, or ``--out`` when ``--resume`` says there is no
    checkpoint yet (or the folder does not exist yet)."""
    if not run_dir.exists():
        return ["run", str(pipeline), "--out", str(run_dir), "--quiet"]
    probe_needed = not (run_dir / "checkpoint" / STATE_FILE).exists()
    if probe_needed:  # what a user sees: --resume refuses and says how to start again
        outcome = zyg.run(["run", str(pipeline), "--resume", str(run_dir), "--quiet"])
        assert outcome.code == 1 and "no checkpoint yet" in outcome.stderr and "--out" in outcome.stderr, outcome
        assert "Traceback" not in outcome.stderr
        report.no_checkpoint_restarts += 1
        return ["run", str(pipeline), "--out", str(run_dir), "--quiet"]
    report.resumes += 1
    return ["run", str(pipeline), "--resume", str(run_dir), "--quiet"]


def _saves_left(run_dir: Path, saves: int) -> int:
    """How many checkpoint saves the run in ``run_dir`` still has to make (of ``saves`` in all)."""
    ckpt = run_dir / "checkpoint"
    if not (ckpt / STATE_FILE).exists():
        return saves
    step = load_state(ckpt)[0]["extra"]["runner"]["step"]
    return saves - step // 4  # checkpoint_every = 4


def _kill_once(zyg: Zygote, rng: random.Random, pipeline: Path, run_dir: Path, save_lines: list[int],
               run_seconds: float, report: RunKillReport) -> bool:
    """Continue ``run_dir`` with one command and kill it (in its first save, a later save, or at a random
    moment); check what it left. Returns whether it was killed (``False``: it finished the run)."""
    argv = _command(pipeline, run_dir, report, zyg)
    fresh = not (run_dir / "checkpoint" / STATE_FILE).exists()
    left = _saves_left(run_dir, len(save_lines))
    if left == 0:  # killed after its last save: the run is complete
        return False
    weights = [9, 0, 1] if fresh else [1, 6, 3]  # a folder without a checkpoint: mostly in the run's first save
    mode = rng.choices(["first", "later", "timed"], weights=weights)[0] if left > 1 else "first"
    if mode == "timed":  # anywhere: start-up, the steps, a save
        outcome = zyg.run(argv, kill_after=rng.uniform(0.0, 0.9) * run_seconds * left / len(save_lines))
    else:
        save = 1 if mode == "first" else rng.randrange(2, left + 1)  # this process's save number
        lines = save_lines[len(save_lines) - left + save - 1]  # that save's size in the uninterrupted run
        outcome = zyg.run(argv, kill_save=save, kill_line=rng.randrange(1, lines + 1))
    if not outcome.killed:
        assert outcome.code == 0, outcome.stderr  # it finished before the kill point
        return False
    report.kills += 1
    if mode == "timed":
        report.timed_kills += 1
    elif mode == "first" and fresh:
        report.first_save_kills += 1
    else:
        report.later_save_kills += 1
    report.where[_where(run_dir)] += 1
    ckpt = run_dir / "checkpoint"
    report.max_stale = max(report.max_stale, len(stale_files(ckpt)))
    assert len(stale_files(ckpt)) <= 2
    if (ckpt / STATE_FILE).exists():
        load_state(ckpt)  # a committed checkpoint always loads
    return True


def _continue(zyg: Zygote, pipeline: Path, run_dir: Path, report: RunKillReport) -> Outcome:
    outcome = zyg.run(_command(pipeline, run_dir, report, zyg))
    if outcome.code != 0:
        report.not_continuable += 1
    return outcome


@needs_fork
def test_killing_flexkit_run_in_its_first_and_later_saves_always_leaves_a_continuable_folder(tmp_path: Path) -> None:
    """40 SIGKILLs of ``flexkit run``, about half inside the run's first checkpoint save: every folder continues
    from the command line and ends byte-identical to the uninterrupted run."""
    report = kill_campaign(tmp_path, kills=40, seed=11)
    print(f"\nrun kill test: {report.summary()}")
    assert report.kills >= 40 and report.not_continuable == 0
    assert report.first_save_kills >= 10, report.summary()
    assert report.identical_folders == report.finished_folders


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLEXKIT_SLOW") != "1", reason="set FLEXKIT_SLOW=1 to run the 300-kill campaign")
@needs_fork
def test_run_kill_campaign_300(tmp_path: Path) -> None:
    """The same with 300 kills."""
    report = kill_campaign(tmp_path, kills=300, seed=2025)
    print(f"\nrun kill test (slow): {report.summary()}")
    assert report.kills >= 300 and report.not_continuable == 0
    assert report.identical_folders == report.finished_folders
