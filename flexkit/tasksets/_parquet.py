"""Parquet tasksets (``.parquet``): read with pyarrow (``pip install "flexkit-rft[parquet]"``), memory-mapped and
read with ``take``."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from flexkit._files import file_kind
from flexkit.tasksets._base import Taskset, _missing_key_message, _readonly, _value_error

__all__ = ["ParquetTaskset"]


class ParquetTaskset(Taskset):
    """A Parquet file read with pyarrow (``pip install "flexkit-rft[parquet]"``).

    The table is memory-mapped when opened; rows are converted to dicts only when read (``take``), columns
    with ``to_numpy``. The content digest is of the mapped bytes, so a file replaced after opening cannot pass
    for the rows the run reads.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._columns: dict[str, np.ndarray] = {}
        self._map_lock = threading.Lock()
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise self._error('reading Parquet needs pyarrow: pip install "flexkit-rft[parquet]"') from None
        self._pa = pa
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise self._error("no such file") from None
        except OSError as exc:
            raise self._error(f"cannot open: {exc.strerror or exc}") from None
        if stat.S_ISDIR(mode):
            raise self._error("is a directory, not a file")
        if not stat.S_ISREG(mode):  # pyarrow would block on a FIFO
            raise self._error(f"is {file_kind(mode)}, not a regular file")
        try:
            self._map = pa.memory_map(path, "r")  # the bytes the rows come from, whatever later replaces the path
            self._table = pq.read_table(self._map)
        except (OSError, pa.ArrowException) as exc:
            raise self._error(f"cannot read Parquet: {exc}") from None
        if self._table.num_rows == 0:
            raise self._error("empty taskset: the file has no rows")

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` (via ``Table.take``)."""
        idx = self._indices(indices)
        if idx.size == 0:
            return []
        return cast(list[dict[str, Any]], self._table.take(self._pa.array(idx)).to_pylist())  # pyarrow is untyped

    def _first_keys(self) -> list[str]:
        return list(self._table.column_names)

    def content_id(self) -> str | None:
        """``sha256:<hex> (<size> bytes)`` of the file as it was mapped when the taskset was opened (the bytes the
        rows are read from, even when the path has been replaced since); computed on the first call, then
        cached."""
        cached = self.__dict__.get("_content_id_cache")
        if cached is None:
            with self._map_lock:
                self._map.seek(0)
                data = self._map.read_buffer()
            cached = f"sha256:{hashlib.sha256(memoryview(data)).hexdigest()} ({data.size} bytes)"
            self.__dict__["_content_id_cache"] = cached
        return cached

    def check_rows(self) -> int:
        """Nothing left to check: every column was decoded when the file was opened; returns the number of
        rows."""
        return len(self)

    def column(self, key: str) -> np.ndarray:
        """The numeric column ``key`` (nulls, bools, non-numbers and non-finite values rejected; cached)."""
        if key in self._columns:
            return self._columns[key]
        if key not in self._table.column_names:
            raise self._error(_missing_key_message(key, self._table.column_names))
        pa = self._pa
        col = self._table.column(key)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise self._error(f"feature {key!r} must be a numeric column, got type {col.type}")
        if col.null_count:
            first_null = col.is_null().to_pylist().index(True)
            raise self._error(f"feature {key!r} must be a finite number, got null at row {first_null}")
        values = np.array(col.to_numpy(), dtype=np.float64)  # a copy, never a view on Arrow memory
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise self._error(_value_error(key, float(values[i]), f"row {i}"))
        self._columns[key] = _readonly(values)
        return self._columns[key]
