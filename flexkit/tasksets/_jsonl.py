"""JSON Lines tasksets (``.jsonl``/``.ndjson``), indexed lazily.

Opening makes one pass over the bytes to record where each line starts, checking on the way that the file is
UTF-8 text whose every line looks like one JSON object (``{`` ... ``}``); rows are parsed only when read, by
seeking, so a file of any size costs 16 bytes of memory per row (plus 8 more when it has blank lines) and never
sits in memory whole. :meth:`JsonlTaskset.check_rows` parses every row (``flexkit validate`` does).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from flexkit.tasksets._base import Taskset, _missing_key_message, _readonly, _value_error, finite_number
from flexkit.tasksets._fdpool import POOL

__all__ = ["JsonlTaskset"]

#: Bytes read per step while indexing.
_INDEX_CHUNK = 8 << 20
#: Rows closer than this many bytes are fetched with one read.
_MERGE_GAP = 32 << 10
#: Bytes read per step while extracting a column.
_COLUMN_SPAN = 16 << 20
#: First bytes that make a line possibly blank (JSON whitespace, plus \v and \f).
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True
_UTF8_BOM = b"\xef\xbb\xbf"
#: Byte-order marks of encodings a JSON Lines file must not be in.
_WIDE_BOMS = {b"\xff\xfe": "UTF-16 LE", b"\xfe\xff": "UTF-16 BE"}
_OPEN = ord("{")
_CLOSE = ord("}")
_CR = ord("\r")

_raw_decode = json.JSONDecoder().raw_decode
_tokens = itertools.count()


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


def _looks_like_object(raw: bytes) -> bool:
    """Whether one line, as :func:`_loads` sees it (after a byte-order mark and JSON whitespace), starts with
    ``{`` and ends with ``}``: true of every line that holds a JSON object."""
    if raw[:3] == _UTF8_BOM:
        raw = raw[3:]
    raw = raw.strip(b" \t\r\n")
    return raw[:1] == b"{" and raw[-1:] == b"}"


def _problem(raw: bytes) -> str | None:
    """What is wrong with one line as a row (``None``: it is a JSON object); the slow path of reads."""
    try:
        row = _loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return f"invalid JSON: {exc}"
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__ if row is not None else 'null'}"
    return None


class JsonlTaskset(Taskset):
    """A JSON Lines file, one JSON object per line, indexed lazily.

    Opening makes one pass over the file in binary chunks and keeps two int64 arrays, the byte offsets where
    each row starts and ends; rows are parsed only when read. Blank (whitespace-only) lines are skipped and
    do not count as rows; ``\\r\\n`` line ends and a last line without a newline are fine. The same pass
    refuses, with the line number, what can never be read: bytes that are not UTF-8 (a UTF-16 file, a NUL
    byte) and a line that does not start with ``{`` and end with ``}`` (a JSON array, a scalar, a torn or
    pretty-printed object). A line that looks like an object but is not valid JSON is reported (with its
    line number) when it is read, or by :meth:`check_rows`.

    Only regular files are opened (a FIFO is refused, never waited on). The taskset holds no open file: each
    read borrows a descriptor from a small process-wide pool, so thousands of tasksets stay within the open
    file limit. Reads are thread-safe. The file must not change while the taskset is open: a read that finds
    its size or modification time changed is refused.
    """

    def __init__(self, path: str, *, name: str) -> None:
        self.name = name
        self.path = path
        self._lock = threading.Lock()
        self._columns: dict[str, np.ndarray] = {}
        self._column_lock = threading.Lock()
        self._keys: list[str] | None = None
        self._signature: tuple[int, int] | None = None
        self._register()
        try:
            with self._lock, self._borrow() as fd:
                st = os.fstat(fd)
                self._signature = (st.st_size, st.st_mtime_ns)
                self._starts, self._ends, self._lines = self._build_index(fd)
        except BaseException:
            self.close()
            raise
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
        rows = 0
        offset = 0
        while True:
            chunk = self._pread(fd, _INDEX_CHUNK, offset)
            if not chunk:
                break
            if offset == 0:
                self._check_encoding_mark(chunk)
            offset += len(chunk)
            last_nl = chunk.rfind(b"\n")
            if last_nl < 0:
                pending.append(chunk)
                continue
            buf = b"".join([*pending, chunk]) if pending else chunk
            cut = len(buf) - (len(chunk) - last_nl - 1)  # just past the last newline in buf
            arr = np.frombuffer(buf, dtype=np.uint8, count=cut)
            nl = np.flatnonzero(arr == 10)
            self._check_text(buf, cut, nl, n_lines)
            s = np.empty_like(nl)
            s[0] = 0
            s[1:] = nl[:-1] + 1
            keep = self._nonblank(buf, arr, s, nl)
            line_no = np.arange(n_lines + 1, n_lines + 1 + len(nl), dtype=np.int64)
            n_lines += len(nl)
            if keep is not None:
                blanks += len(nl) - int(keep.sum())
                s, nl, line_no = s[keep], nl[keep], line_no[keep]
            self._check_shapes(buf, arr, s, nl, line_no, rows)
            rows += len(s)
            starts.append(s + pending_at)
            ends.append(nl + pending_at)
            lines.append(line_no)
            pending = [buf[cut:]] if cut < len(buf) else []
            pending_at += cut
        if pending:
            tail = b"".join(pending)
            if tail.strip():
                self._check_text(tail, len(tail), np.zeros(0, dtype=np.int64), n_lines)
                if not _looks_like_object(tail):
                    self._refuse_line(tail, n_lines + 1, first=rows == 0)
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

    # -- checks while indexing (each a vectorised pass or a C-speed scan over the chunk) -------------------

    def _check_encoding_mark(self, head: bytes) -> None:
        """Refuse a file that starts with a UTF-16 (or UTF-32) byte-order mark."""
        for mark, encoding in _WIDE_BOMS.items():
            if head.startswith(mark):
                raise self._error(
                    f"line 1: the file starts with a {encoding} byte-order mark; JSON Lines must be UTF-8 "
                    "(convert it, e.g. iconv -f UTF-16 -t UTF-8)"
                )

    def _check_text(self, buf: bytes, cut: int, newlines: np.ndarray, lines_before: int) -> None:
        """Refuse NUL bytes and bytes that are not UTF-8 in ``buf[:cut]`` (whole lines), naming the line."""

        def line_of(pos: int) -> int:
            return lines_before + int(np.searchsorted(newlines, pos, side="left")) + 1

        nul = buf.find(b"\x00", 0, cut)
        if nul >= 0:
            raise self._error(
                f"line {line_of(nul)}: invalid JSON: a NUL byte; the file is not UTF-8 text (UTF-16? convert it, "
                "e.g. iconv -f UTF-16 -t UTF-8)"
            )
        try:
            str(memoryview(buf)[:cut], "utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(
                f"line {line_of(exc.start)}: invalid JSON: not UTF-8 text (byte {buf[exc.start]:#04x}); "
                "JSON Lines must be UTF-8"
            ) from None

    def _check_shapes(
        self, buf: bytes, arr: np.ndarray, starts: np.ndarray, newlines: np.ndarray, line_no: np.ndarray,
        rows_before: int,
    ) -> None:
        """Refuse a non-blank line that does not start with ``{`` and end with ``}`` (vectorised; the few
        lines with a byte-order mark or surrounding whitespace are looked at one by one)."""
        if starts.size == 0:
            return
        last = newlines - 1
        last = np.where(arr[last] == _CR, np.maximum(last - 1, starts), last)
        odd = np.flatnonzero((arr[starts] != _OPEN) | (arr[last] != _CLOSE))
        for j in odd.tolist():
            raw = buf[starts[j] : newlines[j]]
            if not _looks_like_object(raw):
                self._refuse_line(raw, int(line_no[j]), first=rows_before + j == 0)

    def _refuse_line(self, raw: bytes, line: int, *, first: bool) -> None:
        """Raise the error a read of this line would give (it cannot hold a JSON object)."""
        hint = ""
        if first and raw.lstrip(_UTF8_BOM + b" \t\r\n")[:1] == b"[":
            hint = ' (the file looks like one JSON array: name it .json, or set format = "json")'
        raise self._error(f"line {line}: {_problem(raw) or 'a row must be a JSON object'}{hint}")

    # -- file access ------------------------------------------------------------------------------------

    def _register(self) -> None:
        """A fresh key in the descriptor pool; the descriptor is closed when this object is collected."""
        self._token = next(_tokens)
        self._finalizer = weakref.finalize(self, POOL.discard, self._token)

    @contextmanager
    def _borrow(self) -> Iterator[int]:
        """An open descriptor of the file, checked to be unchanged since indexing; call with the lock held."""
        with POOL.borrow(self._token, self._open_file) as fd:
            if self._signature is not None:
                st = os.fstat(fd)
                if (st.st_size, st.st_mtime_ns) != self._signature:
                    raise self._error(
                        f"the file changed since it was indexed (now {st.st_size} bytes, was {self._signature[0]}, "
                        "or a new modification time); load the pipeline again"
                    )
            yield fd

    @staticmethod
    def _pread(fd: int, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end of the file); call with the lock held."""
        if hasattr(os, "pread"):
            return os.pread(fd, size, offset)
        os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
        return os.read(fd, size)  # pragma: no cover

    def _read_span(self, fd: int, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)`` of the file; call with the lock held."""
        size = stop - start
        data = self._pread(fd, size, start)
        while 0 < len(data) < size:  # a read may return less than asked; finish it
            more = self._pread(fd, size - len(data), start + len(data))
            if not more:
                break
            data += more
        if len(data) != size:
            raise self._error("the file changed (it is shorter) since it was indexed")
        return data

    def _file_content_id(self) -> str | None:
        """``sha256:<hex> (<size> bytes)`` of the file the rows are read from: read through the same checked
        descriptors as the rows, so a file replaced since it was indexed is refused (``the file changed since it
        was indexed``), never fingerprinted in place of the rows the run read."""
        digest, offset = hashlib.sha256(), 0
        while True:
            with self._lock, self._borrow() as fd:
                chunk = self._pread(fd, _INDEX_CHUNK, offset)
            if not chunk:
                break
            digest.update(chunk)
            offset += len(chunk)
        return f"sha256:{digest.hexdigest()} ({offset} bytes)"

    def close(self) -> None:
        """Give the file's descriptor back to the system (a later read opens it again)."""
        POOL.discard(self._token)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_lock", "_column_lock", "_finalizer", "_token"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._column_lock = threading.Lock()
        self._register()

    # -- rows -------------------------------------------------------------------------------------------

    def _raw(self, uniq: np.ndarray) -> list[bytes]:
        """The bytes of rows ``uniq`` (sorted, distinct), fetching nearby rows with one read."""
        starts, ends = self._starts[uniq], self._ends[uniq]
        breaks = np.flatnonzero(starts[1:] - ends[:-1] > _MERGE_GAP) + 1
        group_lo = [0, *breaks.tolist()]
        group_hi = [*breaks.tolist(), len(uniq)]
        starts_l, ends_l = starts.tolist(), ends.tolist()
        out: list[bytes] = []
        with self._lock, self._borrow() as fd:
            spans = [
                self._read_span(fd, starts_l[lo], ends_l[hi - 1])
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
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            row = None
        if not isinstance(row, dict):
            raise self._error(f"line {self.line_number(index)}: {_problem(raw)}")
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

    def _spans(self) -> Iterator[tuple[int, int, int, bytes]]:
        """The file in spans of whole rows: ``(lo, hi, base, data)`` with rows ``lo..hi-1`` in ``data``
        (which starts at byte ``base``)."""
        n = len(self)
        starts, ends = self._starts, self._ends
        lo = 0
        while lo < n:
            hi = max(lo + 1, int(np.searchsorted(starts, starts[lo] + _COLUMN_SPAN, side="left")))
            hi = min(hi, n)
            base = int(starts[lo])
            with self._lock, self._borrow() as fd:
                data = self._read_span(fd, base, int(ends[hi - 1]))
            yield lo, hi, base, data
            lo = hi

    def check_rows(self) -> int:
        """Parse every row once (a full pass over the file, 1–2 µs a row) and raise
        :class:`~flexkit.errors.TasksetError` at the first that is not a JSON object, naming its line;
        returns the number of rows checked."""
        parse = self._parse
        for lo, hi, base, data in self._spans():
            for i, s, e in zip(range(lo, hi), self._starts[lo:hi].tolist(), self._ends[lo:hi].tolist(), strict=True):
                parse(data[s - base : e - base], i)
        return len(self)

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
        out = np.empty(len(self), dtype=np.float64)
        parse = self._parse
        for lo, hi, base, data in self._spans():
            for i, s, e in zip(range(lo, hi), self._starts[lo:hi].tolist(), self._ends[lo:hi].tolist(), strict=True):
                row = parse(data[s - base : e - base], i)
                try:
                    value = row[key]
                except KeyError:
                    if i == 0:
                        raise self._error(_missing_key_message(key, list(row))) from None
                    raise self._error(f"no feature {key!r} at line {self.line_number(i)}") from None
                number = finite_number(value)
                if number is None:
                    raise self._error(_value_error(key, value, f"line {self.line_number(i)}"))
                out[i] = number
        return _readonly(out)
