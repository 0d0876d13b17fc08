"""A selector's optional members are declared on the base (documented defaults) and read in one place for
duck-typed plugin selectors (flexkit.selectors._members)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from flexkit import make_selector
from flexkit.selectors import _members as members


class DuckSelector:
    """A plugin selector that does not derive from flexkit's base."""

    learns_from_feedback = True

    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        return np.arange(batch_size)

    def estimates(self) -> np.ndarray:
        return np.full(4, 0.25)

    def observe_evaluation(self, metrics: dict[str, float]) -> None:
        self.seen.append(metrics)


class Bare:
    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        return np.arange(batch_size)


def test_built_in_selectors_declare_their_estimates_and_defaults() -> None:
    levels = np.repeat(np.arange(1, 3), 5)
    for name in ("frontier", "learnability"):
        selector = make_selector(name, size=10, features={"level": levels}, feature_keys=["level"])
        assert np.asarray(members.predicted_pass_rates(selector)).shape == (10,)
    shuffle = make_selector("shuffle", size=10)
    assert members.predicted_pass_rates(shuffle) is None and members.summary(shuffle) == {}
    assert not members.flag(shuffle, "learns_from_feedback")


def test_a_duck_typed_selector_is_read_by_what_it_has() -> None:
    duck = DuckSelector()
    assert members.predicted_pass_rates(duck).tolist() == [0.25] * 4
    assert members.flag(duck, "learns_from_feedback") and not members.flag(duck, "atomic_feedback")
    members.observe_evaluation(duck, {"val": 1.0})
    assert duck.seen == [{"val": 1.0}]
    bare = Bare()
    assert members.predicted_pass_rates(bare) is None and members.summary(bare) == {}
    members.observe_evaluation(bare, {"val": 1.0})  # takes no evaluation: nothing happens


def test_an_unknown_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="not a selector flag"):
        members.flag(Bare(), "allows_repeat")
