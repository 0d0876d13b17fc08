"""SIGTERM handled as Ctrl-C on the command line: a job scheduler's or a container's stop lets a run end at the step
it is in, keep its last checkpoint and say how to continue, instead of dying with no message."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "Terminated", "exit_status", "sigterm_as_interrupt"]

#: Exit status after Ctrl-C (SIGINT) and after SIGTERM, as a shell reports a process those signals ended.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's or a container's stop) during a command: handled as Ctrl-C is, so that a run
    stops at the step it is in, keeps its last checkpoint and says how to continue."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the command runs, SIGTERM raises :class:`Terminated` (in the main thread only, where signal handlers
    can be set; elsewhere the default stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_status(stop: BaseException) -> int:
    """The exit status of a command that ``stop`` (a :class:`KeyboardInterrupt`, or one raised while handling
    it) ended: :data:`EXIT_TERMINATED` after SIGTERM, :data:`EXIT_INTERRUPTED` after Ctrl-C."""
    cause: BaseException | None = stop
    while cause is not None:
        if isinstance(cause, Terminated):
            return EXIT_TERMINATED
        cause = cause.__context__
    return EXIT_INTERRUPTED
