"""What ``flexkit annotate`` writes: the output's format, the checks of the taskset's rows made before any rollout,
and the finished file.

Before any rollout, :func:`scan_rows` reads every row once: it takes the digest of the rows (the partial file's
identity, so a rerun on changed rows is refused), keeps one digest per chunk (the rows a chunk reads later must be
the same), collects every column name (``--column`` must be new, or ``--overwrite`` given), and refuses values that
JSON cannot hold (timestamps, binary: annotate writes rows through JSON) and, for Parquet output, columns that
cannot become one Parquet column (mixed types), each named.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from flexkit.errors import ConfigError, FlexkitError, TasksetError
from flexkit.tasksets._base import path_of

__all__ = ["FORMATS", "RowScan", "output_format", "row_lines", "scan_rows", "write_output"]

#: The output formats by suffix.
FORMATS = {".jsonl": "jsonl", ".parquet": "parquet"}


def output_format(out: Path) -> str:
    """``"jsonl"`` or ``"parquet"`` from ``out``'s suffix; any other suffix is a :class:`ConfigError`."""
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        hint = " (annotate writes JSON Lines: name it .jsonl)" if out.suffix.lower() == ".json" else ""
        raise ConfigError(f"--out must end in .jsonl or .parquet, got {out.name!r}{hint}")
    return fmt


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def row_lines(rows: Sequence[Mapping[str, Any]], first: int, taskset: Any) -> bytes:
    """The rows as JSON lines; a value JSON cannot hold raises :class:`TasksetError` naming its column and row
    (``first``: the index of ``rows[0]``)."""
    out = []
    for i, row in enumerate(rows, start=first):
        try:
            out.append(json.dumps(row))
        except (TypeError, ValueError) as exc:
            raise _unwritable(row, i, taskset, exc) from None
    return "".join(line + "\n" for line in out).encode()


def _unwritable(row: Mapping[str, Any], index: int, taskset: Any, exc: Exception) -> TasksetError:
    for key, value in row.items():
        try:
            json.dumps({key: value})
        except (TypeError, ValueError):
            return TasksetError(f"column {key!r} holds a {type(value).__name__} at row {index} ({_short(value)}), "
                                "which flexkit annotate cannot write (it writes rows through JSON, which has no "
                                "timestamps or binary values): convert the column to strings or numbers first",
                                taskset=taskset.name, path=path_of(taskset))
    return TasksetError(f"row {index} cannot be written as JSON: {exc}", taskset=taskset.name,
                        path=path_of(taskset))


@attrs.frozen
class RowScan:
    """What :func:`scan_rows` found: the digest of all rows, one digest per chunk, and the column names."""

    digest: str
    chunk_digests: tuple[str, ...]
    columns: tuple[str, ...]


def scan_rows(taskset: Any, *, size: int, chunk: int, column: str, overwrite: bool, fmt: str) -> RowScan:
    """Read every row of ``taskset`` once and check it can be annotated (see the module docstring)."""
    digest, chunks, columns = hashlib.sha256(), [], {}
    parquet_rows: list[dict[str, Any]] = []
    for start in range(0, size, chunk):
        rows = taskset.read(list(range(start, min(size, start + chunk))))
        data = row_lines(rows, start, taskset)
        digest.update(data)
        chunks.append(hashlib.sha256(data).hexdigest())
        for row in rows:
            columns.update(dict.fromkeys(row))
        if fmt == "parquet":
            parquet_rows += [json.loads(line) for line in data.split(b"\n")[:-1]]
    if column in columns and not overwrite:
        raise ConfigError(f"--column {column!r} is already a column of taskset {taskset.name!r}: choose a new name, "
                          "or pass --overwrite to replace its values")
    if fmt == "parquet":
        check_parquet_columns(parquet_rows, [c for c in columns if c != column], taskset)
    return RowScan(f"sha256:{digest.hexdigest()}", tuple(chunks), tuple(columns))


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet  # checked here, used by write_output
    except ImportError:
        raise FlexkitError("Parquet output needs pyarrow: pip install \"flexkit-rft[parquet]\"") from None
    return pa


def check_parquet_columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], taskset: Any) -> None:
    """Raise :class:`TasksetError` naming the first of ``columns`` whose values cannot form one Parquet column."""
    pa = _arrow()
    for key in columns:
        values = [row.get(key) for row in rows]
        try:
            pa.array(values)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            kinds = sorted({type(v).__name__ for v in values if v is not None})
            raise TasksetError(f"column {key!r} cannot be written to Parquet: it holds {', '.join(kinds)} values "
                               f"({exc}); give it one type, or write --out as .jsonl",
                               taskset=taskset.name, path=path_of(taskset)) from None


def _table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A pyarrow table of ``rows`` with every column any row has (first-seen order; missing values null)."""
    pa = _arrow()
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pa.table({key: pa.array([row.get(key) for row in rows]) for key in columns})


def write_output(out: Path, fmt: str, body: bytes) -> None:
    """Write the finished rows (``body``: JSON lines) to ``out`` atomically: as they are for JSON Lines, as a
    table with every column of every row for Parquet."""
    tmp = out.with_name(out.name + ".tmp")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(_table([json.loads(line) for line in body.split(b"\n")[:-1]]), tmp)
    else:
        tmp.write_bytes(body)
    with tmp.open("rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, out)
