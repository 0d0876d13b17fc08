"""Taskset storage: the tasks a selector picks from, read by index.

A taskset is a table of tasks (one dict per row). Selectors see only its size and, if they ask for them, a few
numeric *feature columns*; the scheduler reads the rows the selector picked with :meth:`Taskset.read`.

The built-in ``file`` storage (``storage_type = "file"`` in a ``[[tasksets]]`` table) opens:

- **JSON Lines** (``.jsonl``/``.ndjson``): indexed lazily. Opening makes one pass over the bytes to record
  where each line starts; rows are parsed only when read, by seeking, so a file of any size costs 16 bytes
  of memory per row (plus 8 more when it has blank lines) and never sits in memory whole;
- **JSON** (``.json``): a top-level list of objects. JSON cannot be indexed without parsing it, so the file is
  loaded whole; use JSON Lines for large tasksets;
- **Parquet** (``.parquet``): via pyarrow (``pip install "flexkit-rft[parquet]"``), memory-mapped and read with
  ``take``.

Modules, by reader: :mod:`~flexkit.tasksets._base` (the :class:`Taskset` protocol and feature mappings),
:mod:`~flexkit.tasksets._jsonl`, :mod:`~flexkit.tasksets._json_file`, :mod:`~flexkit.tasksets._parquet`,
:mod:`~flexkit.tasksets._memory` (one per format) and :mod:`~flexkit.tasksets.storage` (the ``file`` storage).
:mod:`flexkit.plugins.builtins` registers the ``file`` storage.
"""

from __future__ import annotations

from flexkit.tasksets._base import LazyFeatures, Taskset, check_rows, lazy_features
from flexkit.tasksets._json_file import JsonTaskset
from flexkit.tasksets._jsonl import JsonlTaskset
from flexkit.tasksets._memory import InMemoryTaskset
from flexkit.tasksets._parquet import ParquetTaskset
from flexkit.tasksets.storage import (
    FORMATS,
    FileStorageConfig,
    open_file_taskset,
    resolve_format,
)

__all__ = [
    "FORMATS",
    "FileStorageConfig",
    "InMemoryTaskset",
    "JsonTaskset",
    "JsonlTaskset",
    "LazyFeatures",
    "ParquetTaskset",
    "Taskset",
    "check_rows",
    "lazy_features",
    "open_file_taskset",
    "resolve_format",
]
