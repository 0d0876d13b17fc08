"""Taskset storage: the tasks a selector picks from, read by index.

A taskset is a table of tasks (one dict per row). Selectors see only its size and, if they ask for them, a few
numeric *feature columns*; the scheduler reads the rows the selector picked with :meth:`Taskset.read`.

The built-in ``file`` storage (``storage_type = "file"`` in a ``[[tasksets]]`` table) opens:

- **JSON Lines** (``.jsonl``/``.ndjson``): indexed lazily. Opening makes one pass over the bytes to record
  where each line starts; rows are parsed only when read, by seeking, so a file of any size costs 16 bytes
  of memory per row (plus 8 more when it has blank lines) and never sits in memory whole;
- **JSON** (``.json``): a top-level list of objects. JSON cannot be indexed without parsing it, so the file is
  loaded whole; use JSON Lines for large tasksets;
- **Parquet** (``.parquet``): via pyarrow (``pip install "flexkit[parquet]"``), memory-mapped and read with
  ``take``.

This module is also the plugin that registers the ``file`` storage.
"""

from __future__ import annotations

import abc
import copy
import difflib
import json
import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from flexkit.config.fields import field
from flexkit.errors import TasksetError
from flexkit.hookspecs import hookimpl

__all__ = [
    "FileStorageConfig",
    "InMemoryTaskset",
    "JsonTaskset",
    "JsonlTaskset",
    "LazyFeatures",
    "ParquetTaskset",
    "Taskset",
    "TasksetError",
    "flexkit_register_storages",
    "lazy_features",
    "open_file_taskset",
    "resolve_format",
]

#: File formats the ``file`` storage reads; ``auto`` picks one from the file's suffix.
FORMATS: tuple[str, ...] = ("auto", "jsonl", "json", "parquet")
_SUFFIXES: dict[str, str] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}


# -- the protocol ---------------------------------------------------------------------------------------


