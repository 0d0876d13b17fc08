"""The datasets TRL trains and evaluates on: each row's dataset index, as a column TRL hands to reward functions and
to ``_calculate_rewards``, and the columns TRL reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch.utils.data

from flexkit import ConfigError, ConfigIssue, WithIndex

#: The column holding each row's dataset index.
INDEX_COLUMN = "flexkit_index"
#: The column TRL's ``GRPOTrainer`` reads each row's prompt from.
PROMPT_COLUMN = "prompt"


class _IndexedRows(WithIndex):  # type: ignore[misc]  # flexkit exports it lazily (Any to mypy)
    """A map-style dataset of dict rows, each with ``INDEX_COLUMN`` set to its index."""

    def with_index(self, index: int, item: Any) -> dict[str, Any]:
        """``item`` (a dict row) with its index in :data:`INDEX_COLUMN`."""
        if not isinstance(item, Mapping):
            raise TypeError(f"GRPOTrainer rows must be dicts, got {type(item).__name__}")
        return {**item, INDEX_COLUMN: index}


@runtime_checkable
class _MapStyle(Protocol):
    """A map-style dataset, as far as the sampler needs one: rows read by index."""

    def __getitem__(self, index: Any) -> Any:
        """The row at ``index``."""
        ...


@runtime_checkable
class _ColumnDataset(Protocol):
    """A ``datasets.Dataset``, as far as :func:`with_index_column` reads it: its columns, and a new one added."""

    column_names: Any

    def __len__(self) -> int:
        """The number of rows."""
        ...

    def add_column(self, name: str, column: Any) -> Any:
        """A new dataset with ``column`` under ``name``."""
        ...


def with_index_column(dataset: Any) -> Any:
    """``dataset`` with each row's index in :data:`INDEX_COLUMN` (kept when already there and correct).

    A ``datasets.Dataset`` gets a column (``add_column``); any other map-style dataset of dict rows is wrapped.
    Iterable datasets have no indices for a sampler to yield and are refused.
    """
    if isinstance(dataset, torch.utils.data.IterableDataset) or not isinstance(dataset, _MapStyle):
        raise TypeError("a flexkit sampler needs a map-style dataset (with __len__ and __getitem__), "
                        f"got {type(dataset).__name__}")
    if isinstance(dataset, _ColumnDataset) and dataset.column_names is not None:
        if INDEX_COLUMN in dataset.column_names:
            if list(dataset[INDEX_COLUMN]) != list(range(len(dataset))):
                raise ValueError(f"column {INDEX_COLUMN!r} exists but does not hold each row's index")
            return dataset
        return dataset.add_column(INDEX_COLUMN, list(range(len(dataset))))
    return _IndexedRows(dataset)


@runtime_checkable
class _Columned(Protocol):
    """A dataset that lists its columns (``datasets.Dataset``; an ``IterableDataset`` may list none)."""

    column_names: Any


def listed_columns(dataset: Any) -> list[str] | None:
    """The columns ``dataset`` lists (``datasets.Dataset``), or ``None`` when it lists none."""
    names = dataset.column_names if isinstance(dataset, _Columned) else None
    return list(names) if isinstance(names, (list, tuple)) else None


def eval_parts(eval_dataset: Any) -> list[tuple[str, Any]]:
    """``eval_dataset`` as (label, dataset) pairs: one dataset, or each of a mapping of named ones."""
    return list(eval_dataset.items()) if isinstance(eval_dataset, Mapping) else [("eval_dataset", eval_dataset)]


def check_prompt_columns(train_dataset: Any, eval_dataset: Any) -> None:
    """Refuse datasets that list their columns without TRL's :data:`PROMPT_COLUMN`: ``GRPOTrainer`` reads each
    row's prompt from it, and would fail with a ``KeyError`` only inside ``train()``."""
    parts = [("train_dataset", train_dataset), *(eval_parts(eval_dataset) if eval_dataset is not None else [])]
    issues = []
    for label, dataset in parts:
        names = listed_columns(dataset)
        if names is not None and PROMPT_COLUMN not in names:
            issues.append(ConfigIssue(label, (
                f"has no {PROMPT_COLUMN!r} column (it has {', '.join(map(repr, names))}): TRL's GRPOTrainer reads "
                f"each row's prompt from {PROMPT_COLUMN!r}; rename yours, e.g. "
                f"dataset.rename_column({names[0] if names else 'question'!r}, {PROMPT_COLUMN!r})")))
    if issues:
        raise ConfigError(issues)
