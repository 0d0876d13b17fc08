"""A small process-wide pool of open file descriptors, shared by every lazily read taskset.

A taskset does not keep its file open: it borrows a descriptor for one read and gives it back. The pool keeps
the :data:`CAPACITY` most recently used ones open, so a few busy tasksets never reopen their files, while
thousands of tasksets cost at most that many descriptors (plus those borrowed at the same moment).
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, suppress

__all__ = ["CAPACITY", "POOL", "FdPool"]

#: Descriptors kept open when idle (the default soft limit of open files is often 1024).
CAPACITY = 64


class _Entry:
    __slots__ = ("dropped", "fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.dropped = False


class FdPool:
    """Open descriptors by key, least recently used closed first; a borrowed descriptor is never closed
    under its borrower.

    Thread-safe; after a ``fork`` the child starts with an empty pool (the parent's descriptors are closed
    in the child only). :meth:`discard` never waits for the lock, so a taskset's finalizer may call it at any
    moment, even when a garbage collection runs that finalizer inside the pool's own locked code.
    """

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._pending: deque[Hashable] = deque()  # keys discarded while the lock was held

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def borrow(self, key: Hashable, opener: Callable[[], int]) -> Iterator[int]:
        """The open descriptor of ``key`` for the duration of the ``with`` block (``opener()`` opens it when
        the pool holds none)."""
        entry = self._take(key)
        if entry is None:
            entry = self._insert(key, self._open_fd(opener))
        try:
            yield entry.fd
        finally:
            with self._locked():
                entry.users -= 1
                close = entry.dropped and entry.users == 0
            if close:
                os.close(entry.fd)

    def discard(self, key: Hashable) -> None:
        """Close ``key``'s descriptor now, or when its last borrower gives it back. Never waits: while another
        call holds the pool (another thread, or this one when a garbage collection runs a finalizer inside the
        pool), the key waits in a queue that the holder empties as it lets go."""
        self._pending.append(key)
        self._drain()

    def clear(self) -> None:
        """Close every idle descriptor (borrowed ones close when given back)."""
        with self._locked():
            keys = list(self._open)
        for key in keys:
            self.discard(key)

    # -- internals --------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the lock for the block, then close what was discarded meanwhile."""
        with self._lock:
            yield
        self._drain()

    def _drain(self) -> None:
        """Drop the queued keys (closing their idle descriptors) when the lock is free; else leave them to the
        holder, who drains as it lets go."""
        while self._pending:
            if not self._lock.acquire(blocking=False):
                return
            idle: list[int] = []
            try:
                while self._pending:
                    entry = self._open.pop(self._pending.popleft(), None)
                    if entry is not None:
                        entry.dropped = True
                        if entry.users == 0:
                            idle.append(entry.fd)
            finally:
                self._lock.release()
            for fd in idle:
                os.close(fd)

    def _take(self, key: Hashable) -> _Entry | None:
        with self._locked():
            entry = self._open.get(key)
            if entry is not None:
                self._open.move_to_end(key)
                entry.users += 1
            return entry

    def _open_fd(self, opener: Callable[[], int]) -> int:
        try:
            return opener()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
        self._close_idle(0)  # out of descriptors: give back every idle one, then try once more
        return opener()

    def _insert(self, key: Hashable, fd: int) -> _Entry:
        with self._locked():
            entry = self._open.get(key)
            spare = None
            if entry is None:
                entry = self._open[key] = _Entry(fd)
            else:  # another thread opened the same key meanwhile: use its descriptor
                self._open.move_to_end(key)
                spare = fd
            entry.users += 1
        if spare is not None:
            os.close(spare)
        self._close_idle(self.capacity)
        return entry

    def _close_idle(self, keep: int) -> None:
        """Close idle descriptors, least recently used first, until at most ``keep`` remain open."""
        victims: list[int] = []
        with self._locked():
            excess = len(self._open) - keep
            if excess > 0:
                for key in [k for k, e in self._open.items() if e.users == 0][:excess]:
                    victims.append(self._open.pop(key).fd)
        for fd in victims:
            os.close(fd)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock and no descriptors (the inherited copies are closed)."""
        self._lock = threading.Lock()
        self._pending = deque()
        entries, self._open = list(self._open.values()), OrderedDict()
        for entry in entries:
            with suppress(OSError):
                os.close(entry.fd)


#: The pool every :class:`~flexkit.tasksets._jsonl.JsonlTaskset` borrows from.
POOL = FdPool()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL._after_fork)