class Taskset(abc.ABC):
    """A table of tasks read by index.

    Subclasses implement :meth:`__len__`, :meth:`read` and :meth:`column`; :meth:`features` comes free. All
    reads are safe to call from several threads at once (the scheduler prefetches in a background thread).
    """

    #: The taskset's name (as in the pipeline file); used in every error message.
    name: str
    #: The file the taskset reads (resolved), or ``None`` for in-memory tasksets.
    path: str | None

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of tasks (rows)."""

    @abc.abstractmethod
    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` as fresh dicts, in the order asked (repeats allowed).

        Each returned dict is a new object: callers may modify it without changing the taskset.
        """

    @abc.abstractmethod
    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row as a read-only float64 array of length ``len(self)``.

        Every row must hold a finite number (not a bool) under ``key``. Columns are cached.
        """

    def _first_keys(self) -> list[str]:
        """The keys of the first row (or the column names): the candidates for a did-you-mean."""
        return list(self.read([0])[0])

    def features(self, keys: Sequence[str]) -> LazyFeatures:
        """A lazy mapping from each of ``keys`` to its :meth:`column`, loaded on first access.

        Checks now (reading one row) that the first row has every key, so a typo fails when the pipeline
        is built rather than mid-training; no column is loaded until a selector reads it.
        """
        features = LazyFeatures(self, keys)
        for key in features:
            self._check_key(key)
        return features

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release open files (reads after closing reopen them)."""

    def __enter__(self) -> Taskset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, path={self.path!r}, rows={len(self)})"

    # -- helpers for subclasses ---------------------------------------------------------------------------

    def _error(self, message: str) -> TasksetError:
        """A :class:`TasksetError` about this taskset."""
        return TasksetError(message, taskset=self.name, path=self.path)

    def _check_key(self, key: str) -> None:
        """Raise :class:`TasksetError` (with a did-you-mean) if the first row has no ``key``."""
        if not isinstance(key, str):
            raise self._error(f"feature keys must be strings, got {key!r}")
        keys = self._first_keys()
        if key not in keys:
            raise self._error(_missing_key_message(key, keys))

    def _indices(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """``indices`` as a flat int64 array, checked against ``len(self)``."""
        try:
            idx = np.asarray(indices)
        except (TypeError, ValueError) as exc:
            raise self._error(f"indices must be a list of ints: {exc}") from None
        if idx.size == 0:
            return np.zeros(0, dtype=np.int64)
        if idx.ndim != 1:
            raise self._error(f"indices must be a flat list, got shape {idx.shape}")
        if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
            raise self._error(f"indices must be integers, got {idx.dtype} values such as {idx[0]!r}")
        idx = idx.astype(np.int64, copy=False)
        n = len(self)
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            raise self._error(f"index {int(idx[bad][0])} is out of range for {n} rows")
        return idx


def _missing_key_message(key: str, keys: Sequence[str]) -> str:
    message = f"no feature {key!r} in the first row"
    close = difflib.get_close_matches(key, list(keys), n=3, cutoff=0.6)
    if close:
        message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(repr(k) for k in list(keys)[:20]) + (", ..." if len(keys) > 20 else "")
    return message + f" (keys: {shown or 'none'})"


class LazyFeatures(Mapping[str, np.ndarray]):
    """Feature columns by name, each loaded from the taskset on first access and then kept.

    Iterates over the requested keys in order. Looking up a key that was not requested raises ``KeyError``;
    a requested key the taskset lacks raises :class:`TasksetError` naming the taskset, its path and the key.
    """

    def __init__(self, taskset: Any, keys: Sequence[str]) -> None:
        if isinstance(keys, str):
            keys = [keys]
        self._taskset = taskset
        self._keys: tuple[str, ...] = tuple(dict.fromkeys(keys))
        self._loaded: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def loaded(self) -> tuple[str, ...]:
        """The keys whose columns have been loaded so far."""
        return tuple(self._loaded)

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._loaded:
            return self._loaded[key]
        if key not in self._keys:
            raise KeyError(key)
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = self._taskset.column(key)
        return self._loaded[key]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"LazyFeatures(keys={list(self._keys)!r}, loaded={list(self._loaded)!r})"


def lazy_features(taskset: Any, keys: Sequence[str]) -> Mapping[str, np.ndarray]:
    """The feature mapping of any taskset: its own :meth:`Taskset.features`, or a :class:`LazyFeatures`
    over its ``column`` method for third-party storages that only implement ``len``/``read``/``column``."""
    if isinstance(taskset, Taskset):
        return taskset.features(keys)
    return LazyFeatures(taskset, keys)


# -- values -----------------------------------------------------------------------------------------------


def _feature_value(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` when it is not a finite number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _value_error(key: str, value: Any, where: str) -> str:
    text = json.dumps(value, default=repr) if not isinstance(value, float) else repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"feature {key!r} must be a finite number, got {text} at {where}"


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _copy_json(value: Any) -> Any:
    """A deep copy of parsed JSON (dicts, lists, scalars), much faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def _column_from_rows(
    taskset: Taskset, rows: Sequence[Mapping[str, Any]], key: str, where: str
) -> np.ndarray:
    """Extract feature ``key`` from in-memory ``rows``; ``where`` names a row (``"row {i}"``) in errors."""
    out = np.empty(len(rows), dtype=np.float64)
    for i, row in enumerate(rows):
        if key not in row:
            if i == 0:
                raise taskset._error(_missing_key_message(key, list(row)))
            raise taskset._error(f"no feature {key!r} at {where.format(i=i)}")
        number = _feature_value(row[key])
        if number is None:
            raise taskset._error(_value_error(key, row[key], where.format(i=i)))
        out[i] = number
    return _readonly(out)


_raw_decode = json.JSONDecoder().raw_decode


def _loads(raw: bytes) -> Any:
    """``json.loads`` of one UTF-8 line, about twice as fast on short lines (no encoding sniffing)."""
    text = raw.decode("utf-8")
    if text[:1] == "\ufeff":  # a byte-order mark
        text = text[1:]
    text = text.strip(" \t\r\n")
    value, end = _raw_decode(text)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


# -- JSON Lines -------------------------------------------------------------------------------------------

#: Bytes read per step while indexing.
_INDEX_CHUNK = 8 << 20
#: Rows closer than this many bytes are fetched with one read.
_MERGE_GAP = 32 << 10
#: Bytes read per step while extracting a column.
_COLUMN_SPAN = 16 << 20
#: First bytes that make a line possibly blank (JSON whitespace, plus \v and \f).
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True


class JsonlTaskset(Taskset):
    """A JSON Lines file, one JSON object per line, indexed lazily.

    Opening makes one pass over the file in binary chunks and keeps two int64 arrays, the byte offsets where
    each row starts and ends; rows are parsed only when read. Blank (whitespace-only) lines are skipped and
    do not count as rows; ``\\r\\n`` line ends and a last line without a newline are fine. A line that is
    not valid JSON, or not a JSON object, is reported (with its line number) when it is read.

    Reads are thread-safe: one file handle, guarded by a lock (reopened in a forked child or after
    unpickling). The file must not change while the taskset is open.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._lock = threading.Lock()
        self._columns: dict[str, np.ndarray] = {}
        self._column_lock = threading.Lock()
        self._file: Any = None
        self._pid = -1
        self._keys: list[str] | None = None
        with self._lock:
            fd = self._fd()
            self._starts, self._ends, self._lines = self._build_index(fd)
        if len(self._starts) == 0:
            self.close()
            raise self._error("empty taskset: the file has no rows")

    def __len__(self) -> int:
        return len(self._starts)

    def line_number(self, index: int) -> int:
        """The 1-based line number of row ``index`` in the file."""
        return int(self._lines[index]) if self._lines is not None else int(index) + 1

    # -- index ------------------------------------------------------------------------------------------

    def _build_index(self, fd: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        starts: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        lines: list[np.ndarray] = []
        pending: list[bytes] = []  # the current, unfinished line's bytes
        pending_at = 0  # file offset of pending[0]
        n_lines = 0
        blanks = 0
        offset = 0
        while True:
            chunk = os.pread(fd, _INDEX_CHUNK, offset) if hasattr(os, "pread") else self._seek_read(offset)
            if not chunk:
                break
            offset += len(chunk)
            last_nl = chunk.rfind(b"\n")
            if last_nl < 0:
                pending.append(chunk)
                continue
            buf = b"".join([*pending, chunk]) if pending else chunk
            cut = len(buf) - (len(chunk) - last_nl - 1)  # just past the last newline in buf
            arr = np.frombuffer(buf, dtype=np.uint8, count=cut)
            nl = np.flatnonzero(arr == 10)
            s = np.empty_like(nl)
            s[0] = 0
            s[1:] = nl[:-1] + 1
            keep = self._nonblank(buf, arr, s, nl)
            line_no = np.arange(n_lines + 1, n_lines + 1 + len(nl), dtype=np.int64)
            n_lines += len(nl)
            if keep is not None:
                blanks += len(nl) - int(keep.sum())
                s, nl, line_no = s[keep], nl[keep], line_no[keep]
            starts.append(s + pending_at)
            ends.append(nl + pending_at)
            lines.append(line_no)
            pending = [buf[cut:]] if cut < len(buf) else []
            pending_at += cut
        if pending:
            tail = b"".join(pending)
            if tail.strip():
                starts.append(np.array([pending_at], dtype=np.int64))
                ends.append(np.array([pending_at + len(tail)], dtype=np.int64))
                lines.append(np.array([n_lines + 1], dtype=np.int64))
        if not starts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.copy(), None
        all_starts = np.concatenate(starts).astype(np.int64, copy=False)
        all_ends = np.concatenate(ends).astype(np.int64, copy=False)
        all_lines = np.concatenate(lines) if blanks else None
        return all_starts, all_ends, all_lines

    @staticmethod
    def _nonblank(buf: bytes, arr: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray | None:
        """Which lines hold something besides whitespace (``None``: all of them)."""
        suspects = np.flatnonzero(_WHITESPACE[arr[starts]])
        if suspects.size == 0:
            return None
        keep = np.ones(len(starts), dtype=bool)
        for j in suspects.tolist():
            if not buf[starts[j] : ends[j]].strip():
                keep[j] = False
        return None if keep.all() else keep

    # -- file access ------------------------------------------------------------------------------------

    def _fd(self) -> int:
        """The open file's descriptor (opened here in a new process); call with the lock held."""
        if self._file is None or self._pid != os.getpid():
            try:
                self._file = open(self.path, "rb", buffering=0)  # noqa: SIM115 - kept open on purpose
            except FileNotFoundError:
                raise self._error("no such file") from None
            except IsADirectoryError:
                raise self._error("is a directory, not a file") from None
            except OSError as exc:
                raise self._error(f"cannot open: {exc.strerror or exc}") from None
            self._pid = os.getpid()
        return self._file.fileno()

    def _seek_read(self, offset: int, size: int = _INDEX_CHUNK) -> bytes:
        """Read ``size`` bytes at ``offset`` where ``os.pread`` is missing (Windows); lock held."""
        self._file.seek(offset)
        return self._file.read(size)

    def _read_span(self, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)`` of the file; call with the lock held."""
        fd = self._fd()
        size = stop - start
        if hasattr(os, "pread"):
            data = os.pread(fd, size, start)
            while 0 < len(data) < size:  # pread may return less than asked; finish the read
                more = os.pread(fd, size - len(data), start + len(data))
                if not more:
                    break
                data += more
        else:
            data = self._seek_read(start, size)
        if len(data) != size:
            raise self._error("the file changed (it is shorter) since it was indexed")
        return data

    def close(self) -> None:
        """Close the file handle (a later read reopens it)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_lock", "_column_lock", "_file"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._column_lock = threading.Lock()
        self._file = None

    # -- rows -------------------------------------------------------------------------------------------

    def _raw(self, uniq: np.ndarray) -> list[bytes]:
        """The bytes of rows ``uniq`` (sorted, distinct), fetching nearby rows with one read."""
        starts, ends = self._starts[uniq], self._ends[uniq]
        breaks = np.flatnonzero(starts[1:] - ends[:-1] > _MERGE_GAP) + 1
        group_lo = [0, *breaks.tolist()]
        group_hi = [*breaks.tolist(), len(uniq)]
        starts_l, ends_l = starts.tolist(), ends.tolist()
        out: list[bytes] = []
        with self._lock:
            spans = [
                self._read_span(starts_l[lo], ends_l[hi - 1])
                for lo, hi in zip(group_lo, group_hi, strict=True)
            ]
        for lo, hi, data in zip(group_lo, group_hi, spans, strict=True):
            base = starts_l[lo]
            if hi - lo == 1:
                out.append(data)
            else:
                out.extend(data[starts_l[k] - base : ends_l[k] - base] for k in range(lo, hi))
        return out

    def _parse(self, raw: bytes, index: int) -> dict[str, Any]:
        try:
            row = _loads(raw)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise self._error(f"line {self.line_number(index)}: invalid JSON: {exc}") from None
        if not isinstance(row, dict):
            kind = type(row).__name__ if row is not None else "null"
            raise self._error(f"line {self.line_number(index)}: a row must be a JSON object, got {kind}")
        return row

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` (parsed now; each occurrence of a repeated index is its own dict)."""
        idx = self._indices(indices)
        if idx.size == 0:
            return []
        uniq, inverse = np.unique(idx, return_inverse=True)
        raw = self._raw(uniq)
        uniq_l = uniq.tolist()
        return [self._parse(raw[k], uniq_l[k]) for k in inverse.tolist()]

    def _first_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = list(self.read([0])[0])
        return self._keys

    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row (one pass over the file, then cached)."""
        cached = self._columns.get(key)
        if cached is not None:
            return cached
        with self._column_lock:
            if key not in self._columns:
                self._columns[key] = self._extract(key)
        return self._columns[key]

    def _extract(self, key: str) -> np.ndarray:
        n = len(self)
        out = np.empty(n, dtype=np.float64)
        starts, ends = self._starts, self._ends
        lo = 0
        while lo < n:
            hi = max(lo + 1, int(np.searchsorted(starts, starts[lo] + _COLUMN_SPAN, side="left")))
            hi = min(hi, n)
            base = int(starts[lo])
            with self._lock:
                data = self._read_span(base, int(ends[hi - 1]))
            parse = self._parse
            for i, s, e in zip(range(lo, hi), starts[lo:hi].tolist(), ends[lo:hi].tolist(), strict=True):
                row = parse(data[s - base : e - base], i)
                try:
                    value = row[key]
                except KeyError:
                    if i == 0:
                        raise self._error(_missing_key_message(key, list(row))) from None
                    raise self._error(f"no feature {key!r} at line {self.line_number(i)}") from None
                number = _feature_value(value)
                if number is None:
                    raise self._error(_value_error(key, value, f"line {self.line_number(i)}"))
                out[i] = number
            lo = hi
        return _readonly(out)


# -- JSON -------------------------------------------------------------------------------------------------


class JsonTaskset(Taskset):
    """A JSON file holding a top-level list of objects.

    Loaded whole when opened: JSON cannot be indexed without parsing all of it. Use JSON Lines for tasksets
    too large to hold in memory.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._columns: dict[str, np.ndarray] = {}
        try:
            with open(path, "rb") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise self._error("no such file") from None
        except IsADirectoryError:
            raise self._error("is a directory, not a file") from None
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

    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row (cached)."""
        if key not in self._columns:
            self._columns[key] = _column_from_rows(self, self._rows, key, "item {i}")
        return self._columns[key]


# -- Parquet ----------------------------------------------------------------------------------------------


class ParquetTaskset(Taskset):
    """A Parquet file read with pyarrow (``pip install "flexkit[parquet]"``).

    The table is memory-mapped when opened; rows are converted to dicts only when read (``take``), columns
    with ``to_numpy``.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._columns: dict[str, np.ndarray] = {}
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise self._error('reading Parquet needs pyarrow: pip install "flexkit[parquet]"') from None
        self._pa = pa
        if not os.path.exists(path):
            raise self._error("no such file")
        if os.path.isdir(path):
            raise self._error("is a directory, not a file")
        try:
            self._table = pq.read_table(path, memory_map=True)
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
        return self._table.take(self._pa.array(idx)).to_pylist()

    def _first_keys(self) -> list[str]:
        return list(self._table.column_names)

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


# -- in memory --------------------------------------------------------------------------------------------


class InMemoryTaskset(Taskset):
    """A taskset held in memory: for tests and for ``make_selector(features=...)``.

    Give ``rows`` (dicts), ``columns`` (feature arrays by name), ``size``, or several of them (their lengths
    must agree). Without ``rows``, a row holds the columns' values at its index.
    """

    def __init__(
        self,
        name: str,
        rows: Sequence[Mapping[str, Any]] | None = None,
        columns: Mapping[str, Any] | None = None,
        size: int | None = None,
    ) -> None:
        self.name = name
        self.path = None
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


# -- the ``file`` storage ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FileStorageConfig:
    """Parameters of the ``file`` storage: a taskset read from one file."""

    path: str = field(
        doc="The taskset file: JSON Lines (.jsonl/.ndjson), JSON (.json, a list of objects) or Parquet "
        "(.parquet). Relative paths are resolved against the pipeline file's directory; ~ is expanded."
    )
    format: str = field(
        default="auto",
        choices=FORMATS,
        doc='The file format; "auto" picks it from the suffix (.jsonl/.ndjson, .json, .parquet).',
    )


def resolve_format(path: str, fmt: str = "auto", *, name: str | None = None) -> str:
    """The format to read ``path`` with: ``fmt`` itself, or for ``"auto"`` the one its suffix names."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise TasksetError(
                f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", taskset=name, path=path
            )
        return fmt
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    known = ", ".join(_SUFFIXES)
    got = f"suffix {suffix!r}" if suffix else "no suffix"
    raise TasksetError(
        f'cannot tell the format from {got} (known: {known}); set format = "jsonl", "json" or "parquet"',
        taskset=name,
        path=path,
    )


_READERS: dict[str, type[Taskset]] = {"jsonl": JsonlTaskset, "json": JsonTaskset, "parquet": ParquetTaskset}


def open_file_taskset(
    config: FileStorageConfig, *, name: str, base_dir: str | os.PathLike[str] | None = None, **_context: Any
) -> Taskset:
    """Open a taskset file (JSON Lines, JSON or Parquet).

    ``config.path`` is resolved against ``base_dir`` (default: the working directory) unless it is absolute;
    ``~`` is expanded first.
    """
    raw = os.fspath(config.path)
    if not raw:
        raise TasksetError("path is empty", taskset=name)
    expanded = os.path.expanduser(raw)
    relative = not os.path.isabs(expanded)
    base = os.fspath(base_dir) if base_dir is not None else os.getcwd()
    path = os.path.normpath(os.path.abspath(os.path.join(base, expanded) if relative else expanded))
    if not os.path.exists(path):
        hint = f" ({raw!r} resolved against {base})" if relative else ""
        raise TasksetError(f"no such file{hint}", taskset=name, path=path)
    fmt = resolve_format(path, config.format, name=name)
    return _READERS[fmt](path, name=name)


@hookimpl
def flexkit_register_storages(register: Any) -> None:
    """Register the built-in ``file`` storage."""
    register("file", open_file_taskset, FileStorageConfig)
