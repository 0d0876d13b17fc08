"""In-memory tasksets: rows or feature columns held in memory (tests, ``make_selector(features=...)``,
generated tasksets)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from flexkit.tasksets._base import (
    _NOT_COMPUTED,
    Taskset,
    _column_from_rows,
    _missing_key_message,
    _readonly,
    _value_error,
)

__all__ = ["InMemoryTaskset"]


class InMemoryTaskset(Taskset):
    """A taskset held in memory: for tests and for ``make_selector(features=...)``.

    Give ``rows`` (dicts), ``columns`` (feature arrays by name), ``size``, or several of them (their lengths
    must agree). Without ``rows``, a row holds the columns' values at its index. ``digest = False``: no content
    digest (:meth:`content_id` is ``None``), for a taskset generated from its storage parameters, which identify
    it in checkpoints on every machine (a digest of generated floats would depend on the CPU's rounding).
    """

    def __init__(
        self,
        name: str,
        rows: Sequence[Mapping[str, Any]] | None = None,
        columns: Mapping[str, Any] | None = None,
        size: int | None = None,
        *,
        digest: bool = True,
    ) -> None:
        self.name = name
        self.path = None
        self._digest = digest
        lengths: dict[str, int] = {}
        if rows is not None:
            self._rows: list[Mapping[str, Any]] | None = list(rows)
            for i, row in enumerate(self._rows):
                if not isinstance(row, Mapping):
                    raise self._error(f"row {i}: a row must be a dict, got {type(row).__name__}")
            lengths["rows"] = len(self._rows)
        else:
            self._rows = None
        self._columns: dict[str, np.ndarray] = {}
        for key, values in (columns or {}).items():
            try:
                array = np.array(values, dtype=np.float64)
            except (TypeError, ValueError):
                raise self._error(f"feature {key!r} must be an array of numbers") from None
            if array.ndim != 1:
                raise self._error(f"feature {key!r} must be a flat array, got shape {array.shape}")
            bad = ~np.isfinite(array)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise self._error(_value_error(key, float(array[i]), f"row {i}"))
            self._columns[key] = _readonly(array)
            lengths[f"column {key!r}"] = len(array)
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
                raise self._error(f"size must be an int, got {size!r}")
            lengths["size"] = int(size)
        if not lengths:
            raise self._error("give rows, columns or size")
        if len(set(lengths.values())) > 1:
            raise self._error("lengths disagree: " + ", ".join(f"{k} has {v}" for k, v in lengths.items()))
        self._size = next(iter(lengths.values()))
        if self._size <= 0:
            raise self._error("empty taskset: it has no rows")

    def __len__(self) -> int:
        return self._size

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` (deep copies)."""
        idx = self._indices(indices).tolist()
        if self._rows is not None:
            return [copy.deepcopy(dict(self._rows[i])) for i in idx]
        return [{k: float(v[i]) for k, v in self._columns.items()} for i in idx]

    def _first_keys(self) -> list[str]:
        keys = list(self._rows[0]) if self._rows else []
        return keys + [k for k in self._columns if k not in keys]

    def column(self, key: str) -> np.ndarray:
        """The feature ``key``: the given column, else extracted from the rows (cached)."""
        if key not in self._columns:
            if self._rows is None:
                raise self._error(_missing_key_message(key, list(self._columns)))
            self._columns[key] = _column_from_rows(self, self._rows, key, "row {i}")
        return self._columns[key]

    def content_id(self) -> str | None:
        """The SHA-256 of the rows (canonical JSON, in order) when the taskset has rows, else of the columns
        (names, dtypes and bytes); ``None`` when a row holds something JSON cannot write, or with ``digest =
        False``. Cached."""
        if not self._digest:
            return None
        cached = self.__dict__.get("_content_id_cache", _NOT_COMPUTED)
        if cached is _NOT_COMPUTED:
            cached = _content_digest(self._rows, self._columns, self._size)
            self.__dict__["_content_id_cache"] = cached
        return cast("str | None", cached)  # a digest or None, kept in the untyped __dict__


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _content_digest(
    rows: Sequence[Mapping[str, Any]] | None, columns: Mapping[str, np.ndarray], size: int
) -> str | None:
    digest = hashlib.sha256(f"{size}\n".encode())
    if rows is not None:
        try:
            for row in rows:
                digest.update(json.dumps(dict(row), sort_keys=True, default=_json_default).encode())
                digest.update(b"\n")
        except (TypeError, ValueError):
            return None
        return f"sha256:{digest.hexdigest()} ({size} rows)"
    for key in sorted(columns):
        array = np.ascontiguousarray(columns[key])
        digest.update(f"{key}:{array.dtype.str}\n".encode())
        digest.update(array.tobytes())
    return f"sha256:{digest.hexdigest()} ({size} rows)"
