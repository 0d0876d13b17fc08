"""Carrying each row's dataset index through verl's rollout.

verl's trainer replaces ``uid`` with fresh UUIDs, pops most non-tensor fields into the generation batch and may
reorder the batch (``balance_batch``), so the dataset index a sampler yielded is lost by the time rewards exist.
The fields it keeps on the training batch are the reward fields (``data_source``, ``reward_model``,
``extra_info``, ``uid``); :class:`IndexedDataset` stores the index in ``extra_info[INDEX_KEY]``, which reward
functions receive and ignore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexkit import FeedbackError, WithIndex

#: Where a row's dataset index travels: ``extra_info[INDEX_KEY]`` (or a non-tensor field of that name).
INDEX_KEY = "flexkit_index"


class IndexedDataset(WithIndex):  # type: ignore[misc]  # flexkit exports it lazily (Any to mypy)
    """A map-style dataset of dict rows whose rows get ``extra_info[INDEX_KEY] = index`` (a copy of
    ``extra_info``; the wrapped row is not changed). Other attributes are the wrapped dataset's."""

    def with_index(self, index: int, item: Any) -> dict[str, Any]:
        """A copy of ``item`` (a dict row) whose ``extra_info`` holds its index under :data:`INDEX_KEY`."""
        if not isinstance(item, Mapping):
            raise TypeError(f"IndexedDataset needs rows that are dicts, got {type(item).__name__}")
        row = dict(item)
        extra = row.get("extra_info")
        row["extra_info"] = {**(dict(extra) if isinstance(extra, Mapping) else {}), INDEX_KEY: index}
        return row

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (unpickling): avoid recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


def dataset_indices(non_tensor_batch: Mapping[str, Any], key: str = INDEX_KEY) -> np.ndarray:
    """The dataset index of every sample: the non-tensor field ``key``, else ``extra_info[key]``.

    Raises :class:`~flexkit.FeedbackError` saying how to provide them when neither is there.
    """
    if key in non_tensor_batch:
        values = list(non_tensor_batch[key])
    elif "extra_info" in non_tensor_batch:
        values = []
        for extra in non_tensor_batch["extra_info"]:
            if not isinstance(extra, Mapping) or key not in extra:
                values = None
                break
            values.append(extra[key])
    else:
        values = None
    if values is None:
        raise FeedbackError(f"the batch carries no dataset indices (non-tensor field {key!r} or "
                            f"extra_info[{key!r}]); wrap the training dataset in flexkit_verl.IndexedDataset")
    try:
        return np.asarray([int(v) for v in values], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"dataset indices must be integers: {exc}") from None
