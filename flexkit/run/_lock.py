"""One writer per folder: the advisory lock ``flexkit run`` holds on its run folder and ``flexkit compare`` on
its ``--out`` folder for as long as they run.

The lock is an exclusive, non-blocking ``flock`` on :data:`LOCK_FILE` in the folder, which also holds the
holder's process id. A second command on the same folder is refused at once with a
:class:`~flexkit.errors.FlexkitError` naming that process id; two writers would otherwise both append to one
``metrics.jsonl`` (or delete each other's unfinished runs). The kernel drops the lock of a process that dies,
even by SIGKILL, so a lock file left by a killed command is stale and the next command simply takes it. The
file stays in the folder (removing it would let a third command lock a new file while a second one still holds
the old one). Where advisory locks do not exist (Windows, some network filesystems) nothing is locked, as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import structlog

from flexkit._files import O_CLOEXEC
from flexkit.errors import FlexkitError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]  # no such module on Windows

__all__ = ["LOCK_FILE", "hold_folder"]

log = structlog.get_logger("flexkit.runner")

#: The lock file of a run folder or a comparison's folder.
LOCK_FILE = ".flexkit.lock"


def _holder(fd: int) -> int | None:
    """The process id written in the lock file (``None``: none, or not a number)."""
    try:
        words = os.pread(fd, 64, 0).split()
    except OSError:
        return None
    return int(words[0]) if words and words[0].isdigit() else None


@contextmanager
def hold_folder(folder: Path, command: str) -> Iterator[None]:
    """Hold ``folder``'s lock (the folder must exist) while the block runs; ``command`` names what holds it
    (``"flexkit run"``) in the refusal. Raises :class:`~flexkit.errors.FlexkitError` at once when another
    process holds it."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | O_CLOEXEC, 0o644)
    except OSError as exc:  # a read-only folder: the command's first write fails with its own message
        log.debug("cannot open the folder's lock file", folder=str(folder), error=str(exc))
        yield
        return
    held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            who = f"pid {pid}" if pid is not None else "a process whose id it does not hold"
            raise FlexkitError(
                f"{folder} is in use: another {command} (or flexkit command) on it is running ({who}, which holds "
                f"{folder / LOCK_FILE}); wait for it to end, or choose another --out") from None
        except OSError as exc:  # a filesystem without flock: as without the lock
            log.debug("the folder cannot be locked", folder=str(folder), error=str(exc))
        else:
            held = True
            stale = _holder(fd)
            if stale is not None and stale != os.getpid():
                log.debug("taking the lock a process that ended left", folder=str(folder), pid=stale)
            with suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        if held:
            with suppress(OSError):
                os.ftruncate(fd, 0)  # still holding it: nobody reads a pid that has ended
        os.close(fd)
