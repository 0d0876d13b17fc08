"""Whether a dataset handed to a host is the pipeline's tasksets' rows in the same order.

A sampler yields taskset row numbers and the host's loader reads its own dataset at them; only the lengths must
agree for that to run, so a dataset shuffled, sorted or filtered-and-refilled after the pipeline's file was written
would train on other rows than the selectors count, silently. :func:`check_rows_line_up` compares the columns the
selectors read on a strided sample of rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexkit.errors import ConfigError
from flexkit.scheduler._scheduler import TasksetScheduler
from flexkit.selectors._base import columns_of, feature_keys_of

__all__ = ["ROWS_CHECKED", "check_rows_line_up"]

#: Rows per taskset (evenly strided) whose selector columns :func:`check_rows_line_up` compares.
ROWS_CHECKED = 256


def _same_value(ours: Any, theirs: Any) -> bool:
    """Whether a taskset row's value and a dataset item's value are the same (numbers by value, so ``3`` from a
    JSON file equals ``np.int64(3)`` or ``3.0`` from a dataset; NaN equals NaN)."""
    numbers = (int, float, np.integer, np.floating)
    if isinstance(ours, numbers) and isinstance(theirs, numbers) and not isinstance(ours, bool) \
            and not isinstance(theirs, bool):
        a, b = float(ours), float(theirs)
        return a == b or (a != a and b != b)
    return bool(ours == theirs) if type(ours) is type(theirs) else str(ours) == str(theirs)


def check_rows_line_up(dataset: Any, scheduler: TasksetScheduler) -> None:
    """Check that the dataset's rows are the tasksets' rows in the same order, where both hold the columns the
    selectors read (their ``feature_keys``, and a ``text_key`` whose values are text on both sides).

    The sampler yields taskset row numbers and the loader reads the dataset at them, so a dataset shuffled, sorted
    or otherwise reordered after the pipeline's file was written would train on other rows than the selectors
    count, with no error. Up to :data:`ROWS_CHECKED` rows per taskset, evenly strided, are compared; items that
    are not mappings (tuples, tensors) have no columns to compare and are not checked. Raises
    :class:`~flexkit.ConfigError` naming the first differing row and how many of those compared differ."""
    offsets = np.concatenate([[0], np.cumsum(scheduler.sizes)]).astype(np.int64)
    for number, entry in enumerate(scheduler.entries):
        columns = columns_of(entry.selector.config)  # the feature keys, then a text key
        keys = feature_keys_of(entry.selector.config)
        text = columns[len(keys):]
        if not columns or entry.size == 0:
            continue
        picks = np.unique(np.linspace(0, entry.size - 1, min(entry.size, ROWS_CHECKED)).astype(np.int64))
        differing: list[str] = []
        for index, row in zip(picks.tolist(), entry.taskset.read(picks), strict=True):
            item = dataset[int(offsets[number] + index)]
            if not isinstance(item, Mapping):
                return
            for key in columns:
                if key not in item or key not in row:
                    continue
                if key in text and not (isinstance(item[key], str) and isinstance(row[key], str)):
                    continue
                if not _same_value(row[key], item[key]):
                    differing.append(f"row {index}: the taskset's {key!r} is {row[key]!r}, the dataset's "
                                     f"{item[key]!r}")
                    break
        if differing:
            where = f" (global index {offsets[number]} + row)" if number else ""
            raise ConfigError(
                f"the dataset's rows are not taskset {entry.name!r}'s rows in the same order{where}: at "
                f"{differing[0]} ({len(differing)} of the {len(picks)} rows compared differ). The sampler yields "
                "row numbers of the pipeline's tasksets: give the trainer the dataset in the pipeline file's row "
                "order (no shuffle(), sort() or filter() after writing the file; the selector does the drawing), "
                "or write the file from the dataset as it is now")
