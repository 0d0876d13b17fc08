"""How each taskset's drawn tasks are counted by group: the selector's grouping column (the ``feature_keys`` of a
selector that groups tasks: a string label, or a number column cut into its ``bins``), else the taskset's first
categorical column. ``flexkit preview`` shows a step's mix this way, and the host metrics report it
(``flexkit/group_mix/<taskset>/<group>``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from flexkit.selectors._base import feature_keys_of
from flexkit.selectors._grouping import TaskGroups, group_label

__all__ = ["CATEGORY_SAMPLE", "MAX_CATEGORIES", "TasksetGrouping", "first_categorical_column", "taskset_grouping"]

#: Rows read (evenly strided) to find a taskset's first categorical column.
CATEGORY_SAMPLE = 256
#: Most distinct values a categorical column has among those rows (and at most half as many as the rows).
MAX_CATEGORIES = 32


@attrs.frozen
class TasksetGrouping:
    """How one taskset's drawn tasks are counted: by the columns ``keys``, cut into the pool's quantile ``bins``
    (then ``groups``, the selector's own grouping of the pool) or by their values."""

    keys: tuple[str, ...]
    bins: int = 0
    groups: TaskGroups | None = None

    @property
    def title(self) -> str:
        """``level``, ``source`` or ``difficulty (4 bins)``."""
        return ", ".join(self.keys) + (f" ({self.bins} bins)" if self.bins else "")

    def name(self, task: Any) -> str:
        """The group of ``task`` (a value, ``"[0.1, 0.3)"`` for a bin; ``key=value, ...`` for several columns)."""
        return self.name_of(int(task.index), task.data)

    def name_of(self, index: int, row: Any) -> str:
        """The group of the task at ``index`` whose row is ``row`` (see :meth:`name`)."""
        if self.groups is not None:
            name = self.groups.names[int(self.groups.group[index])]
        else:
            values = row if isinstance(row, Mapping) else {}
            name = ", ".join(f"{key}={group_label(values[key]) if key in values else '?'}" for key in self.keys)
        if len(self.keys) == 1:
            name = name.removeprefix(self.keys[0]).removeprefix("=").removeprefix("∈")
        return name

    def counts(self, tasks: Sequence[Any]) -> dict[str, int]:
        """How many of ``tasks`` fall in each group (the groups' order, numbers by value)."""
        return self.ordered([self.name(task) for task in tasks])

    def counts_of(self, taskset: Any, indices: Sequence[int] | np.ndarray) -> dict[str, int]:
        """How many of the tasks at ``indices`` of ``taskset`` fall in each group (rows read only when the groups
        are the rows' values)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        rows = taskset.read(indices) if self.groups is None and indices.size else [None] * indices.size
        return self.ordered([self.name_of(int(i), row) for i, row in zip(indices, rows, strict=True)])

    def ordered(self, names: Sequence[str]) -> dict[str, int]:
        """Count ``names``, in the groups' order (numbers by value)."""
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        if self.groups is not None:
            order = {name.removeprefix(self.keys[0]).removeprefix("∈") if len(self.keys) == 1 else name: i
                     for i, name in enumerate(self.groups.names)}
            return dict(sorted(counts.items(), key=lambda item: order.get(item[0], len(order))))
        return dict(sorted(counts.items(), key=lambda item: _natural(item[0])))


def _natural(name: str) -> tuple[int, float, str]:
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def taskset_grouping(selector_config: Any, taskset: Any, name: str) -> TasksetGrouping | None:
    """The grouping of a taskset's drawn tasks: the ``feature_keys`` of a selector that groups tasks (its config has
    ``bins``: 0 groups by value, k by the pool's k quantile bins, as the selector does), else the taskset's first
    categorical column (:func:`first_categorical_column`); ``None`` when there is none."""
    params = attrs.asdict(selector_config, recurse=False) if attrs.has(type(selector_config)) else {}
    keys = feature_keys_of(selector_config)
    if keys and "bins" in params:
        bins = int(params["bins"] or 0)
        if bins > 0:
            groups = TaskGroups.from_features(taskset.features(keys), keys, len(taskset), bins=bins,
                                              owner=f"the mix of {name!r}")
            return TasksetGrouping(keys, bins, groups)
        return TasksetGrouping(keys)
    column = first_categorical_column(taskset)
    return TasksetGrouping((column,)) if column is not None else None


def first_categorical_column(taskset: Any) -> str | None:
    """The first column (in row order) of :data:`CATEGORY_SAMPLE` evenly strided rows whose values are all labels
    (strings or integers) with at most :data:`MAX_CATEGORIES` distinct values, and at most half as many as the rows
    (an id or a prompt is no category); ``None`` when no column is."""
    size = len(taskset)
    if size == 0:
        return None
    rows = taskset.read(np.unique(np.linspace(0, size - 1, min(size, CATEGORY_SAMPLE)).astype(np.int64)))
    limit = min(MAX_CATEGORIES, max(1, len(rows) // 2))
    for key in rows[0]:
        values = [row.get(key) for row in rows]
        if not all(isinstance(v, (str, int, np.integer)) and not isinstance(v, bool) for v in values):
            continue
        if len({group_label(v) for v in values}) <= limit:
            return str(key)
    return None
