"""JSON tasksets (``.json``): a top-level list of objects, loaded whole.

JSON cannot be indexed without parsing it; use JSON Lines for large tasksets.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from flexkit.tasksets._base import Taskset, _column_from_rows

__all__ = ["JsonTaskset"]


def _copy_json(value: Any) -> Any:
    """A deep copy of parsed JSON (dicts, lists, scalars), much faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


class JsonTaskset(Taskset):
    """A JSON file holding a top-level list of objects.

    Loaded whole when opened: JSON cannot be indexed without parsing all of it. Use JSON Lines for tasksets
    too large to hold in memory. The content digest (:meth:`~flexkit.tasksets.Taskset.content_id`) is of the
    bytes parsed when it was opened, so a file replaced later cannot pass for the rows the run read.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._columns: dict[str, np.ndarray] = {}
        fd = self._open_file()  # a FIFO is refused, not waited on
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read()
            # The content digest of the bytes parsed here, not of whatever the path holds at the first checkpoint
            self.__dict__["_content_id_cache"] = f"sha256:{hashlib.sha256(raw).hexdigest()} ({len(raw)} bytes)"
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise self._error(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        except ValueError as exc:  # UnicodeDecodeError
            raise self._error(f"invalid JSON: {exc}") from None
        except OSError as exc:
            raise self._error(f"cannot open: {exc.strerror or exc}") from None
        if not isinstance(data, list):
            raise self._error(
                f"a .json taskset must hold a list of objects, got a {type(data).__name__} "
                "(for one object a line, use a .jsonl file)"
            )
        for i, row in enumerate(data):
            if not isinstance(row, dict):
                kind = type(row).__name__ if row is not None else "null"
                raise self._error(f"item {i}: a row must be a JSON object, got {kind}")
        if not data:
            raise self._error("empty taskset: the list has no rows")
        self._rows: list[dict[str, Any]] = data

    def __len__(self) -> int:
        return len(self._rows)

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` (deep copies)."""
        rows = self._rows
        return [_copy_json(rows[i]) for i in self._indices(indices).tolist()]

    def _first_keys(self) -> list[str]:
        return list(self._rows[0])

    def check_rows(self) -> int:
        """Nothing left to check: the file was parsed whole when it was opened; returns the number of rows."""
        return len(self)

    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row (cached)."""
        if key not in self._columns:
            self._columns[key] = _column_from_rows(self, self._rows, key, "item {i}")
        return self._columns[key]
