"""Atomic feedback is declared by the selector class (``Selector.atomic_feedback``), never inferred from where
its code lives: a declared selector's state is not copied before feedback; any other is copied and restored
when a later part of the payload fails."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexkit import ComponentError, Selector
from flexkit.scheduler._scheduler import TasksetEntry, apply_feedback
from flexkit.selectors.learnability import LearnabilitySelector
from flexkit.selectors.prioritized_replay import PrioritizedReplaySelector
from flexkit.testing._registry import registered


class Counting(Selector):
    """A plugin selector that learns (overrides ``_update``) and declares nothing; counts its state copies."""

    learns_from_feedback = True

    def _init_state(self) -> None:
        self.seen = np.zeros(self.size)
        self.snapshots = 0

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        return np.arange(batch_size), {}

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        self.seen[indices] += values

    def state_dict(self) -> dict[str, Any]:
        self.snapshots += 1
        return {**super().state_dict(), "seen": self.seen.copy()}

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        self.seen = np.asarray(state["seen"], dtype=np.float64).copy()


class DeclaredAtomic(Counting):
    atomic_feedback = True


class Broken(Selector):
    """Fails while taking any feedback."""

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        return np.arange(batch_size), {}

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        raise RuntimeError("broken")


class ReplayVariant(PrioritizedReplaySelector):
    """A plugin's subclass of a built-in that keeps its feedback code."""


class LearnabilityVariant(LearnabilitySelector):
    """A plugin's subclass of a built-in that replaces its feedback code without declaring it atomic."""

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        super()._update(indices, values)


def test_every_registered_builtin_selector_declares_atomic_feedback() -> None:
    builtin = [c for c in registered("selector") if c.factory.__module__.startswith("flexkit.")]
    assert builtin
    assert {c.name: c.factory.atomic_feedback for c in builtin} == {c.name: True for c in builtin}
    learners = [c for c in builtin if c.factory.learns_from_feedback]
    assert all("atomic_feedback" in c.factory.__dict__ for c in learners)  # declared where _update is written


def test_the_declaration_follows_the_feedback_code_not_the_module() -> None:
    assert Selector.atomic_feedback is True  # validate, then an _update that ignores feedback
    assert Counting.atomic_feedback is False  # overrides _update, declares nothing: copied and restored
    assert DeclaredAtomic.atomic_feedback is True
    assert ReplayVariant.atomic_feedback is True  # inherits the built-in's code and its declaration
    assert LearnabilityVariant.atomic_feedback is False


def _payload(tid: int, indices: list[int]) -> tuple[int, np.ndarray, np.ndarray]:
    return tid, np.asarray(indices, dtype=np.int64), np.full(len(indices), 0.5)


@pytest.mark.parametrize(("cls", "copied"), [(Counting, 1), (DeclaredAtomic, 0)])
def test_only_undeclared_selectors_are_copied_before_feedback(cls: type[Counting], copied: int) -> None:
    selector = cls(size=4)
    apply_feedback([TasksetEntry(name="a", taskset=range(4), selector=selector)], [_payload(0, [1, 2])])
    assert selector.snapshots == copied
    assert selector.seen.tolist() == [0.0, 0.5, 0.5, 0.0]


def test_an_undeclared_selector_is_restored_when_a_later_part_fails() -> None:
    learner, broken = Counting(size=4), Broken(size=4)
    entries = [TasksetEntry(name="a", taskset=range(4), selector=learner),
               TasksetEntry(name="b", taskset=range(4), selector=broken)]
    with pytest.raises(ComponentError, match=r"taskset .b.*no selector changed"):
        apply_feedback(entries, [_payload(0, [1]), _payload(1, [0])])
    assert learner.seen.tolist() == [0.0] * 4
