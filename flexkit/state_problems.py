"""Checking a loaded state before any of it is applied: each owner checks its own slice.

Every owner of checkpointed state (the pipeline, the scheduler, the mix, the prefetched batch, the sample stage,
the run counters) has a ``check_state(state, path, problems)`` method: it looks at its own slice of a loaded
state, found at key path ``path``, and appends one readable problem per bad value to ``problems``
(``pipeline.scheduler.step: expected a step number >= 0, got -1``), handing its children's slices to them under
their keys. Whoever loads collects the list and raises one error listing every problem. Components (selectors,
scorers, actuators, trainers) check their own state in ``load_state_dict``, before they apply any of it.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np

from flexkit.errors import KeyPath, format_key_path

__all__ = ["add_problem", "is_count", "is_number", "short"]


def add_problem(problems: list[str], path: KeyPath, message: str) -> None:
    """Append ``message`` about the value at key path ``path`` to ``problems`` as ``key.path: message``."""
    problems.append(f"{format_key_path(path)}: {message}")


def is_count(value: Any) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a non-negative int (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and bool(value >= 0)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
