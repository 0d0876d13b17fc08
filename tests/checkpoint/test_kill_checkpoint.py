"""Kill test: SIGKILL a training process at random moments, mostly in the middle of a checkpoint write.

A child process (the "zygote", started with ``sys.executable``) imports flexkit and torch once and forks one
worker per trial. A worker is a restarted training job: it builds the pipeline, resumes from the checkpoint
directory when there is a checkpoint, then plays steps (read a batch, deterministic feedback derived from the
step number, the ``reward_gap`` mix stage) and saves a checkpoint after every step, printing ``saving n``
before and ``saved n`` after each save. The parent SIGKILLs the worker a random (seeded) delay after a
``saving`` line, or at a random moment of its life, and then checks that

* the directory loads into a freshly built pipeline (only "no checkpoint" is allowed, and only before the
  first checkpoint of the directory was ever committed), and holds exactly the state of an uninterrupted run
  at the same step, never older than the last save the worker acknowledged (no data lost);
* replaying the same deterministic feedback from there reaches exactly the uninterrupted run's final state;
* stale files (partial arrays, state temp files) never break loading and never pile up: at most two after a
  kill once the worker completed a save, none once a save completes undisturbed.

After a few kills the directory's job is let run to the end, and its final checkpoint must equal the
uninterrupted run's final state too. ``FLEXKIT_SLOW=1`` runs a 500-kill campaign (``-m slow``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import numpy as np
import pytest

from flexkit.errors import CheckpointError
from flexkit.pipeline._checkpoint import STATE_FILE, load_state, save_state
from flexkit.pipeline._pipeline import Pipeline, pipeline_from_dict
from flexkit.scheduler.feedback import SELECTOR_METRIC
from tests.checkpoint.kill_helpers import (
    CampaignReport,
    ZygoteProcess,
    canonical,
    emit,
    needs_fork,
    serve_forks,
    stale_files,
)
from tests.fixtures import ROOT
from tests.scheduler.test_scheduler import write_taskset

CHECKPOINT_PY = ROOT / "flexkit" / "pipeline" / "_checkpoint.py"
TOTAL_STEPS = 40
SIZES = (3000, 1500, 500)
FEEDBACK_SEED = 20_240_611
KILLS_PER_DIRECTORY = 10
SELECTORS = [
    {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5},
    {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "tau": 0.0, "do_sample": True, "adaptive_rho": True},
    {"type": "shuffle"},
]


# -- the pipeline both sides run --------------------------------------------------------------------------


def write_data(data_dir: Path) -> None:
    """The taskset files (a few thousand tasks, so a checkpoint takes a few milliseconds)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(SIZES):
        write_taskset(data_dir / f"t{i}.jsonl", n, seed=i)


def build_pipeline(data_dir: Path | str) -> Pipeline:
    """Three tasksets (two ``difficulty_based``, one ``shuffle``), prefetch on, a ``reward_gap`` mix stage."""
    data = {
        "run": {"batch_size": 32, "seed": 7, "total_steps": TOTAL_STEPS, "prefetch": True},
        "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": SELECTORS[i]} for i in range(len(SIZES))],
        "sample": {"mechanism": "mix", "scorer": {"type": "reward"},
                   "actuator": {"type": "reward_gap", "window": 4, "temperature": 0.2}},
    }
    return pipeline_from_dict(data, base_dir=data_dir)


def play_step(pipe: Pipeline, step: int) -> None:
    """One training step whose feedback depends only on ``step`` and the batch (so a replay is identical)."""
    import torch

    assert pipe.scheduler.step == step
    tasks = pipe.scheduler.read()
    rng = np.random.default_rng([FEEDBACK_SEED, step])
    metric: dict[int, dict[str, list[Any]]] = {}
    for task in tasks:
        part = metric.setdefault(task.taskset_id, {"indices": [], "values": []})
        if task.index not in part["indices"]:
            part["indices"].append(task.index)
            part["values"].append(float(rng.uniform(0.0, 1.0)))
    pipe.scheduler.feedback({SELECTOR_METRIC: metric})
    rewards = torch.from_numpy(rng.uniform(0.0, 1.0, len(tasks)))
    scores = torch.zeros(len(tasks), 2, dtype=torch.float64)
    scores[:, -1] = rewards
    pipe.apply_sample_stage({"token_level_scores": scores, "response_mask": torch.ones(len(tasks), 2),
                             "uid": [str(i) for i in range(len(tasks))],
                             "taskset_id": [t.taskset_id for t in tasks]}, step=step)


