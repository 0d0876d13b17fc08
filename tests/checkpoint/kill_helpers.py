"""Shared pieces of the kill tests (``test_kill_checkpoint.py``, ``test_kill_run.py``).

A kill test starts a child process, the "zygote", with ``sys.executable``: it imports flexkit and torch once,
then forks one process per job it is sent (``run <payload>`` on its stdin), which the parent may SIGKILL. Here:
the zygote's loop (:func:`serve_forks`), the parent's handle on it (:class:`ZygoteProcess`, reading its lines
with :class:`Lines`), the base of a campaign's report (:class:`CampaignReport`), and the checks both tests
make on what a kill left (:func:`canonical` states, :func:`stale_files`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import numpy as np
import pytest

from flexkit.pipeline._checkpoint import LOCK_FILE, STATE_FILE
from tests.fixtures import ROOT

__all__ = ["CampaignReport", "Lines", "ZygoteProcess", "canonical", "emit", "needs_fork", "serve_forks",
           "stale_files"]

#: Marks a test that forks and SIGKILLs processes.
needs_fork = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="needs fork and SIGKILL")

Z = TypeVar("Z", bound="ZygoteProcess")


# -- states and checkpoint folders ------------------------------------------------------------------------------


def _plain(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {"dtype": str(obj.dtype), "data": obj.tolist()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {repr(k) if not isinstance(k, str) else k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def canonical(state: Any) -> str:
    """Canonical JSON of a state dict (arrays via ``tolist`` with their dtype): equal strings, equal states."""
    return json.dumps(_plain(state), sort_keys=True)


def stale_files(ckpt: Path) -> set[str]:
    """Files of a checkpoint directory other than ``state.json``, the arrays file it names and the lock file."""
    names = {p.name for p in ckpt.iterdir()} if ckpt.exists() else set()
    current = json.loads((ckpt / STATE_FILE).read_text())["arrays"] if STATE_FILE in names else None
    return names - {STATE_FILE, LOCK_FILE, current}


# -- the child side ---------------------------------------------------------------------------------------------


def emit(line: str) -> None:
    """Write ``line`` to stdout unbuffered (a forked process exits with ``os._exit``, which flushes nothing)."""
    os.write(1, (line + "\n").encode())


def serve_forks(child: Callable[[str], int], *, announce_pid: bool = False) -> None:
    """The zygote's loop: say ``ready``, then fork a process running ``child(payload)`` for each ``run <payload>``
    line on stdin, until ``quit`` or the end of stdin.

    The forked process exits with ``child``'s return value (70 if it raised) through ``os._exit``, never returning
    into the loop. The zygote reports ``pid <pid>`` after forking when ``announce_pid`` (else ``child`` may say it
    itself) and ``reaped <pid> <status>`` once the process ended, after all its own lines. Call it once everything
    is imported: nothing here starts a thread, so forking is safe.
    """
    # A test run started in the background by a shell without job control inherits SIGINT ignored, and so would
    # every fork: give the forks Python's own Ctrl-C handler, as in a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    emit("ready")
    for line in sys.stdin:
        cmd, _, payload = line.strip().partition(" ")
        if cmd == "quit":
            break
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = child(payload)
            finally:
                os._exit(code)
        if announce_pid:
            emit(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        emit(f"reaped {pid} {status}")


# -- the parent side --------------------------------------------------------------------------------------------


class Lines:
    """Lines from a pipe, with a timeout (no read-ahead buffering surprises: ``select`` + ``os.read``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def next(self, timeout: float = 60.0) -> str:
        """The next line (without its newline); ``TimeoutError`` after ``timeout`` seconds, ``EOFError`` at the end."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(left, 0.0))
            if not ready:
                raise TimeoutError("no line from the kill-test child within the timeout")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("the kill-test child exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


@attrs.define
class ZygoteProcess:
    """The zygote, driven over stdin/stdout; its stderr goes to the file ``stderr``.

    A context manager: leaving it stops the child, and a lost child (no line in time, or its output ended) fails
    the test with the end of its stderr.
    """

    proc: subprocess.Popen[bytes]
    lines: Lines
    stderr: Path

    @classmethod
    def spawn(cls: type[Z], module: str, args: Sequence[str], stderr: Path, **fields: Any) -> Z:
        """Start ``module.zygote(*args)`` from the repository root and wait for its ``ready``; ``fields`` are a
        subclass's own."""
        code = f"import sys; from {module} import zygote; zygote(*sys.argv[1:])"
        with stderr.open("wb") as err:
            proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err)
        zyg = cls(proc, Lines(proc.stdout.fileno()), stderr, **fields)  # type: ignore[union-attr]
        assert zyg.lines.next(timeout=120.0) == "ready"
        return zyg

    def send(self, line: str) -> None:
        """Write one command line to the zygote."""
        self.proc.stdin.write(f"{line}\n".encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def stop(self) -> None:
        """Ask the zygote to quit (kill it if it does not) and wait for it."""
        try:
            self.proc.stdin.write(b"quit\n")  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()

    def __enter__(self: Z) -> Z:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any) -> None:
        try:
            if isinstance(exc, (TimeoutError, EOFError)):
                err = self.stderr.read_text(errors="replace")[-4000:]
                raise AssertionError(f"{exc}; the child's stderr ends with:\n{err}") from None
        finally:
            self.stop()


@attrs.define
class CampaignReport:
    """What a kill campaign did and found: a subclass declares its counts (ints) and one tally (a ``Counter``)."""

    def summary(self) -> str:
        """One line: ``name=value`` for each count, then the tally in brackets."""
        counts, tally = [], ""
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if isinstance(value, Counter):
                tally = ", ".join(f"{k}: {v}" for k, v in sorted(value.items()))
            else:
                counts.append(f"{field.name}={value}")
        return " ".join([*counts, f"[{tally}]"])
