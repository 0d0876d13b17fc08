"""The resumable output of ``flexkit annotate``: ``OUT.partial`` (the rows) and its commit record.

``OUT.partial`` is JSON Lines: line 1 is the call's identity (``{"flexkit_annotate": {...}}``: the taskset's row
digest, the checkpoint's content digest, ``--samples``, ``--column``, ``--chunk``, the seed and the
``[trainer]``), then one output row per line, in taskset order. It is created whole with its identity line (a
temporary file, fsynced, renamed), so it is either absent or starts with a complete identity.

Each finished chunk is written at the committed length and fsynced; then the **commit record**
``OUT.partial.state`` (a checkpoint folder, :mod:`flexkit.pipeline._checkpoint`, itself atomic) is saved with the rows
and
bytes committed, the SHA-256 of those bytes and the trainer's state after the chunk. Bytes past the committed
length (a chunk being written when the process died) are dropped by the next call. So a SIGKILL, a Ctrl-C or an
error at any point leaves 0..n complete chunks, and the rerun of the same command continues with the trainer in
the state it had after the last committed chunk: its output is byte for byte that of an uninterrupted call
(for trainers whose ``state_dict`` holds their random streams, as the built-in ones do).

Opening a partial checks everything before any rollout: the identity (naming what changed), every committed line
(a damaged or non-UTF-8 line is reported with its number) and the checksum of the committed bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import attrs

from flexkit._files import fsync_dir, require_regular_file
from flexkit._state_problems import is_count
from flexkit.errors import CheckpointError, FlexkitError, StateError
from flexkit.pipeline._checkpoint import STATE_FILE, load_state, save_state

__all__ = ["HEADER_KEY", "IDENTITY_VERSION", "PartialOutput", "record_path"]

#: The key of ``OUT.partial``'s first line.
HEADER_KEY = "flexkit_annotate"
#: Layout version of the partial file (files without one, from older flexkit versions, are refused).
IDENTITY_VERSION = 2
#: What each identity key means, for the message when a rerun differs.
_MEANING = {
    "version": "the partial file's format (it was written by an older flexkit)",
    "taskset": "--taskset",
    "size": "the taskset's size",
    "rows": "the taskset's rows (its file changed)",
    "checkpoint": "the --checkpoint's content (the checkpoint changed, or another one was given)",
    "samples": "--samples",
    "column": "--column",
    "overwrite": "--overwrite",
    "chunk": "--chunk (or [run] batch_size)",
    "seed": "[run] seed",
    "trainer": "the [trainer] table",
}


def record_path(partial: Path) -> Path:
    """The commit record's folder beside ``partial``: ``OUT.partial.state``."""
    return partial.with_name(partial.name + ".state")


