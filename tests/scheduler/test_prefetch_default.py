"""The ``[run] prefetch`` default: off when a selector learns from feedback, so feedback given after batch t's
read shapes batch t+1 (the timing host trainers assume); on for selectors that ignore feedback."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.feedback import SELECTOR_METRIC
from tests.scheduler.test_scheduler import batch_key, make_pipeline

LEARNING = {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.0}


@pytest.mark.parametrize(("selector", "expected"), [
    ({"type": "sequential"}, True),
    ({"type": "shuffle"}, True),
    ({"type": "random"}, True),
    (LEARNING, False),
    ({"type": "learnability"}, False),
    ({"type": "thompson_target"}, False),
])
def test_prefetch_is_off_by_default_exactly_when_a_selector_learns(tmp_path: Path, selector: dict,
                                                                    expected: bool) -> None:
    pipe = make_pipeline(tmp_path, sizes=(30,), selectors=[selector])
    assert pipe.scheduler.prefetch is expected
    pipe.scheduler.close()


def test_one_learning_taskset_turns_prefetch_off_for_the_whole_scheduler(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(30, 30), selectors=[{"type": "shuffle"}, LEARNING])
    assert pipe.scheduler.prefetch is False


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
