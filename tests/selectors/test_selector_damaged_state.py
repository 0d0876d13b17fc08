"""A damaged or foreign state given to any registered selector's own ``load_state_dict`` (not only through a
pipeline's checkpoint) is refused as :class:`~flexkit.errors.StateMismatchError` and leaves the selector as it
was: every key of its state dropped, or replaced by values of the wrong type, shape or range."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from flexkit.errors import FlexkitError, StateMismatchError
from flexkit.selectors import Selector
from flexkit.selectors._base import checked_load
from tests.selectors.test_selector_resume import KINDS, assert_same_state, build

#: What replaces a value: nothing (the key dropped), and values of the wrong type, shape or range (1e300 and -1
#: overflow the RNG's integers).
DAMAGE: list[Any] = ["drop", None, "x", -1, [1, 2], {"a": 1}, 1e300, float("nan")]


def _paths(state: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in state.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from _paths(value, (*prefix, key))


def _damaged(state: dict[str, Any], path: tuple[str, ...], damage: Any) -> dict[str, Any]:
    out = copy.deepcopy(state)
    table = out
    for key in path[:-1]:
        table = table[key]
    if damage == "drop":
        del table[path[-1]]
    else:
        table[path[-1]] = damage
    return out


def _trained(kind: str, seed: int) -> Selector:
    sel = build(kind, 12, seed, {})
    plan = np.random.default_rng(seed)
    for _ in range(3):
        idx = np.unique(sel.get_indices(4))
        sel.feedback(idx, plan.random(idx.size).round())
    return sel


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN cast to an integer while the state is read
@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_state_is_refused_by_name_and_changes_nothing(kind: str) -> None:
    state = _trained(kind, 0).state_dict()
    target = _trained(kind, 1)
    before = copy.deepcopy(target.state_dict())
    refused = 0
    for path in _paths(state):
        for damage in DAMAGE:
            try:
                target.load_state_dict(_damaged(state, path, damage))
            except StateMismatchError as exc:
                refused += 1
                assert str(exc).count(type(target).__name__) == 1, str(exc)  # named once, whoever raised it
            except FlexkitError:
                refused += 1
            else:  # accepted (a value the selector reads leniently): put the selector back for the next case
                target.load_state_dict(before)
                continue
            assert_same_state(target.state_dict(), before)
    assert refused, f"{kind}: no damaged state was refused"


def test_the_rng_overflow_that_escaped_as_overflow_error_is_a_state_mismatch() -> None:
    """Regression: an RNG counter past 64 bits raised a bare OverflowError (no ValueError) from load_state_dict."""
    sel = _trained("random", 0)
    state = sel.state_dict()
    state["rng"]["state"]["state"] = 1e300
    before = copy.deepcopy(sel.state_dict())
    with pytest.raises(StateMismatchError, match="OverflowError"):
        sel.load_state_dict(state)
    assert_same_state(sel.state_dict(), before)


def test_a_subclass_calling_super_is_checked_once_and_restored_whole() -> None:
    """The outermost load takes the copy; a failure after super().load_state_dict has run puts the RNG back."""

    class Counting(Selector):
        def _init_state(self) -> None:
            self.count = 0

        def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
            return self.rng.choice(self.size, batch_size, replace=False), {}

        def state_dict(self) -> dict[str, Any]:
            return {**super().state_dict(), "count": self.count}

        def load_state_dict(self, state: Any) -> None:
            super().load_state_dict(state)  # the RNG first: restored if what follows fails
            self.count = int(state["count"])

    sel = Counting(size=5, seed=0)
    good = Counting(size=5, seed=9)
    good.get_indices(3)
    good.count = 4
    bad = good.state_dict() | {"count": "many"}
    before = copy.deepcopy(sel.state_dict())
    with pytest.raises(StateMismatchError, match=r"Counting.*ValueError"):
        sel.load_state_dict(bad)
    assert_same_state(sel.state_dict(), before)
    sel.load_state_dict(good.state_dict())
    assert sel.count == 4 and sel.get_indices(2).tolist() == good.get_indices(2).tolist()
    assert checked_load(Counting.load_state_dict) is Counting.load_state_dict  # wrapped once


def test_a_selectors_own_state_mismatch_names_it_when_called_directly() -> None:
    """Regression: ``shuffle``'s position out of range said nothing of which selector refused it."""
    sel = _trained("shuffle", 0)
    state = sel.state_dict()
    state["position"] = 10**6
    with pytest.raises(StateMismatchError, match=r"^the saved state does not fit this 'shuffle' \(ShuffleSelector\) "
                                                 r"selector: .*position"):
        sel.load_state_dict(state)