def _write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` so that it is either absent or holds all of ``data`` (temp file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent, strict=False)


def _start_over(partial: Path) -> str:
    return f"delete {partial} to start the annotation over"


def _changed(partial: Path, theirs: Any, mine: Mapping[str, Any]) -> FlexkitError:
    """The error for a partial written by a call with another identity, naming what differs."""
    if not isinstance(theirs, Mapping) or theirs.get("version") != IDENTITY_VERSION:
        return FlexkitError(f"{partial} was written by an older flexkit version, whose partial files cannot be "
                            f"continued: {_start_over(partial)}")
    keys: list[str] = [k for k in mine if theirs.get(k) != mine[k]] + [k for k in theirs if k not in mine]
    what = "; ".join(_MEANING.get(k, k) for k in keys)
    return FlexkitError(f"{partial} is from an annotate call with other arguments or inputs: {what} changed since "
                        f"it was started. Run it with what it started with to finish it, or {_start_over(partial)}")


def _line_problem(raw: bytes) -> str | None:
    """Why a committed row line is damaged (``None``: it is a JSON object in UTF-8)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8: byte {raw[exc.start]:#04x} at column {exc.start + 1}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    return None if isinstance(value, dict) else f"a JSON {type(value).__name__}, not an object"


def _committed_length(partial: Path, data: bytes, header_length: int, rows: int) -> int:
    """The byte length of the identity line and the first ``rows`` row lines of ``data``, after checking each of
    those lines: a damaged one raises :class:`FlexkitError` with its line number."""
    lines = data[header_length:].split(b"\n")[:-1]  # complete lines only: the rest is a torn, uncommitted line
    for number, raw in enumerate(lines[:rows], start=2):
        why = _line_problem(raw)
        if why is not None:
            raise FlexkitError(f"{partial} line {number} is damaged ({why}): {_start_over(partial)}")
    if len(lines) < rows:
        raise FlexkitError(f"{partial} holds {len(lines)} complete rows, but its commit record says {rows} were "
                           f"written: the file was cut or replaced; {_start_over(partial)}")
    return header_length + sum(len(raw) + 1 for raw in lines[:rows])


def _read_record(partial: Path, identity: Mapping[str, Any]) -> tuple[int, int, str, Any] | None:
    """``(rows, bytes, sha256, trainer state)`` of the commit record, ``None`` when nothing was committed yet."""
    record = record_path(partial)
    if not (record / STATE_FILE).exists():
        return None
    try:
        state, meta = load_state(record)
    except CheckpointError as exc:
        raise FlexkitError(f"the commit record of {partial} is damaged ({exc}): {_start_over(partial)}") from None
    if meta.get("annotate") != identity:
        raise FlexkitError(f"the commit record {record} belongs to another annotate call than {partial}: "
                           f"{_start_over(partial)}")
    rows, length, digest = state.get("rows"), state.get("bytes"), state.get("sha256")
    if not (is_count(rows) and is_count(length) and isinstance(digest, str) and "trainer" in state):
        raise FlexkitError(f"the commit record {record} is not one flexkit writes: {_start_over(partial)}")
    return int(rows), int(length), digest, state["trainer"]


@attrs.define
class PartialOutput:
    """An open ``OUT.partial``: its identity, the rows and bytes committed, and the trainer state to continue
    from (``None``: nothing committed yet, start from the freshly built trainer)."""

    path: Path
    identity: dict[str, Any]
    rows: int
    length: int
    header_length: int
    trainer_state: Any = None
    committed: bool = False
    _digest: Any = None

    @classmethod
    def open(cls, partial: Path, identity: Mapping[str, Any]) -> PartialOutput:
        """Continue ``partial`` if it exists (after checking it, see the module docstring), else create it with its
        identity line. Raises :class:`FlexkitError` naming the problem and what to do."""
        identity = cast(dict[str, Any], json.loads(json.dumps(dict(identity))))  # as it reads back
        header = (json.dumps({HEADER_KEY: identity}) + "\n").encode()
        require_regular_file(partial, "the partial file")  # a FIFO would block the read
        try:
            data = partial.read_bytes()
        except FileNotFoundError:
            data = b""
        if not data:  # absent, or empty (an older flexkit killed before its first line): start afresh
            shutil.rmtree(record_path(partial), ignore_errors=True)
            _write_whole(partial, header)
            return cls(partial, identity, 0, len(header), len(header), digest=hashlib.sha256(header))
        first, newline, _rest = data.partition(b"\n")
        why = _line_problem(first) if newline else "cut short"
        theirs = json.loads(first).get(HEADER_KEY) if why is None else None
        if why is not None or not isinstance(theirs, dict):
            why = why or "not an annotate identity line"
            raise FlexkitError(f"{partial} line 1 is damaged ({why}): {_start_over(partial)}")
        if theirs != identity:
            raise _changed(partial, theirs, identity)
        header_length = len(first) + 1
        record = _read_record(partial, identity)
        rows, length, digest, trainer_state = record or (0, header_length, None, None)
        hasher = hashlib.sha256(data[:length])
        if _committed_length(partial, data, header_length, rows) != length or (
                digest is not None and hasher.hexdigest() != digest):
            raise FlexkitError(f"{partial} was changed after it was written (its checksum does not match its "
                               f"commit record): {_start_over(partial)}")
        if len(data) > length:  # rows of a chunk that was not committed
            with partial.open("r+b") as fh:
                fh.truncate(length)
                os.fsync(fh.fileno())
        return cls(partial, identity, rows, length, header_length, trainer_state, record is not None,
                   digest=hasher)

    def commit(self, data: bytes, count: int, trainer_state: Any) -> None:
        """Append ``count`` rows (``data``: their lines) and commit them with the trainer's state after them."""
        if data:
            with self.path.open("r+b") as fh:
                fh.seek(self.length)
                fh.write(data)
                fh.truncate()
                fh.flush()
                os.fsync(fh.fileno())
            self._digest.update(data)
        state = {"rows": self.rows + count, "bytes": self.length + len(data), "sha256": self._digest.hexdigest(),
                 "trainer": trainer_state}
        try:
            save_state(record_path(self.path), state, meta={"annotate": self.identity})
        except StateError as exc:
            raise CheckpointError(f"cannot save the trainer's state beside {self.path}, which a rerun continues "
                                  f"from: {exc}") from None
        self.rows += count
        self.length += len(data)
        self.committed = True

    def body(self) -> bytes:
        """The committed row lines (everything after the identity line)."""
        with self.path.open("rb") as fh:
            fh.seek(self.header_length)
            return fh.read(self.length - self.header_length)

    def remove(self) -> None:
        """Delete the partial file, then its commit record (a record without its partial is ignored)."""
        self.path.unlink(missing_ok=True)
        shutil.rmtree(record_path(self.path), ignore_errors=True)
