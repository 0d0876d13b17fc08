"""The taskset protocol: the :class:`Taskset` base class, lazy feature mappings and the value checks shared by
every storage format.

A taskset is a table of tasks (one dict per row). Selectors see only its size and, if they ask for them, a few
numeric *feature columns*; the scheduler reads the rows the selector picked with :meth:`Taskset.read`.
"""

from __future__ import annotations

import abc
import difflib
import hashlib
import json
import math
import os
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from flexkit._files import O_NONBLOCK, NotRegularFileError, open_regular
from flexkit.errors import TasksetError
from flexkit.plugins._contract import TasksetLike, optional_member
from flexkit.selectors._grouping import as_label

__all__ = ["LazyFeatures", "Taskset", "check_rows", "content_id_of", "lazy_features", "path_of"]


#: Marks a content id not computed yet (``None`` is a computed "unknown").
_NOT_COMPUTED = object()
#: Rows read at a time by :meth:`Taskset.labels`.
LABEL_CHUNK = 65536


# -- the protocol ---------------------------------------------------------------------------------------


class Taskset(abc.ABC):
    """A table of tasks read by index.

    Subclasses implement :meth:`__len__`, :meth:`read` and :meth:`column`; :meth:`features` comes free. All
    reads are safe to call from several threads at once (the scheduler prefetches in a background thread).
    A storage's taskset need not derive from it: :func:`check_rows`, :func:`content_id_of`, :func:`path_of` and
    :func:`lazy_features` read any taskset, with this class's defaults for what a third-party one lacks.
    """

    #: The taskset's name (as in the pipeline file); used in every error message.
    name: str
    #: The file the taskset reads (resolved); ``None`` (the default) for in-memory tasksets.
    path: str | None = None

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

    def labels(self, key: str) -> np.ndarray:
        """The value under ``key`` of every row as labels, for grouping by a categorical column (``source``).

        Strings stay strings; other JSON scalars become their JSON text (:func:`as_label`: ``3`` and ``"3"`` are
        one label). Every row must hold a string, number or bool under ``key``. Reads the rows in chunks (not
        cached).
        """
        out = np.empty(len(self), dtype=object)
        for start in range(0, len(self), LABEL_CHUNK):
            stop = min(len(self), start + LABEL_CHUNK)
            for i, row in zip(range(start, stop), self.read(np.arange(start, stop)), strict=True):
                if key not in row:
                    if i == 0:
                        raise self._error(_missing_key_message(key, list(row)))
                    raise self._error(f"no feature {key!r} at row {i}")
                label = as_label(row[key])
                if label is None:
                    raise self._error(not_a_label(key, i, row[key]))
                out[i] = label
        return np.asarray(out.tolist(), dtype=str)

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

    def check_rows(self) -> int:
        """Read every row once and raise :class:`TasksetError` at the first that cannot be read; returns the
        number of rows checked. ``flexkit validate`` calls it. Readers that parse everything when they open
        (JSON, Parquet) have nothing left to check; JSON Lines parses each line (1–2 µs a row)."""
        return _check_by_reading(self)

    def content_id(self) -> str | None:
        """A digest of the taskset's content, which checkpoints record and check on resume; ``None``: unknown.

        The default, for a taskset read from one regular file (``path``): the SHA-256 of the file's bytes and its
        size, computed on the first call (one pass over the file, about a second per GB) and then cached. Storages
        whose rows do not come from one file override it, or leave it ``None`` (then only the size and the
        storage parameters identify the taskset).
        """
        cached = self.__dict__.get("_content_id_cache", _NOT_COMPUTED)
        if cached is _NOT_COMPUTED:
            cached = self._file_content_id() if isinstance(self.path, str) else None
            self.__dict__["_content_id_cache"] = cached
        return cast("str | None", cached)  # a digest or None, kept in the untyped __dict__

    def _file_content_id(self) -> str | None:
        """``sha256:<hex> (<size> bytes)`` of the file at ``path``; ``None`` when it is not a regular file."""
        try:
            # content_id calls it only when path is a str
            fd = os.open(self.path, os.O_RDONLY | O_NONBLOCK)  # type: ignore[arg-type]
        except OSError as exc:
            raise self._error(f"cannot read the file to checksum it: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            digest, size = hashlib.sha256(), 0
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                size += len(chunk)
        except OSError as exc:
            raise self._error(f"cannot read the file to checksum it: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        return f"sha256:{digest.hexdigest()} ({size} bytes)"

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

    def _open_file(self) -> int:
        """A read-only descriptor of the file at ``path`` (a regular file only, never blocking on a FIFO); a path
        that cannot be opened raises :class:`TasksetError`."""
        try:
            fd, _ = open_regular(self.path)  # type: ignore[arg-type]  # file-backed tasksets only: path is set
        except FileNotFoundError:
            raise self._error("no such file") from None
        except IsADirectoryError:
            raise self._error("is a directory, not a file") from None
        except NotRegularFileError as exc:
            raise self._error(str(exc.strerror)) from None
        except OSError as exc:
            raise self._error(f"cannot open: {exc.strerror or exc}") from None
        return fd

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

    def __init__(self, taskset: TasksetLike, keys: Sequence[str]) -> None:
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

    def labels(self, key: str) -> np.ndarray:
        """The requested column ``key`` as labels (:meth:`Taskset.labels`), for grouping by a categorical column."""
        if key not in self._keys:
            raise KeyError(key)
        taskset: Any = self._taskset  # labels is a Taskset's (not every storage's): else AttributeError
        labels: np.ndarray = taskset.labels(key)
        return labels

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"LazyFeatures(keys={list(self._keys)!r}, loaded={list(self._loaded)!r})"


#: Rows read per call while checking a taskset by reading it.
_CHECK_BATCH = 4096


def _check_by_reading(taskset: TasksetLike) -> int:
    n = len(taskset)
    for lo in range(0, n, _CHECK_BATCH):
        taskset.read(np.arange(lo, min(n, lo + _CHECK_BATCH), dtype=np.int64))
    return n


def check_rows(taskset: TasksetLike) -> int:
    """Read every row of any taskset once (its own :meth:`Taskset.check_rows`, or ``read`` in batches for
    third-party storages that only implement ``len``/``read``/``column``); returns the number of rows."""
    if isinstance(taskset, Taskset):
        return int(taskset.check_rows())
    check = optional_member(taskset, "check_rows")
    return int(check()) if callable(check) else _check_by_reading(taskset)


def content_id_of(taskset: TasksetLike) -> str | None:
    """The content digest of any taskset (:meth:`Taskset.content_id`; ``None`` for a third-party one without the
    method: it cannot tell)."""
    if isinstance(taskset, Taskset):
        return taskset.content_id()
    found = optional_member(taskset, "content_id")
    return found() if callable(found) else None


def path_of(taskset: TasksetLike) -> str | None:
    """The file any taskset reads (:attr:`Taskset.path`; ``None`` for in-memory tasksets and for third-party
    ones that do not say), for messages."""
    return taskset.path if isinstance(taskset, Taskset) else optional_member(taskset, "path")


def lazy_features(taskset: TasksetLike, keys: Sequence[str]) -> Mapping[str, np.ndarray]:
    """The feature mapping of any taskset: its own :meth:`Taskset.features`, or a :class:`LazyFeatures`
    over its ``column`` method for third-party storages that only implement ``len``/``read``/``column``."""
    if isinstance(taskset, Taskset):
        return taskset.features(keys)
    return LazyFeatures(taskset, keys)


# -- values -----------------------------------------------------------------------------------------------


def finite_number(value: Any) -> float | None:
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
        number = finite_number(row[key])
        if number is None:
            raise taskset._error(_value_error(key, row[key], where.format(i=i)))
        out[i] = number
    return _readonly(out)


def not_a_label(key: str, row: int, value: Any) -> str:
    """The message for a ``value`` under ``key`` at ``row`` that :func:`as_label` refuses."""
    got = "NaN" if isinstance(value, float) and value != value else type(value).__name__
    return f"feature {key!r} at row {row} must be a string or a number to group by, got {got}"
