"""Regression: a garbage collection inside the descriptor pool's locked code ran a taskset's finalizer, whose
``discard`` waited for the lock its own thread held (a deadlock seen once in the suite)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

from flexkit.tasksets._fdpool import FdPool


def _opener(path: Path):
    return lambda: os.open(path, os.O_RDONLY)


def test_discard_from_inside_the_pools_locked_code_neither_blocks_nor_is_lost(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    pool = FdPool(capacity=1)
    with pool.borrow("a", _opener(tmp_path / "a")):
        pass

    class CollectingDict(OrderedDict):
        """An ``OrderedDict`` whose ``items()`` runs a finalizer first, as a garbage collection may."""

        def items(self):  # type: ignore[override]
            if "a" in self:
                pool.discard("a")
            return super().items()

    pool._open = CollectingDict(pool._open)
    done = threading.Event()

    def insert_b() -> None:
        with pool.borrow("b", _opener(tmp_path / "b")):  # _close_idle iterates items() under the lock
            pass
        done.set()

    thread = threading.Thread(target=insert_b, daemon=True)
    thread.start()
    assert done.wait(10), "the pool deadlocked on a discard from inside its own locked code"
    assert "a" not in pool._open  # closed once (evicted as least recently used; the queued discard finds it gone)
    assert list(pool._open) == ["b"] and not pool._pending


def test_a_discard_while_another_thread_holds_the_pool_is_done_when_it_lets_go(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    pool = FdPool()
    with pool.borrow("a", _opener(tmp_path / "a")):
        pass
    with pool._locked():
        pool.discard("a")  # would wait forever on a plain lock held by this thread
        assert "a" in pool._open
    assert "a" not in pool._open and not pool._pending
