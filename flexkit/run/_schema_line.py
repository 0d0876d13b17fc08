"""Copying a pipeline file into another folder (a run folder) with its ``#:schema`` line still pointing at the
schema: a relative path on the file's first line is rewritten relative to the new folder; everything else is
copied byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

#: The first-line directive TOML editors (Taplo, Even Better TOML) read the schema location from.
SCHEMA_PREFIX = b"#:schema "


def retarget_schema_line(data: bytes, source_dir: Path, dest_dir: Path) -> bytes:
    """``data`` (a pipeline file read from ``source_dir``) with a relative ``#:schema`` path on its first line
    made relative to ``dest_dir``; URLs, absolute paths and files without the line are returned unchanged."""
    if not data.startswith(SCHEMA_PREFIX):
        return data
    end = data.find(b"\n")
    line, rest = (data, b"") if end < 0 else (data[:end], data[end:])
    carriage = line.endswith(b"\r")
    target = line[len(SCHEMA_PREFIX):].rstrip(b"\r").strip().decode("utf-8", errors="surrogateescape")
    if not target or "://" in target or os.path.isabs(target):
        return data
    absolute = (Path(source_dir) / target).resolve()
    try:
        relative = Path(os.path.relpath(absolute, Path(dest_dir).resolve())).as_posix()
    except ValueError:  # another drive (Windows): an absolute path still points at it
        relative = absolute.as_posix()
    new = SCHEMA_PREFIX + relative.encode("utf-8", errors="surrogateescape") + (b"\r" if carriage else b"")
    return new + rest


def copy_pipeline_file(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Copy the pipeline file ``source`` to ``dest`` with its ``#:schema`` line retargeted (see module doc)."""
    source, dest = Path(source), Path(dest)
    dest.write_bytes(retarget_schema_line(source.read_bytes(), source.parent, dest.parent))
