"""``TaskTable``: two float64 values per task with defaults for tasks never updated, in memory that grows with
the tasks that received feedback once a taskset is large.

Up to :data:`DENSE_MAX` tasks the values are two dense arrays (16 bytes per task, the fastest lookups). Above, a
dict maps each updated task to a slot of two growable arrays: a taskset of 10^8 tasks whose selector saw
feedback for 10^6 of them holds about 10^6 × (16 + ~100 dict) bytes instead of 1.6 GB. Both layouts compute with
the same float64 values, so a selector's choices do not depend on the layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from flexkit.errors import StateMismatchError

#: Largest taskset kept in dense arrays; larger ones use the sparse table.
DENSE_MAX = 1 << 24


class TaskTable:
    """Values ``(a, b)`` per task of ``0 .. size-1``; a task never :meth:`set` has ``defaults``.

    Args:
        size: number of tasks.
        defaults: ``(a, b)`` of a task never updated.
        names: the state keys of ``a`` and ``b`` (e.g. ``("sums", "counts")``).
    """

    def __init__(self, size: int, defaults: tuple[float, float], names: tuple[str, str]) -> None:
        self.size = int(size)
        self.defaults = (float(defaults[0]), float(defaults[1]))
        self.names = names
        self.sparse = self.size > DENSE_MAX
        if self.sparse:
            self._slots: dict[int, int] = {}
            self._a = np.empty(0)
            self._b = np.empty(0)
        else:
            self._a = np.full(self.size, self.defaults[0])
            self._b = np.full(self.size, self.defaults[1])

    # -- values -----------------------------------------------------------------------------------------

    def get(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)`` of ``indices`` (fresh arrays)."""
        if not self.sparse:
            return self._a[indices], self._b[indices]
        slots = self._lookup(indices)
        a, b = np.full(len(slots), self.defaults[0]), np.full(len(slots), self.defaults[1])
        hit = np.flatnonzero(slots >= 0)
        a[hit], b[hit] = self._a[slots[hit]], self._b[slots[hit]]
        return a, b

    def set(self, indices: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """Store ``(a, b)`` for ``indices`` (distinct)."""
        if not self.sparse:
            self._a[indices], self._b[indices] = a, b
            return
        slots = self._lookup(indices)
        new = np.flatnonzero(slots < 0)
        if new.size:
            start = len(self._slots)
            self._grow(start + new.size)
            for offset, index in enumerate(np.asarray(indices)[new].tolist()):
                self._slots[int(index)] = start + offset
            slots[new] = np.arange(start, start + new.size)
        self._a[slots], self._b[slots] = a, b

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """Every task's ``(a, b)`` (two arrays of ``size``: 16 bytes per task, also in the sparse layout)."""
        if not self.sparse:
            return self._a, self._b
        a = np.full(self.size, self.defaults[0])
        b = np.full(self.size, self.defaults[1])
        ids, sa, sb = self._items()
        a[ids], b[ids] = sa, sb
        return a, b

    def stored(self) -> int:
        """Tasks holding memory of their own (all of them in the dense layout)."""
        return len(self._slots) if self.sparse else self.size

    def _lookup(self, indices: np.ndarray) -> np.ndarray:
        get = self._slots.get
        return np.fromiter((get(i, -1) for i in np.asarray(indices).tolist()), dtype=np.int64, count=len(indices))

    def _grow(self, needed: int) -> None:
        if needed <= len(self._a):
            return
        capacity = max(needed, 2 * len(self._a), 1024)
        self._a, self._b = (_grown(old, capacity) for old in (self._a, self._b))

    def _items(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored task ids (sorted) and their ``a``, ``b``."""
        ids = np.fromiter(self._slots.keys(), dtype=np.int64, count=len(self._slots))
        slots = np.fromiter(self._slots.values(), dtype=np.int64, count=len(self._slots))
        order = np.argsort(ids, kind="stable")
        return ids[order], self._a[slots[order]], self._b[slots[order]]

    # -- state ------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Dense: ``{a_name: array, b_name: array}`` of ``size``; sparse: the same keys over the stored tasks only,
        with their ids under ``"task_ids"`` (sorted)."""
        if not self.sparse:
            return {self.names[0]: self._a.copy(), self.names[1]: self._b.copy()}
        ids, a, b = self._items()
        return {"task_ids": ids, self.names[0]: a, self.names[1]: b}

    @classmethod
    def from_state(cls, size: int, defaults: tuple[float, float], names: tuple[str, str], state: Mapping[str, Any],
                   check: Callable[[np.ndarray, np.ndarray], None]) -> TaskTable:
        """A table holding :meth:`state_dict` output of either layout (a dense state in a sparse table keeps the
        tasks that differ from the defaults). ``check(a, b)`` validates the values (raises
        :class:`~flexkit.errors.StateMismatchError`), as does the layout check here; the caller's table is
        untouched either way."""
        table = cls(size, defaults, names)
        a = np.array(state[names[0]], dtype=np.float64).reshape(-1)
        b = np.array(state[names[1]], dtype=np.float64).reshape(-1)
        if "task_ids" in state:
            ids = np.array(state["task_ids"], dtype=np.int64).reshape(-1)
            if not (len(ids) == len(a) == len(b)):
                raise StateMismatchError(f"saved 'task_ids', {names[0]!r} and {names[1]!r} differ in length")
            if ids.size and (ids.min() < 0 or ids.max() >= size or (np.diff(ids) <= 0).any()):
                raise StateMismatchError(f"saved 'task_ids' must be sorted, distinct ids in 0 .. {size - 1}")
        else:
            for name, arr in zip(names, (a, b), strict=True):
                if arr.shape != (size,):
                    raise StateMismatchError(f"saved {name!r} has shape {arr.shape}, expected ({size},)")
            ids = np.arange(size, dtype=np.int64)
        for name, arr in zip(names, (a, b), strict=True):
            if arr.size and not np.isfinite(arr).all():
                raise StateMismatchError(f"saved {name!r} holds NaN or infinite values")
        check(a, b)
        if table.sparse and "task_ids" not in state:
            keep = (a != table.defaults[0]) | (b != table.defaults[1])
            ids, a, b = ids[keep], a[keep], b[keep]
        table.set(ids, a, b)
        return table


def _grown(old: np.ndarray, capacity: int) -> np.ndarray:
    """``old`` copied into a new float64 array of ``capacity`` slots (the rest unset)."""
    grown = np.empty(capacity)
    grown[: len(old)] = old
    return grown