def reference_states(data_dir: Path) -> list[str]:
    """Canonical pipeline state after each step of an uninterrupted run (index = steps done)."""
    pipe = build_pipeline(data_dir)
    states = [canonical(pipe.state_dict())]
    for step in range(TOTAL_STEPS):
        play_step(pipe, step)
        states.append(canonical(pipe.state_dict()))
    pipe.scheduler.close()
    return states


# -- the child side: zygote and workers ----------------------------------------------------------------------


def worker(data_dir: str, ckpt: str) -> None:
    """A (re)started job: resume from ``ckpt`` if it holds a checkpoint, then step and checkpoint every step."""
    import torch

    torch.set_num_threads(1)
    emit(f"pid {os.getpid()}")
    pipe = build_pipeline(data_dir)
    extra: dict[str, Any] = {}
    try:
        extra = pipe.load_checkpoint(ckpt)
    except CheckpointError as exc:
        if "no checkpoint" not in str(exc):
            raise
    start = pipe.scheduler.step
    if start:
        assert extra == {"runner": {"step": start}}
    emit(f"start {start}")
    for step in range(start, TOTAL_STEPS):
        t0 = time.perf_counter()
        play_step(pipe, step)
        t1 = time.perf_counter()
        emit(f"saving {step + 1} {t1 - t0:.6f}")
        pipe.save_checkpoint(ckpt, extra={"runner": {"step": step + 1}})
        emit(f"saved {step + 1} {time.perf_counter() - t1:.6f}")
    emit("done")


