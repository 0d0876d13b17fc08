"""Applying a validated feedback payload to the selectors of several tasksets, all or nothing.

Used by :meth:`flexkit.TasksetScheduler.feedback` once the payload is validated whole. A selector
whose
class declares :attr:`~flexkit.Selector.atomic_feedback` is trusted to change nothing unless it
succeeds; any other selector's state is copied first and restored when a part of the payload fails.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from flexkit.errors import ComponentError, FeedbackError, FlexkitError
from flexkit.plugins._contract import SelectorLike, describe_component
from flexkit.selectors import _members as members
from flexkit.selectors._base import Selector

if TYPE_CHECKING:
    from flexkit.scheduler._tasks import TasksetEntry


def apply_feedback(entries: Sequence[TasksetEntry], checked: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> None:
    """Give each selector its part of a validated payload, all or nothing.

    A selector whose class declares :attr:`~flexkit.Selector.atomic_feedback` changes nothing
    until its input is valid, and the input was validated, so it cannot fail part-way; any other selector's state
    is copied before its part, and those parts go first. When a selector raises, every copied state is restored and a
    :class:`~flexkit.errors.FeedbackError` (the selector refused its part) or
    :class:`~flexkit.errors.ComponentError` (it failed) names it. A selector keeping
    :class:`~flexkit.Selector`'s ``feedback`` is not validated again (:func:`_give`). Copying
    costs one copy of a plugin selector's state per feedback; flexkit's own selectors declare atomic feedback and
    cost nothing.
    """
    parts = [part for part in checked if part[1].size]
    parts.sort(key=lambda part: _atomic_feedback(entries[part[0]].selector))  # copied ones first (stable)
    saved: dict[int, Any] = {}
    applied: list[int] = []
    for tid, idx, vals in parts:
        selector = entries[tid].selector
        try:
            if not _atomic_feedback(selector):
                saved[tid] = copy.deepcopy(selector.state_dict())
            _give(selector, idx, vals)
        except Exception as exc:
            _restore(entries, saved, applied, tid, exc)
        applied.append(tid)


def _give(selector: SelectorLike, idx: np.ndarray, vals: np.ndarray) -> None:
    """Hand one selector its validated part: straight to :meth:`Selector._feedback_validated` when its
    ``feedback`` is the base class's (the payload was validated once, in
    :func:`flexkit.scheduler._feedback_check.check_feedback_payload`), else through its own ``feedback`` (a plugin
    selector,
    or one that overrides it, sees the public call as before)."""
    if (isinstance(selector, Selector) and type(selector).feedback is Selector.feedback
            and "feedback" not in vars(selector)):  # neither its class nor the object itself replaced it
        selector._feedback_validated(idx, vals)
    else:
        selector.feedback(idx, vals)


def _restore(entries: Sequence[TasksetEntry], saved: Mapping[int, Any], applied: Sequence[int], failed: int,
             exc: Exception) -> NoReturn:
    """Undo the parts of a payload already applied (their saved states), then raise about ``failed``'s error."""
    entry = entries[failed]
    for tid, state in saved.items():
        entries[tid].selector.load_state_dict(state)
    unsaved = [entries[tid].name for tid in applied if tid not in saved]
    where = f"taskset {entry.name!r}"
    if unsaved:  # only a built-in selector failing after another built-in one took its part can get here
        raise FlexkitError(f"{where}: {describe_component(entry.selector, 'selector')} raised "
                           f"{type(exc).__name__}: {exc} while taking feedback, after taskset(s) "
                           f"{', '.join(map(repr, unsaved))} had taken theirs; the scheduler's state is no longer "
                           "consistent, load the last checkpoint") from exc
    if isinstance(exc, FeedbackError):
        raise FeedbackError(f"{where}: {exc} (no selector changed)") from exc
    raise ComponentError(f"{where}: {describe_component(entry.selector, 'selector')} raised {type(exc).__name__}: "
                         f"{exc} while taking feedback; the payload was not applied (no selector changed)") from exc


def _atomic_feedback(selector: SelectorLike) -> bool:
    """Whether ``selector``'s class declares its feedback atomic (``atomic_feedback = True``); undeclared: no."""
    return members.flag(selector, "atomic_feedback")
