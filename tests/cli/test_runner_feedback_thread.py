"""flexkit run feeds each step's rewards back in a thread alongside the trainer's update: the records are those
of running feedback and update one after the other, and a feedback error still stops the step before it is
recorded or checkpointed."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

import flexkit.run._step as run_step
from flexkit import FeedbackError
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from tests.cli.test_runner import PIPELINE, step_records, write
from tests.fixtures import read_metrics

TIMING = ("time", "seconds", "_s")


class _Inline:
    """An executor that runs the job at once, in the calling thread (before the update)."""

    def submit(self, fn: Any, *args: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def _records(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in read_metrics(run_dir)]


@pytest.mark.parametrize("mix", [False, True])
def test_feedback_alongside_the_update_gives_the_records_of_feedback_before_it(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              mix: bool) -> None:
    text = PIPELINE.replace("total_steps = 60", "total_steps = 25")
    if mix:  # a mix stage sets taskset proportions after each rollout
        text = text.split("[sample]")[0] + ('[sample]\nmechanism = "mix"\n[sample.scorer]\ntype = "advantage_magnitude"'
                                            '\n[sample.actuator]\ntype = "exp3"\n[trainer]\ntype = "simulator"\n'
                                            'group_size = 4\n')
    path = write(tmp_path, text)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "thread", progress=None)
    monkeypatch.setattr(run_step, "_background", lambda: _Inline())
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "inline", progress=None)
    threaded, inline = _records(tmp_path / "thread"), _records(tmp_path / "inline")
    assert len(threaded) == 26 and threaded == inline


def test_a_feedback_error_stops_the_step_before_it_is_recorded(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, PIPELINE.replace("total_steps = 60", "total_steps = 10"))
    pipe = load_pipeline(path)
    calls = {"n": 0}
    original = type(pipe).feedback

    def failing(self: Any, experiences: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise FeedbackError("injected feedback failure")
        return original(self, experiences)

    monkeypatch.setattr(type(pipe), "feedback", failing)
    with pytest.raises(FeedbackError, match="injected"):
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert [r["step"] for r in step_records(tmp_path / "run")] == [0, 1, 2]  # step 3 was not recorded
