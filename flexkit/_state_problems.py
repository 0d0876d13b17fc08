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
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from flexkit.errors import KeyPath, format_key_path

__all__ = ["NOT_A_NUMBER", "add_problem", "is_count", "is_number", "plain_number", "short"]


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


#: What :func:`plain_number` returns for a value that is not a number.
NOT_A_NUMBER: Any = object()
#: The libraries whose 0-d arrays and tensors :func:`plain_number` reads with ``.item()``.
_ARRAY_MODULES = frozenset({"numpy", "torch", "jax", "jaxlib", "cupy"})


@runtime_checkable
class _Scalar(Protocol):
    """An array library's array or tensor, as far as :func:`plain_number` reads it (0-d: ``shape == ()``)."""

    shape: Any

    def item(self) -> Any:
        """The one value of a 0-d array as a Python scalar."""
        ...


def plain_number(value: Any) -> Any:
    """``value`` as a Python number: an int or float as it is, a numpy scalar, a 0-d numpy array or a 0-d tensor
    (torch, jax, cupy) through ``.item()``; ``None`` and bools are returned as they are (neither is a number to
    :func:`is_number`), anything else (text, a list, an array of several values) as :data:`NOT_A_NUMBER`. No
    array library is imported: a tensor is known by its type's module."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        value = value.item()  # first: np.float64 is a float, but not a plain one
    elif value is None or isinstance(value, (bool, int, float)):
        return value
    elif (type(value).__module__.partition(".")[0] in _ARRAY_MODULES and isinstance(value, _Scalar)
          and value.shape == ()):
        try:
            value = value.item()
        except Exception:  # whatever a foreign array type raises: not a number
            return NOT_A_NUMBER
    return value if value is None or isinstance(value, (bool, int, float)) else NOT_A_NUMBER


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
