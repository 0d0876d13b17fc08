"""A feedback payload is validated once, where it enters the scheduler: selectors keeping the base class's
``feedback`` get the validated arrays without a second check; a selector with its own ``feedback`` (a plugin's,
or one patched on the instance) is still called through it; ``Selector.feedback`` still checks what third-party
callers give it, lists included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import flexkit.scheduler._feedback_check
import flexkit.selectors._base
from flexkit import FeedbackError, Selector
from flexkit.scheduler._scheduler import TasksetEntry, TasksetScheduler
from flexkit.scheduler.feedback import SELECTOR_METRIC, PassRateCalculator


class Recording(Selector):
    """Records what its ``_update`` receives."""

    atomic_feedback = True

    def _init_state(self) -> None:
        self.got: list[tuple[np.ndarray, np.ndarray]] = []

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        return np.arange(batch_size), {}

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        self.got.append((indices, values))


class OwnFeedback(Recording):
    """Overrides the public ``feedback`` (as a plugin may)."""

    def feedback(self, indices: Any, values: Any, **kwargs: Any) -> None:
        self.got.append((np.asarray(indices), np.asarray(values)))


def _scheduler(*selectors: Selector) -> TasksetScheduler:
    entries = [TasksetEntry(name=f"t{i}", taskset=range(s.size), selector=s) for i, s in enumerate(selectors)]
    return TasksetScheduler(entries, batch_size=2, prefetch=False)


def _count_validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = flexkit.selectors._base.validate_feedback

    def counted(where: str) -> Any:
        def validate(*args: Any, **kwargs: Any) -> Any:
            calls.append(where)
            return real(*args, **kwargs)
        return validate

    monkeypatch.setattr(flexkit.scheduler._feedback_check, "validate_feedback", counted("scheduler"))
    monkeypatch.setattr(flexkit.selectors._base, "validate_feedback", counted("selector"))
    return calls


def test_scheduler_feedback_validates_each_part_once(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = Recording(size=5), Recording(size=3)
    calls = _count_validations(monkeypatch)
    _scheduler(a, b).feedback({SELECTOR_METRIC: {0: {"indices": [4, 1], "values": [1.5, 0.25]},
                                                 "t1": {"indices": np.array([2]), "values": np.array([0.5])}}})
    assert calls == ["scheduler", "scheduler"]
    (idx, vals), = a.got
    assert idx.dtype == np.int64 and vals.dtype == np.float64
    assert idx.tolist() == [4, 1] and vals.tolist() == [1.0, 0.25]  # clipped by the scheduler's check
    assert b.got[0][0].tolist() == [2]


def test_a_selector_with_its_own_feedback_is_called_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    own, patched = OwnFeedback(size=4), Recording(size=4)
    seen: list[Any] = []
    patched.feedback = lambda indices, values: seen.append(indices.tolist())  # type: ignore[method-assign]
    _scheduler(own, patched).feedback({SELECTOR_METRIC: {0: {"indices": [3], "values": [0.5]},
                                                         1: {"indices": [0, 2], "values": [0.5, 0.5]}}})
    assert own.got[0][0].tolist() == [3]
    assert seen == [[0, 2]] and patched.got == []


def test_selector_feedback_still_checks_third_party_lists() -> None:
    selector = Recording(size=4)
    selector.feedback([2, 0], [0.5, 2])
    assert selector.got[0][0].tolist() == [2, 0] and selector.got[0][1].tolist() == [0.5, 1.0]
    with pytest.raises(FeedbackError, match="repeats index 1"):
        selector.feedback([1, 1], [0.5, 0.5])
    with pytest.raises(FeedbackError, match="out of range"):
        selector.feedback(np.array([4]), np.array([0.5]))
    assert len(selector.got) == 1


def test_the_built_in_operator_gives_one_array_shape_in_first_occurrence_order() -> None:
    rows = [{"taskset_id": t, "index": i, "reward": r}
            for t, i, r in [(1, 5, 1.0), (0, 3, 0.0), (1, 5, 0.0), (1, 2, 1), (0, 9, 1), (2, 0, 0.5)]]
    metric = PassRateCalculator().process(rows)[1][SELECTOR_METRIC]
    assert list(metric) == [1, 0, 2]
    assert all(p["indices"].dtype == np.int64 and p["values"].dtype == np.float64 for p in metric.values())
    assert {t: (p["indices"].tolist(), p["values"].tolist()) for t, p in metric.items()} == {
        1: ([5, 2], [0.5, 1.0]), 0: ([3, 9], [0.0, 1.0]), 2: ([0], [0.5])}