def zygote(data_dir: str) -> None:
    """Import everything once, then fork a :func:`worker` for each ``run <ckpt>`` line on stdin (it says its own
    ``pid``; an exception is reported as an ``error`` line). No pipeline is built and no torch op runs here."""
    import torch  # noqa: F401 - imported before forking so workers start fast

    import flexkit.sample.scorers  # noqa: F401
    from flexkit.plugins._manager import get_plugins

    def child(ckpt: str) -> int:
        try:
            worker(data_dir, ckpt)
        except BaseException as exc:  # report, never return into the zygote's loop
            emit(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
            return 1
        return 0

    get_plugins()
    serve_forks(child)


# -- the parent side -------------------------------------------------------------------------------------------


class Zygote(ZygoteProcess):
    """The zygote of :func:`zygote`."""

    @classmethod
    def start(cls, data_dir: Path, stderr: Path) -> Zygote:
        """Start it on the tasksets in ``data_dir``."""
        return cls.spawn("tests.checkpoint.test_kill_checkpoint", [str(data_dir)], stderr)

    def run(self, ckpt: Path) -> int:
        """Fork a worker on ``ckpt``; returns its pid."""
        self.send(f"run {ckpt}")
        first = self.lines.next()
        assert first.startswith("pid "), first
        return int(first.split()[1])


@attrs.define
class KillReport(CampaignReport):
    """What a kill campaign did and found."""

    trials: int = 0
    kills: int = 0
    during_save: int = 0
    no_checkpoint: int = 0
    loads_ok: int = 0
    resumes_exact: int = 0
    data_lost: int = 0
    finished_runs: int = 0
    max_stale: int = 0
    phases: Counter[str] = attrs.field(factory=Counter)


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    if seconds > 0.002:
        time.sleep(seconds - 0.001)
    while time.perf_counter() < end:
        pass


def _parse(events: list[str], prefix: str) -> list[int]:
    return [int(e.split()[1]) for e in events if e.startswith(prefix + " ")]


def _verify(data_dir: Path, ckpt: Path, ref: list[str]) -> int | None:
    """Load ``ckpt`` into a fresh pipeline, check it is the reference state at its step, replay to the end and
    check the final state; returns the checkpoint's step (``None``: no checkpoint)."""
    pipe = build_pipeline(data_dir)
    try:
        try:
            extra = pipe.load_checkpoint(ckpt)
        except CheckpointError as exc:
            if "no checkpoint" in str(exc):
                return None
            raise
        step = pipe.scheduler.step
        assert extra == {"runner": {"step": step}}, "the extra state is not from the same commit"
        assert canonical(pipe.state_dict()) == ref[step], f"checkpoint at step {step} differs from the reference"
        for s in range(step, TOTAL_STEPS):
            play_step(pipe, s)
        assert canonical(pipe.state_dict()) == ref[-1], f"resume from step {step} did not reach the final state"
        return step
    finally:
        pipe.scheduler.close()


def kill_campaign(tmp_path: Path, kills: int, seed: int) -> KillReport:
    """SIGKILL ``kills`` workers at random moments (most a random delay after ``saving``) and check each time."""
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    write_data(data_dir)
    ref = reference_states(data_dir)
    report = KillReport()
    saves: list[float] = [0.003]
    steps: list[float] = [0.003]
    with Zygote.start(data_dir, tmp_path / "zygote.err") as zyg:
        run = 0
        while report.kills < kills:
            run += 1
            ckpt = tmp_path / f"ckpt{run}"
            committed = 0  # the newest step known committed in this directory
            for trial in range(KILLS_PER_DIRECTORY):
                before = stale_files(ckpt)
                pid = zyg.run(ckpt)
                events: list[str] = []
                in_save = trial == 0 or rng.random() < 0.8
                let_through = 0 if trial == 0 else rng.randrange(0, 5)
                if in_save:  # kill a random delay, up to about one save's duration, after a "saving" line
                    delay = rng.uniform(0.0, 1.1) * statistics.median(saves[-50:])
                    seen = 0
                    while seen <= let_through:
                        events.append(zyg.lines.next())
                        if events[-1].startswith("saving "):
                            seen += 1
                        elif events[-1].startswith(("done", "error")):
                            break
                    else:
                        _busy_wait(delay)
                else:  # kill anywhere in the worker's life: build, resume, steps, saves
                    _busy_wait(rng.uniform(0.0, 0.1 + (let_through + 1) * (steps[-1] + saves[-1])))
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                except ProcessLookupError:
                    killed = False
                while not events or not events[-1].startswith(f"reaped {pid} "):
                    events.append(zyg.lines.next())
                assert not any(e.startswith("error") for e in events), events
                saves += [float(e.split()[2]) for e in events if e.startswith("saved ")]
                steps += [float(e.split()[2]) for e in events if e.startswith("saving ")]
                finished = "done" in events
                killed = killed and not finished
                saving, saved = _parse(events, "saving"), _parse(events, "saved")
                mid_save = bool(saving) and (not saved or saved[-1] != saving[-1])

                stale = stale_files(ckpt)
                report.max_stale = max(report.max_stale, len(stale))
                assert len(stale) <= 2, (sorted(before), sorted(stale), events)  # one interrupted save's at most
                step = _verify(data_dir, ckpt, ref)
                if step is None:
                    assert committed == 0 and not saved, f"a committed checkpoint vanished: {events}"
                    report.no_checkpoint += 1
                    step = 0
                else:
                    report.loads_ok += 1
                    report.resumes_exact += 1
                low = max([committed, *saved])
                high = saving[-1] if saving else committed
                if not low <= step <= high:
                    report.data_lost += 1
                assert low <= step <= high, f"checkpoint at step {step}, expected {low}..{high}: {events}"
                committed = step
                report.trials += 1
                if killed:
                    report.kills += 1
                    report.during_save += mid_save
                    if mid_save:
                        report.phases[_phase(step, saving[-1], before, stale)] += 1
                if finished:
                    break
            if "done" not in events:  # let this directory's job run to the end undisturbed
                zyg.run(ckpt)
                events = []
                while not events or not events[-1].startswith("reaped "):
                    events.append(zyg.lines.next())
                assert "done" in events, events
            stale = stale_files(ckpt)
            assert not stale, f"stale files left after a clean save: {sorted(stale)}"
            pipe = build_pipeline(data_dir)
            assert pipe.load_checkpoint(ckpt) == {"runner": {"step": TOTAL_STEPS}}
            assert canonical(pipe.state_dict()) == ref[-1], "the killed-and-restarted job's final state differs"
            pipe.scheduler.close()
            report.finished_runs += 1
    return report


def _phase(step: int, saving: int, before: set[str], stale: set[str]) -> str:
    """Where in ``save_state`` a mid-save kill landed, judged from the files it left."""
    new = stale - before
    if step == saving:
        return "committed, old arrays not yet removed" if stale else "committed and cleaned up"
    if any(n.endswith(".tmp") for n in new):
        return "state temp file written, not yet renamed"
    if any(n.startswith("arrays-") for n in new):
        return "arrays file written or being written"
    return "before the arrays file (state_dict, encoding, lock, cleanup)"


@needs_fork
def test_sigkill_mid_checkpoint_always_leaves_a_loadable_exactly_resumable_checkpoint(tmp_path: Path) -> None:
    """60 SIGKILLs, most mid-save: the checkpoint always loads and resumes to the uninterrupted final state."""
    report = kill_campaign(tmp_path, kills=60, seed=6)
    print(f"\nkill test: {report.summary()}")
    assert report.kills >= 60 and report.data_lost == 0
    assert report.loads_ok + report.no_checkpoint == report.trials  # every trial checked
    assert report.during_save >= report.kills // 4, report.summary()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLEXKIT_SLOW") != "1", reason="set FLEXKIT_SLOW=1 to run the 500-kill campaign")
@needs_fork
def test_sigkill_campaign_500(tmp_path: Path) -> None:
    """The same with 500 kills."""
    report = kill_campaign(tmp_path, kills=500, seed=2024)
    print(f"\nkill test (slow): {report.summary()}")
    assert report.kills >= 500 and report.data_lost == 0
    assert report.during_save >= report.kills // 4, report.summary()


# -- in-process: a crash between any two lines of save_state ------------------------------------------------


class Crash(BaseException):
    """Stands for the process dying (a BaseException, so nothing in the code under test catches it)."""


def _crash_when(hit: Callable[[FrameType], bool], fn: Callable[[], Any]) -> bool:
    """Run ``fn``, raising :class:`Crash` before the first line it executes whose frame ``hit`` accepts; returns
    whether it crashed."""

    def tracer(frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "line" and hit(frame):
            raise Crash
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    except Crash:
        return True
    finally:
        sys.settrace(None)
    return False


def crash_at(n: int, fn: Callable[[], Any]) -> bool:
    """Run ``fn``, raising :class:`Crash` before the ``n``-th line executed in ``flexkit/pipeline/_checkpoint.py``;
    returns whether it crashed. (Crashing inside library code this way would run its ``finally`` clauses, which a
    real crash does not; the interior of numpy's zip writing is what the SIGKILL campaign covers.)"""
    count = 0
    target = str(CHECKPOINT_PY)

    def hit(frame: FrameType) -> bool:
        nonlocal count
        # not inside the lock helper: a crash there would leak the lock's fd, which a dying process cannot
        if frame.f_code.co_filename != target or frame.f_code.co_name == "_writer_lock":
            return False
        count += 1
        return count == n

    return _crash_when(hit, fn)


def _states(i: int) -> dict[str, Any]:
    return {"x": np.full(200, i, dtype=np.float64), "step": i, "nested": {"k": [np.arange(i + 1)]}}


def test_a_crash_between_any_two_steps_of_a_save_leaves_the_old_or_the_new_checkpoint(tmp_path: Path) -> None:
    """Crash points: before every line executed in ``flexkit/pipeline/_checkpoint.py`` during a save."""
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(0), meta={"m": 0})
    points, outcomes = 0, Counter()
    n = 1
    while crash_at(n, lambda: save_state(ckpt, _states(1), meta={"m": 1})):
        state, meta = load_state(ckpt)
        which = state["step"]
        assert which in (0, 1) and meta == {"m": which}
        assert state["x"].tolist() == [float(which)] * 200
        outcomes[which] += 1
        save_state(ckpt, _states(0), meta={"m": 0})  # the next save works and cleans up
        stale = stale_files(ckpt)
        assert not stale
        points, n = points + 1, n + 1
    assert points > 30 and outcomes[0] > 0 and outcomes[1] > 0, (points, outcomes)


def test_stale_temp_and_arrays_files_do_not_break_loading_and_are_removed(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(3), meta={})
    (ckpt / f".{STATE_FILE}.{'0' * 32}.tmp").write_text('{"format_version": 1, "arr')  # torn temp file
    (ckpt / f"arrays-{'f' * 32}.npz").write_bytes(b"PK\x03\x04 torn")  # torn arrays file
    (ckpt / f"arrays-{'e' * 32}.npz").write_bytes(b"")
    assert load_state(ckpt)[0]["step"] == 3
    save_state(ckpt, _states(4), meta={})
    stale = stale_files(ckpt)
    assert not stale and load_state(ckpt)[0]["step"] == 4


# -- regressions: leftovers of a crash loop, concurrent writers and readers, malformed checkpoints --------------


def crash_before(source_line: str, fn: Callable[[], Any]) -> None:
    """Run ``fn``, raising :class:`Crash` right before ``flexkit/pipeline/_checkpoint.py`` first runs
    ``source_line``."""
    numbers = [i + 1 for i, text in enumerate(CHECKPOINT_PY.read_text().splitlines()) if text.strip() == source_line]
    assert len(numbers) == 1, source_line
    line, target = numbers[0], str(CHECKPOINT_PY)
    if not _crash_when(lambda frame: frame.f_lineno == line and frame.f_code.co_filename == target, fn):
        raise AssertionError(f"never reached {source_line!r}")


def test_a_crash_loop_does_not_pile_up_files(tmp_path: Path) -> None:
    """Regression: leftovers were removed only after a save succeeded, so a job dying in every save (a crash
    loop) added a partial arrays file and a temp file per attempt until the disk filled."""
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(0), meta={})
    for i in range(1, 21):
        crash_before("os.replace(tmp, root / STATE_FILE)", lambda i=i: save_state(ckpt, _states(i), meta={}))
        assert len(stale_files(ckpt)) == 2  # this attempt's arrays and temp file, nothing older
        assert load_state(ckpt)[0]["step"] == 0
    crash_before("_remove_stale(root, arrays_name)", lambda: save_state(ckpt, _states(21), meta={}))
    assert len(stale_files(ckpt)) == 1 and load_state(ckpt)[0]["step"] == 21  # committed; old arrays remain
    save_state(ckpt, _states(22), meta={})
    assert not stale_files(ckpt) and load_state(ckpt)[0]["step"] == 22


