"""The scheduler's prefetch: the next batch selected and read in a background thread, ahead of its read.

:class:`Prefetcher` owns the background thread and the one batch that may be pending. It shares the scheduler's
lock: a job starts (:meth:`Prefetcher.start`) and is awaited (:meth:`Prefetcher.wait`) with that lock held, and
the thread takes the lock to select, so a selection never overlaps a read, a feedback or a state snapshot.
Errors met in the thread are kept on the job and raised by the read that needs the batch
(:meth:`~flexkit.TasksetScheduler.read`), never by feedback or ``state_dict``. The pending batch's
selection is the ``pending`` slice of the scheduler's state, written, checked and restored here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np

from flexkit._state_problems import add_problem, short
from flexkit.errors import KeyPath

#: ``prefetch`` mode: select the next batch in the background right after the first feedback following a read.
AFTER_FEEDBACK = "after_feedback"


@attrs.define(kw_only=True)
class PendingBatch:
    """A batch being (or already) produced ahead of its read.

    ``picked`` is None until the selection is made (and stays None when it failed); ``tasks`` is None until its
    rows are read; ``error`` is what failed, for the read to raise; ``done`` is set (under the scheduler's lock)
    when the producing thread is finished with it.
    """

    step: int
    picked: list[np.ndarray] | None = None
    tasks: list[Any] | None = None
    error: BaseException | None = None
    done: bool = False


class RowsFailed(Exception):
    """Reading a selected batch's rows failed: carries the selection (kept) and the error (raised by read)."""

    def __init__(self, picked: list[np.ndarray], error: Exception) -> None:
        super().__init__(str(error))
        self.picked, self.error = picked, error


#: Produces batch ``step``: ``(step, selection, tasks)``; raises :class:`RowsFailed` when only the rows failed.
Produce = Callable[[int], tuple[int, list[np.ndarray], list[Any]]]


def take_error(job: PendingBatch) -> BaseException:
    """``job``'s error, cleared from it (so the next read tries again)."""
    error, job.error = job.error, None
    assert error is not None
    return error


class Prefetcher:
    """One background thread producing the next batch, and the batch pending for the next read.

    Args:
        lock: the scheduler's lock; :meth:`start` and :meth:`wait` are called with it held.
        produce: makes a batch (the scheduler's selection and row reads).
    """

    def __init__(self, lock: threading.RLock, produce: Produce) -> None:
        self._lock = lock
        self._changed = threading.Condition(lock)  # a prefetch finished
        self._produce = produce
        self._executor: ThreadPoolExecutor | None = None
        #: The batch produced ahead of the next read (None: nothing pending).
        self.pending: PendingBatch | None = None

    def start(self, step: int) -> None:
        """Queue the production of batch ``step`` as the pending batch (the lock held)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flexkit-prefetch")
        job = PendingBatch(step=step)
        self.pending = job
        self._executor.submit(self._run, job)

    def wait(self) -> None:
        """Wait, with the lock held, until no prefetch is running. ``Condition.wait`` releases the lock meanwhile,
        so the prefetch thread can take it to select (waiting on it while holding the lock would deadlock)."""
        while self.pending is not None and not self.pending.done:
            self._changed.wait()

    def produce_now(self, step: int) -> PendingBatch:
        """Produce batch ``step`` in the calling thread (the lock held). When its rows cannot be read, the
        selection is kept as the pending batch (the next read reads the rows again) and the error raised."""
        job = PendingBatch(step=step, done=True)
        try:
            _step, job.picked, job.tasks = self._produce(step)
        except RowsFailed as failed:
            job.picked, job.error = failed.picked, failed.error
        if job.error is not None:
            self.pending = job
            raise take_error(job)
        return job

    def state_dict(self) -> dict[str, Any] | None:
        """The pending batch's step and selection (``{"step", "indices"}``), or None when nothing is pending or its
        selection failed; called with the lock held, after :meth:`wait`."""
        job = self.pending
        if job is None or job.picked is None:
            return None
        return {"step": job.step, "indices": [p.copy() for p in job.picked]}

    def load_state_dict(self, state: Mapping[str, Any] | None, read: Callable[[list[np.ndarray]], list[Any]]) -> None:
        """Make :meth:`state_dict`'s output the pending batch, its rows read with ``read`` (the lock held)."""
        self.pending = None
        if state is not None:
            picked = [np.asarray(p, dtype=np.int64) for p in state["indices"]]
            self.pending = PendingBatch(step=int(state["step"]), picked=picked, tasks=read(picked), done=True)

    @staticmethod
    def check_state(state: Any, path: KeyPath, problems: list[str], *, step: int | None,
                    tasksets: Sequence[tuple[str, int]]) -> None:
        """Append the problems of a loaded :meth:`state_dict` (at ``path``) to ``problems``: a table or null, of
        batch ``step`` (when known), with one list of task indices per taskset (``(name, size)``, by id)."""
        if state is None:
            return
        if not isinstance(state, Mapping):
            add_problem(problems, path, f"expected a table or null, got {type(state).__name__}")
            return
        if step is not None and state.get("step") != step:
            add_problem(problems, (*path, "step"), f"the prefetched batch must be step {step}'s, got "
                                                   f"{short(state.get('step'))}")
        indices = state.get("indices")
        if not isinstance(indices, list) or len(indices) != len(tasksets):
            add_problem(problems, (*path, "indices"), f"expected one index list per taskset, got {short(indices)}")
            return
        for i, ((name, size), part) in enumerate(zip(tasksets, indices, strict=True)):
            arr = np.asarray(part) if isinstance(part, (list, np.ndarray)) else None
            ok = arr is not None and arr.ndim == 1 and (arr.size == 0 or (
                np.issubdtype(arr.dtype, np.integer) and int(arr.min()) >= 0 and int(arr.max()) < size))
            if not ok:
                add_problem(problems, (*path, "indices", i), f"expected task indices of taskset {name!r} (0 to "
                                                             f"{size - 1}), got {short(part)}")

    def close(self) -> None:
        """Stop the background thread (a pending batch stays pending)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def _run(self, job: PendingBatch) -> None:
        """The thread's work: produce ``job``'s batch and record the outcome, errors included."""
        try:
            _step, job.picked, job.tasks = self._produce(job.step)
        except RowsFailed as failed:
            job.picked, job.error = failed.picked, failed.error
        except BaseException as exc:  # handed to the reader, whatever it is
            job.error = exc
        with self._lock:
            job.done = True
            self._changed.notify_all()
