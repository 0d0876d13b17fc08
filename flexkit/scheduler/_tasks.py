"""The scheduler's two records: a :class:`Task` it hands out, and a :class:`TasksetEntry` it drives (the helpers
of :mod:`flexkit.scheduler._scheduler` import them from here, not from the scheduler)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["Task", "TasksetEntry"]


@attrs.frozen(kw_only=True)
class Task:
    """One task of a batch: which taskset it came from (id and name), its index there, and its row."""

    taskset_id: int
    taskset: str
    index: int
    data: Mapping[str, Any]


@attrs.define(kw_only=True)
class TasksetEntry:
    """A taskset as the scheduler drives it: its name, rows, selector and optional weight."""

    name: str
    taskset: Any
    selector: Any
    weight: float | None = None

    @property
    def size(self) -> int:
        """Number of tasks in the taskset."""
        return len(self.taskset)
