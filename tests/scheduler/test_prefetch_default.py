"""The ``[run] prefetch`` default: when a selector learns from feedback, the next batch is selected right after
the step's feedback (``"after_feedback"``), so feedback given after batch t's read shapes batch t+1 (the timing
host trainers assume) while the selection still runs in the background; on for selectors that ignore feedback."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.scheduler._scheduler import AFTER_FEEDBACK
from flexkit.scheduler.feedback import SELECTOR_METRIC
from tests.scheduler.test_scheduler import batch_key, make_pipeline

LEARNING = {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.0}


@pytest.mark.parametrize(("selector", "expected"), [
    ({"type": "sequential"}, True),
    ({"type": "shuffle"}, True),
    ({"type": "random"}, True),
    (LEARNING, AFTER_FEEDBACK),
    ({"type": "learnability"}, AFTER_FEEDBACK),
    ({"type": "thompson_target"}, AFTER_FEEDBACK),
])
def test_prefetch_waits_for_feedback_by_default_exactly_when_a_selector_learns(tmp_path: Path, selector: dict,
                                                                    expected: bool) -> None:
    pipe = make_pipeline(tmp_path, sizes=(30,), selectors=[selector])
    assert pipe.scheduler.prefetch == expected
    pipe.scheduler.close()


def test_one_learning_taskset_turns_prefetch_off_for_the_whole_scheduler(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(30, 30), selectors=[{"type": "shuffle"}, LEARNING])
    assert pipe.scheduler.prefetch == AFTER_FEEDBACK


def test_a_mix_stage_turns_the_default_off(tmp_path: Path) -> None:
    """Mix proportions are set after the feedback; a batch selected right after the feedback would miss them."""
    pipe = make_pipeline(tmp_path, sizes=(30, 30), selectors=[LEARNING])
    data = {"run": {"batch_size": 4}, "tasksets": [{"name": "t0", "path": "t0.jsonl", "selector": LEARNING},
                                                   {"name": "t1", "path": "t1.jsonl"}],
            "sample": {"mechanism": "mix", "scorer": {"type": "advantage_magnitude"},
                       "actuator": {"type": "exp3"}}}
    assert pipeline_from_dict(data, base_dir=tmp_path).scheduler.prefetch is False
    pipe.scheduler.close()


@pytest.mark.parametrize("explicit", [True, False])
def test_an_explicit_prefetch_wins_over_the_default(tmp_path: Path, explicit: bool) -> None:
    pipe = make_pipeline(tmp_path, sizes=(30,), selectors=[LEARNING], run={"prefetch": explicit})
    assert pipe.scheduler.prefetch is explicit
    pipe.scheduler.close()


def _second_batch(tmp_path: Path, run: dict) -> list[tuple[int, int]]:
    """Batch 1 after feedback that makes batch 0's tasks look solved (pass rate 1)."""
    tmp_path.mkdir()
    pipe = make_pipeline(tmp_path, sizes=(40,), selectors=[LEARNING], run={"batch_size": 8, **run})
    sched = pipe.scheduler
    first = sched.read()
    sched.feedback({SELECTOR_METRIC: {0: {"indices": [t.index for t in first], "values": [1.0] * len(first)}}})
    second = batch_key(sched.read())
    sched.close()
    return second


def test_regression_default_feedback_after_a_read_shapes_the_very_next_batch(tmp_path: Path) -> None:
    """Used to fail: pipelines prefetched by default, so step t's feedback first shaped batch t+2."""
    default = _second_batch(tmp_path / "a", {})
    assert default == _second_batch(tmp_path / "b", {"prefetch": False})
    assert default != _second_batch(tmp_path / "c", {"prefetch": True})


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_after_feedback_prefetch_selects_exactly_as_no_prefetch_and_resumes(tmp_path: Path, cut: int) -> None:
    """One feedback per step: the same batches as prefetch = false, and a checkpoint taken with a batch pending
    (selected right after the feedback) resumes to the same run."""

    def run(folder: str, prefetch: object, resume_at: int | None = None) -> list[list[tuple[int, int]]]:
        (tmp_path / folder).mkdir()
        pipe = make_pipeline(tmp_path / folder, sizes=(40, 25), selectors=[LEARNING, {"type": "learnability"}],
                             run={"batch_size": 6, "total_epochs": 2, **({} if prefetch is None else
                                                                       {"prefetch": prefetch})})
        sched, seen = pipe.scheduler, []
        for step in range(6):
            tasks = sched.read()
            seen.append(batch_key(tasks))
            values = {}
            for t in tasks:
                part = values.setdefault(t.taskset_id, {"indices": [], "values": []})
                part["indices"].append(t.index)
                part["values"].append(((t.index * 7 + step) % 5) / 4)
            sched.feedback({SELECTOR_METRIC: values})
            if step + 1 == resume_at:
                state = sched.state_dict()
                assert state["pending"] is not None and state["pending"]["step"] == step + 1
                sched.close()
                pipe = make_pipeline(tmp_path / folder, sizes=(40, 25),
                                     selectors=[LEARNING, {"type": "learnability"}],
                                     run={"batch_size": 6, "total_epochs": 2})
                pipe.scheduler.load_state_dict(state)
                sched = pipe.scheduler
        sched.close()
        return seen

    off = run("off", False)
    assert run("default", None) == off
    assert run("resumed", None, resume_at=cut) == off
    assert run("eager", True) != off
