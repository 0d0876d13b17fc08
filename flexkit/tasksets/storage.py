"""The built-in ``file`` storage: its config, the format resolution from a file's suffix, and opening a taskset
file (:mod:`flexkit.plugins.builtins` registers it)."""

from __future__ import annotations

import os
import stat
from typing import Any

import attrs

from flexkit._files import file_kind, resolve_path
from flexkit.config._fields import field
from flexkit.errors import TasksetError
from flexkit.tasksets._base import Taskset
from flexkit.tasksets._json_file import JsonTaskset
from flexkit.tasksets._jsonl import JsonlTaskset
from flexkit.tasksets._parquet import ParquetTaskset

__all__ = ["FORMATS", "FileStorageConfig", "open_file_taskset", "resolve_format"]

#: File formats the ``file`` storage reads; ``auto`` picks one from the file's suffix.
FORMATS: tuple[str, ...] = ("auto", "jsonl", "json", "parquet")
_SUFFIXES: dict[str, str] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}

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


_READERS: dict[str, type[JsonlTaskset] | type[JsonTaskset] | type[ParquetTaskset]] = {
    "jsonl": JsonlTaskset, "json": JsonTaskset, "parquet": ParquetTaskset,
}


def open_file_taskset(
    config: FileStorageConfig, *, name: str, base_dir: str | os.PathLike[str] | None = None, **_context: Any
) -> Taskset:
    """Open a taskset file (JSON Lines, JSON or Parquet).

    ``config.path`` is resolved against ``base_dir`` (default: the working directory) unless it is absolute;
    ``~`` is expanded first. Symbolic links in its directories are followed in order, as the operating
    system does (the file's own name is kept, so its suffix tells the format). Anything but a regular file
    (a directory, a FIFO, a device) is refused before it is opened.
    """
    raw = os.fspath(config.path)
    if not raw:
        raise TasksetError("path is empty", taskset=name)
    if "\x00" in raw:  # the OS refuses it with a bare ValueError, far from the key
        raise TasksetError(f"path {raw!r} contains a NUL character, which no file name can hold", taskset=name)
    expanded = os.path.expanduser(raw)
    relative = not os.path.isabs(expanded)
    base = os.fspath(base_dir) if base_dir is not None else os.getcwd()
    path = resolve_path(os.path.join(base, expanded))  # as the OS does: `link/..` is the link target's parent
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        hint = f" ({raw!r} resolved against {base})" if relative else ""
        raise TasksetError(f"no such file{hint}", taskset=name, path=path) from None
    except OSError as exc:
        raise TasksetError(f"cannot open: {exc.strerror or exc}", taskset=name, path=path) from None
    if stat.S_ISDIR(mode):
        raise TasksetError("is a directory, not a file", taskset=name, path=path)
    if not stat.S_ISREG(mode):  # a FIFO would block the open forever
        raise TasksetError(f"is {file_kind(mode)}, not a regular file", taskset=name, path=path)
    fmt = resolve_format(path, config.format, name=name)
    return _READERS[fmt](path, name=name)

