"""Lifecycle observers (``flexkit_on_select``, ``flexkit_on_feedback``): called after the event is committed,
outside the scheduler's lock; one that raises is logged the same way for both hooks and loses nothing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from flexkit import hookimpl, pipeline_from_dict
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.testing import write_jsonl_taskset


def _pipeline(root: Path, *, prefetch: bool = False) -> Any:
    write_jsonl_taskset(root / "t0.jsonl", 12, seed=0)
    data = {"run": {"batch_size": 3, "seed": 1, "total_steps": 4, "prefetch": prefetch},
            "tasksets": [{"name": "t0", "path": "t0.jsonl", "selector": {"type": "prioritized_replay"}}]}
    return pipeline_from_dict(data, base_dir=root)


def _feedback(tasks: Any) -> dict[str, Any]:
    indices = sorted({t.index for t in tasks})
    return {SELECTOR_METRIC: {0: {"indices": indices, "values": [(i % 4) / 4 for i in indices]}}}


def _drive(pipe: Any) -> list[list[int]]:
    """Read every batch, feeding back after each; the indices of each batch."""
    batches = []
    for _ in range(4):
        tasks = pipe.scheduler.read()
        batches.append([t.index for t in tasks])
        pipe.scheduler.feedback(_feedback(tasks))
    return batches


class Raising:
    """An observer whose hooks both raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    @hookimpl
    def flexkit_on_select(self, step: int, tasks: Any) -> None:
        self.calls.append(("select", step))
        raise RuntimeError(f"select observer broke at {step}")

    @hookimpl
    def flexkit_on_feedback(self, step: int, metrics: Any) -> None:
        self.calls.append(("feedback", step))
        raise RuntimeError(f"feedback observer broke at {step}")


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_raising_observer_loses_no_batch_and_no_feedback(tmp_path: Path, prefetch: bool) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    expected = _drive(_pipeline(tmp_path / "a", prefetch=prefetch))
    pipe = _pipeline(tmp_path / "b", prefetch=prefetch)
    observer = Raising()
    pipe.plugins.pm.register(observer)
    with capture_logs() as logs:
        got = _drive(pipe)
    assert got == expected  # every batch handed out, every feedback applied, as without the observer
    assert pipe.scheduler.step == 4
    assert observer.calls == [(kind, step) for s in range(4) for kind, step in (("select", s), ("feedback", s + 1))]
    failed = [entry for entry in logs if entry["event"] == "observer_failed"]
    assert [(e["hook"], e["step"], e["log_level"]) for e in failed] == [
        (hook, step, "warning") for s in range(4)
        for hook, step in (("flexkit_on_select", s), ("flexkit_on_feedback", s + 1))]
    assert failed[0]["error"] == "RuntimeError: select observer broke at 0"
    assert failed[1]["error"] == "RuntimeError: feedback observer broke at 1"


def test_observers_run_outside_the_scheduler_lock(tmp_path: Path) -> None:
    """Another thread can use the scheduler while an observer runs (an observer that waits on one cannot
    deadlock the run), and by then the event is committed."""
    pipe = _pipeline(tmp_path)
    seen: list[tuple[str, int]] = []

    def from_another_thread() -> int:
        out: list[int] = []
        thread = threading.Thread(target=lambda: out.append(pipe.scheduler.state_dict()["step"]), daemon=True)
        thread.start()
        thread.join(timeout=10)
        assert out, "the scheduler's lock was held while the observer ran"
        return out[0]

    class Waiting:
        @hookimpl
        def flexkit_on_select(self, step: int, tasks: Any) -> None:
            seen.append(("select", from_another_thread()))

        @hookimpl
        def flexkit_on_feedback(self, step: int, metrics: Any) -> None:
            seen.append(("feedback", from_another_thread()))

    pipe.plugins.pm.register(Waiting())
    tasks = pipe.scheduler.read()
    pipe.scheduler.feedback(_feedback(tasks))
    assert seen == [("select", 1), ("feedback", 1)]