def test_concurrent_writers_and_a_reader_never_see_a_broken_checkpoint(tmp_path: Path) -> None:
    """Regression: a writer's cleanup deleted another writer's uncommitted files (its rename then failed, or its
    ``state.json`` named a deleted arrays file), and a reader lost the arrays file ``state.json`` had named to a
    writer's cleanup (most reads failed while a writer was busy)."""
    import threading

    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(0), meta={})
    errors: list[str] = []
    reads = 0
    stop = threading.Event()

    def write(k: int) -> None:
        for i in range(40):
            try:
                save_state(ckpt, {"x": np.full(2000, k * 1000 + i), "step": k * 1000 + i}, meta={})
            except Exception as exc:
                errors.append(f"writer {k}: {exc!r}")

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                state, _ = load_state(ckpt)
                assert (state["x"] == state["step"]).all()  # arrays and JSON from the same commit
                reads += 1
            except Exception as exc:
                errors.append(f"reader: {exc!r}")

    writers = [threading.Thread(target=write, args=(k,)) for k in (1, 2)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert not errors, errors[:5]
    assert reads > 0 and load_state(ckpt)[0]["step"] in (1039, 2039)
    assert not stale_files(ckpt)


def signed(body: dict[str, Any]) -> bytes:
    """``state.json`` bytes for a hand-edited ``body`` with a valid checksum: a hostile file rather than a damaged
    one, so that the checks after the checksum are reached."""
    rest = json.dumps({k: v for k, v in body.items() if k not in ("format_version", "sha256")})[1:].encode()
    return b'{"format_version": 2, "sha256": "' + hashlib.sha256(rest).hexdigest().encode() + b'", ' + rest


def _corrupt(body: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    if value is KeyError:
        body.pop(key)
    else:
        body[key] = value
    return body


@pytest.mark.parametrize(("key", "value", "match"), [
    ("arrays", "../outside.npz", "is malformed"),
    ("arrays", "/etc/hostname", "is malformed"),
    ("arrays", 5, "is malformed"),
    ("state", KeyError, "is malformed"),
    ("state", {"x": {"__ndarray__": "a99"}}, "is malformed.*KeyError"),
    ("state", {"__items__": [[{"k": 1}, 2]]}, "is malformed.*TypeError"),
    ("state", [1, 2], "must be tables"),
    ("meta", "fingerprint", "must be tables"),
])
def test_malformed_checkpoints_fail_with_a_checkpoint_error(tmp_path: Path, key: str, value: Any, match: str) -> None:
    """A hand-edited or hostile ``state.json`` is refused with :class:`CheckpointError`, and only the arrays file
    it names inside the checkpoint directory is ever opened."""
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(1), meta={})
    np.savez(tmp_path / "outside.npz", x=np.zeros(3))
    body = json.loads((ckpt / STATE_FILE).read_text())
    (ckpt / STATE_FILE).write_bytes(signed(_corrupt(body, key, value)))
    with pytest.raises(CheckpointError, match=match):
        load_state(ckpt)


def test_a_deeply_nested_state_json_fails_with_a_checkpoint_error(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(1), meta={})
    (ckpt / STATE_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_state(ckpt)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 torn zip", b"\x93NUMPY torn", b"not an npz"])
def test_a_damaged_arrays_file_fails_with_a_checkpoint_error(tmp_path: Path, content: bytes) -> None:
    """Regression: an empty or torn arrays file (a damaged disk or copy; never a crash, which cannot commit one)
    raised ``EOFError`` / ``zipfile.BadZipFile`` instead of :class:`CheckpointError`."""
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(1), meta={})
    (ckpt / json.loads((ckpt / STATE_FILE).read_text())["arrays"]).write_bytes(content)
    with pytest.raises(CheckpointError, match="cannot read checkpoint arrays"):
        load_state(ckpt)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"arrays": 5}', "[" * 100_000])
def test_a_save_over_an_unreadable_state_json_works_and_keeps_its_arrays_until_committed(
    tmp_path: Path, text: str
) -> None:
    ckpt = tmp_path / "ckpt"
    save_state(ckpt, _states(1), meta={})
    (ckpt / STATE_FILE).write_text(text)
    old = {p.name for p in ckpt.glob("arrays-*.npz")}
    crash_before("os.replace(tmp, root / STATE_FILE)", lambda: save_state(ckpt, _states(2), meta={}))
    assert old <= {p.name for p in ckpt.glob("arrays-*.npz")}  # not known to be stale: kept
    save_state(ckpt, _states(3), meta={})
    assert load_state(ckpt)[0]["step"] == 3 and not stale_files(ckpt)
