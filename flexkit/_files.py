"""Opening input files safely: only regular files are read.

A FIFO (named pipe) given where flexkit expects a file would block ``open`` or the first read forever; a
socket, a device or a directory is never a taskset or a checkpoint. These helpers refuse such paths with a
message that says what the path is, before anything is read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from flexkit.errors import FlexkitError

__all__ = ["O_BINARY", "O_CLOEXEC", "O_NONBLOCK", "NotRegularFileError", "file_kind", "open_regular",
           "require_regular_file", "resolve_path"]

_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)

#: ``open`` flags one platform has and another lacks (Windows: no ``O_NONBLOCK``, no ``O_CLOEXEC``; POSIX: no
#: ``O_BINARY``), 0 where the platform lacks them, so every ``os.open`` in flexkit can name them.
O_NONBLOCK, O_CLOEXEC, O_BINARY = (int(getattr(os, flag, 0)) for flag in ("O_NONBLOCK", "O_CLOEXEC", "O_BINARY"))

#: Flags of :func:`open_regular`: non-blocking, so opening a FIFO returns at once instead of waiting for a writer.
_OPEN_FLAGS = os.O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_BINARY


class NotRegularFileError(OSError):
    """The path names something other than a regular file: a FIFO, a socket or a device."""


def resolve_path(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute the way the operating system resolves it when opening: the symbolic links of its
    directories are followed in order, so ``link/../data.jsonl`` is ``data.jsonl`` next to the link's
    *target* (a lexical ``normpath`` would drop ``link/..`` first and name another file). The last component
    is kept as given (a link there is followed when the file is opened), so its name and suffix stay the
    user's."""
    head, tail = os.path.split(os.fspath(path))
    if tail in ("", os.curdir, os.pardir):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head or os.curdir), tail)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` describes, in words: ``"a regular file"``, ``"a FIFO (named pipe)"``, ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def _refuse(mode: int, path: str) -> None:
    """Raise ``IsADirectoryError`` or :class:`NotRegularFileError` unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", path)
    raise NotRegularFileError(errno.EINVAL, f"is {file_kind(mode)}, not a regular file", path)


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading, without blocking, and return ``(fd, stat)``; only regular files are kept.

    Raises ``FileNotFoundError``, ``IsADirectoryError``, :class:`NotRegularFileError` (a FIFO, socket or
    device, closed again at once) or another ``OSError``. The check is on the opened descriptor, so a path
    swapped between a check and the open cannot slip through.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        _refuse(st.st_mode, os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def require_regular_file(
    path: str | os.PathLike[str], what: str = "file", error: Callable[[str], Exception] = FlexkitError
) -> None:
    """Raise ``error(message)`` when ``path`` exists but is not a regular file (a directory, FIFO, socket or
    device), before anything opens it; a missing path passes, so the caller's own open reports it.

    For example ``require_regular_file(path, "checkpoint file", CheckpointError)``.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise error(f"cannot read {what} {os.fspath(path)}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {os.fspath(path)} is {file_kind(mode)}, not a regular file")


def fsync_dir(path: str | os.PathLike[str], *, strict: bool = True) -> None:
    """Make a directory's entries durable (``fsync`` on the directory). A platform without directory descriptors
    is skipped; a file system that refuses the ``fsync`` raises ``OSError`` unless ``strict`` is false."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse it
        if strict:
            raise
    finally:
        os.close(fd)
