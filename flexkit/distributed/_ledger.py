"""The batch ledger: one scheduler, many rollout workers, every batch's feedback applied exactly once.

A :class:`BatchLedger` owns a pipeline (the single writer of its selectors) and hands each batch out under a
**lease**: ``batch_id`` (the scheduler step that produced it, so ids are unique and deterministic), the
worker's name, an attempt number and the tasks. Workers send feedback back tagged with the ``batch_id``:

- feedback for a batch already received is a **duplicate**: counted and ignored (resending is always safe);
- feedback for a batch id never handed out is refused (:class:`~flexkit.FeedbackError`), as is an invalid
  payload, or one naming a task that was not in that batch's lease (another batch's feedback sent under this
  id); the lease stays open so the worker can send a corrected one;
- a lease not fed back within ``lease_timeout`` seconds **expires** (a dead or stuck worker). With
  ``on_expiry="requeue"`` the same batch (same id and tasks) goes to the next worker asking, before any new
  batch, up to ``max_attempts`` hand-outs; then, or with ``on_expiry="drop"``, the batch is **abandoned**: its
  tasks get no feedback. Feedback from the first holder that arrives after expiry still counts, first one wins;
- feedback for an abandoned batch is **late**: applied (``late="apply"``, default) or dropped
  (``late="drop"``), counted either way.

Two orders of application:

- ``max_staleness=None`` (asynchronous): feedback reaches the selectors as it arrives, in any order; batches
  are handed out without waiting. Fastest; the run depends on arrival timing.
- ``max_staleness=s`` (bounded staleness, deterministic): feedback is buffered and applied in batch-id order,
  and batch ``j`` is handed out only once every batch up to ``j - 1 - s`` is fed back or abandoned; exactly
  those are applied before it is read. Whatever the arrival order, the run equals the sequential loop
  ``for j: feed batches <= j-1-s; read batch j`` (``s=0``: the synchronous loop), so it is reproducible and
  resumes exactly. Late feedback for an abandoned batch the application order has not reached yet takes its
  place in that order; once passed, the ``late`` rule applies.

The ledger is not thread-safe: one caller at a time (the Ray actor in ``flexkit-rft-ray`` serialises calls on its
event loop). Its state (pipeline plus open leases, buffered feedback, counters) checkpoints with the pipeline;
leases open at a checkpoint are restored with a fresh timeout.
"""

from __future__ import annotations

import collections
import math
import operator
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from flexkit.distributed._payload import Payload, as_metrics, normalize, task_pairs
from flexkit.errors import ConfigError, FeedbackError, StateMismatchError
from flexkit.scheduler._scheduler import Task

if TYPE_CHECKING:
    from flexkit.pipeline._pipeline import Pipeline

#: Layout version of :meth:`BatchLedger.state_dict`'s ``ledger`` part.
LEDGER_VERSION = 1

OnExpiry = Literal["requeue", "drop"]
Late = Literal["apply", "drop"]
Status = Literal["applied", "buffered", "duplicate", "late_applied", "late_dropped"]

COUNTERS = ("batches", "handed_out", "received", "applied", "duplicates", "late", "late_applied", "late_dropped",
            "expired", "requeued", "abandoned")


@attrs.frozen(kw_only=True)
class Lease:
    """A batch handed to a worker: feed back with ``batch_id``; ``attempt`` counts earlier hand-outs of it;
    ``timeout`` is the lease length in seconds (``None``: never expires)."""

    batch_id: int
    attempt: int
    worker: str
    tasks: tuple[Task, ...]
    timeout: float | None


@attrs.define
class _Open:
    """An open batch: handed out (``worker`` set) or waiting in the requeue (``worker`` None)."""

    pairs: list[tuple[int, int]]
    tasks: tuple[Task, ...]
    attempt: int
    worker: str | None
    deadline: float


class BatchLedger:
    """Hands a pipeline's batches out under leases and applies their feedback exactly once (module docstring).

    Args:
        pipeline: the :class:`~flexkit.Pipeline` whose scheduler and feedback operator the ledger drives.
        lease_timeout: seconds a lease lasts without feedback or :meth:`renew` (``None``: forever).
        max_staleness: ``None`` for asynchronous application; an int ``s >= 0`` for in-order application with
            at most ``s`` batches handed out past the last one applied (deterministic).
        on_expiry: ``"requeue"`` hands an expired batch out again; ``"drop"`` abandons it.
        max_attempts: hand-outs of one batch before it is abandoned (with ``"requeue"``).
        late: what to do with feedback for an abandoned batch: ``"apply"`` or ``"drop"``.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        lease_timeout: float | None = None,
        max_staleness: int | None = None,
        on_expiry: OnExpiry = "requeue",
        max_attempts: int = 3,
        late: Late = "apply",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lease_timeout is not None and not lease_timeout > 0:
            raise ConfigError(f"lease_timeout must be > 0 or None, got {lease_timeout!r}")
        if max_staleness is not None and (isinstance(max_staleness, bool) or max_staleness < 0):
            raise ConfigError(f"max_staleness must be an int >= 0 or None, got {max_staleness!r}")
        if on_expiry not in ("requeue", "drop"):
            raise ConfigError(f"on_expiry must be 'requeue' or 'drop', got {on_expiry!r}")
        if late not in ("apply", "drop"):
            raise ConfigError(f"late must be 'apply' or 'drop', got {late!r}")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts!r}")
        self.pipeline = pipeline
        self.scheduler = pipeline.scheduler
        self.lease_timeout = lease_timeout
        self.max_staleness = max_staleness
        self.on_expiry: OnExpiry = on_expiry
        self.max_attempts = int(max_attempts)
        self.late: Late = late
        self.clock = clock
        self._open: dict[int, _Open] = {}
        self._requeue: collections.deque[int] = collections.deque()
        self._watermark = self.scheduler.step  # every batch id below is received or abandoned
        self._received: set[int] = set()  # received ids at or above the watermark
        self._abandoned: set[int] = set()  # abandoned ids never fed back (any position)
        self._abandoned_pairs: dict[int, list[tuple[int, int]]] = {}  # their tasks, to check late feedback
        self._buffer: dict[int, Payload] = {}  # in-order mode: received, not yet applied
        self._next_apply = self.scheduler.step  # in-order mode: the next batch id to apply
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    # -- evaluations ---------------------------------------------------------------------------------------

    def evaluation(self, metrics: Mapping[str, Any]) -> None:
        """Hand the selectors a held-out evaluation (:meth:`flexkit.Pipeline.evaluation`), applied at once: it
        reaches the selections of the batches read after it, and checkpoints with the selectors' state. With
        ``max_staleness`` the run stays reproducible when each evaluation arrives at the same point of the batch
        order (e.g. the learner's, between its steps)."""
        self.pipeline.evaluation(metrics)

    # -- handing out --------------------------------------------------------------------------------------

    @property
    def ordered(self) -> bool:
        """Whether feedback is applied in batch-id order (``max_staleness`` set)."""
        return self.max_staleness is not None

    @property
    def exhausted(self) -> bool:
        """Whether the scheduler has handed out its last batch."""
        return self.scheduler.step >= self.scheduler.total_steps

    @property
    def finished(self) -> bool:
        """Whether the run is over: every batch handed out, fed back or abandoned, and applied."""
        self._expire()
        return self.exhausted and not self._open and not self._buffer

    def lease(self, worker: str) -> Lease | None:
        """The next batch for ``worker``: a requeued one first, else a new one. ``None`` when none can be
        handed out now (the staleness bound waits for feedback, or the run is over: see :attr:`finished`)."""
        self._expire()
        while self._requeue:
            batch_id = self._requeue.popleft()
            record = self._open.get(batch_id)
            if record is None or record.worker is not None:
                continue  # fed back (or re-leased) while it waited
            return self._hand_out(batch_id, record, worker)
        if self.exhausted:
            return None
        if self.ordered:
            self._drain()
            # ordered: max_staleness is set
            if self._next_apply <= self.scheduler.step - 1 - self.max_staleness:  # type: ignore[operator]
                return None  # an older batch is still out: reading now would break the order
        batch_id = self.scheduler.step
        tasks = tuple(self.scheduler.read())
        self.counters["batches"] += 1
        record = _Open(pairs=task_pairs(tasks), tasks=tasks, attempt=0, worker=None, deadline=math.inf)
        self._open[batch_id] = record
        return self._hand_out(batch_id, record, worker)

    def _hand_out(self, batch_id: int, record: _Open, worker: str) -> Lease:
        record.worker = str(worker)
        record.deadline = self._deadline()
        self.counters["handed_out"] += 1
        lease = Lease(batch_id=batch_id, attempt=record.attempt, worker=record.worker, tasks=record.tasks,
                      timeout=self.lease_timeout)
        record.attempt += 1
        return lease

    def _deadline(self) -> float:
        return math.inf if self.lease_timeout is None else self.clock() + self.lease_timeout

    def renew(self, batch_id: int) -> bool:
        """Extend an open lease by ``lease_timeout`` from now (a heartbeat); False if it is not open."""
        self._expire()
        record = self._open.get(int(batch_id))
        if record is None or record.worker is None:
            return False
        record.deadline = self._deadline()
        return True

    def release(self, batch_id: int) -> bool:
        """A worker gives a batch back unfinished: it is requeued or abandoned at once as if its lease had
        expired (counted as an expiry). False if the batch is not out."""
        record = self._open.get(int(batch_id))
        if record is None or record.worker is None:
            return False
        self._expire_one(int(batch_id), record)
        return True

    def next_deadline(self) -> float | None:
        """Clock time of the earliest lease expiry (``None``: no lease can expire), for waiting callers."""
        deadlines = [r.deadline for r in self._open.values() if r.worker is not None and r.deadline < math.inf]
        return min(deadlines) if deadlines else None

    def _expire(self) -> None:
        if self.lease_timeout is None:
            return
        now = self.clock()
        for batch_id, record in sorted(self._open.items()):
            if record.worker is not None and record.deadline <= now:
                self._expire_one(batch_id, record)

    def _expire_one(self, batch_id: int, record: _Open) -> None:
        self.counters["expired"] += 1
        if self.on_expiry == "requeue" and record.attempt < self.max_attempts:
            record.worker, record.deadline = None, math.inf
            self._requeue.append(batch_id)
            self.counters["requeued"] += 1
            return
        del self._open[batch_id]
        self._abandoned.add(batch_id)
        self._abandoned_pairs[batch_id] = record.pairs
        self.counters["abandoned"] += 1
        self._advance_watermark()
        if self.ordered:
            self._drain()

    # -- feedback -----------------------------------------------------------------------------------------

    def feedback(self, batch_id: int, metrics: Mapping[str, Any]) -> Status:
        """Record batch ``batch_id``'s feedback (``{SELECTOR_METRIC: ...}``); returns what happened to it.

        Raises :class:`~flexkit.FeedbackError` for an invalid payload, a batch id never handed out, or a payload
        naming a task that was not in the batch's lease (nothing changes, the lease stays open)."""
        self._expire()
        batch_id = self._check_id(batch_id)
        if self._is_received(batch_id):
            self.counters["duplicates"] += 1
            return "duplicate"
        payload = normalize(self.scheduler, metrics)
        self._check_tasks(batch_id, payload)
        self.counters["received"] += 1
        if batch_id in self._abandoned:
            return self._late(batch_id, payload)
        self._open.pop(batch_id)
        self._mark_received(batch_id)
        if not self.ordered:
            self._apply(payload)
            return "applied"
        self._buffer[batch_id] = payload
        self._drain()
        return "applied" if batch_id not in self._buffer else "buffered"

    def feedback_experiences(self, batch_id: int, experiences: Sequence[Any]) -> Status:
        """:meth:`feedback` from rollout experiences, through the pipeline's feedback operator."""
        _exps, metrics = self.pipeline.feedback_operator.process(experiences)
        return self.feedback(batch_id, metrics)

    def _check_id(self, batch_id: Any) -> int:
        try:
            index = None if isinstance(batch_id, bool) else operator.index(batch_id)
        except TypeError:  # operator.index refusing a non-integer
            index = None
        if index is None:
            raise FeedbackError(f"batch_id must be an int, got {batch_id!r}")
        batch_id = index
        if not 0 <= batch_id < self.scheduler.step:
            raise FeedbackError(f"batch {batch_id} was never handed out ({self.scheduler.step} so far)")
        checked: int = batch_id
        return checked

    def _check_tasks(self, batch_id: int, payload: Payload) -> None:
        """Refuse ``payload`` when it names a task that was not in batch ``batch_id``'s lease."""
        record = self._open.get(batch_id)
        pairs = record.pairs if record is not None else self._abandoned_pairs.get(batch_id)
        if pairs is None:
            return  # an abandoned batch from a checkpoint that did not record its tasks
        leased = set(pairs)
        foreign = [(tid, i) for tid, (idx, _vals) in payload.items() for i in idx if (tid, i) not in leased]
        if foreign:
            tid, index = foreign[0]
            raise FeedbackError(f"feedback for batch {batch_id} names {len(foreign)} task(s) that were not in its "
                                f"lease, such as task {index} of taskset {self.scheduler.names[tid]!r}; nothing "
                                "was applied (the lease stays open)")

    def _is_received(self, batch_id: int) -> bool:
        if batch_id in self._abandoned:
            return False
        return batch_id < self._watermark or batch_id in self._received

    def _mark_received(self, batch_id: int) -> None:
        if batch_id >= self._watermark:
            self._received.add(batch_id)
        self._advance_watermark()

    def _advance_watermark(self) -> None:
        while self._watermark in self._received or self._watermark in self._abandoned:
            self._received.discard(self._watermark)
            self._watermark += 1

    def _late(self, batch_id: int, payload: Payload) -> Status:
        self.counters["late"] += 1
        self._abandoned.discard(batch_id)
        self._abandoned_pairs.pop(batch_id, None)
        self._mark_received(batch_id)
        if self.ordered and batch_id >= self._next_apply:  # its turn has not come yet: it takes its place
            self._buffer[batch_id] = payload
            self._drain()
            return "applied" if batch_id not in self._buffer else "buffered"
        if self.late == "drop":
            self.counters["late_dropped"] += 1
            return "late_dropped"
        self.counters["late_applied"] += 1
        self._apply(payload)
        return "late_applied"

    def _drain(self) -> None:
        """In-order mode: apply buffered feedback in batch-id order, skipping abandoned batches, up to the
        newest batch the staleness bound lets precede the next read (all of them once the run is over)."""
        # in-order mode only: max_staleness is set
        limit = math.inf if self.exhausted else self.scheduler.step - 1 - self.max_staleness  # type: ignore[operator]
        while self._next_apply <= limit and self._next_apply < self.scheduler.step:
            batch_id = self._next_apply
            if batch_id in self._buffer:
                self._apply(self._buffer.pop(batch_id))
            elif batch_id not in self._abandoned:
                break
            self._next_apply += 1

    def _apply(self, payload: Payload) -> None:
        self.scheduler.feedback(as_metrics(payload))
        self.counters["applied"] += 1

    # -- inspection and state -----------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters (``batches`` read, ``handed_out`` incl. re-issues, ``received``, ``applied``, ``duplicates``,
        ``late``, ``late_applied``, ``late_dropped``, ``expired``, ``requeued``, ``abandoned``) and the current
        ``open`` leases, ``waiting`` requeued batches and ``buffered`` feedback."""
        self._expire()
        waiting = sum(1 for r in self._open.values() if r.worker is None)
        return {**self.counters, "open": len(self._open) - waiting, "waiting": waiting, "buffered": len(self._buffer)}

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's state and the ledger's (plain data; leases keep their tasks as (taskset, index))."""
        return {"pipeline": self.pipeline.state_dict(), "ledger": self._ledger_state()}

    def _ledger_state(self) -> dict[str, Any]:
        return {
            "version": LEDGER_VERSION,
            "watermark": self._watermark,
            "received": sorted(self._received),
            "abandoned": sorted(self._abandoned),
            "abandoned_pairs": [{"batch_id": b, "pairs": [list(p) for p in self._abandoned_pairs[b]]}
                                for b in sorted(self._abandoned_pairs)],
            "next_apply": self._next_apply,
            "requeue": [b for b in self._requeue if b in self._open and self._open[b].worker is None],
            "open": [{"batch_id": b, "attempt": r.attempt, "worker": r.worker, "pairs": [list(p) for p in r.pairs]}
                     for b, r in sorted(self._open.items())],
            "buffer": [{"batch_id": b, "payload": [[tid, idx, vals] for tid, (idx, vals) in sorted(p.items())]}
                       for b, p in sorted(self._buffer.items())],
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; open leases get a fresh timeout from now."""
        ledger = state["ledger"]
        if ledger.get("version") != LEDGER_VERSION:
            raise StateMismatchError(f"ledger state version {ledger.get('version')!r} is not {LEDGER_VERSION}")
        self.pipeline.load_state_dict(state["pipeline"])
        self._load_ledger(ledger)

    def _load_ledger(self, ledger: Mapping[str, Any]) -> None:
        self._watermark = int(ledger["watermark"])
        self._received = {int(b) for b in ledger["received"]}
        self._abandoned = {int(b) for b in ledger["abandoned"]}
        self._abandoned_pairs = {int(item["batch_id"]): [(int(t), int(i)) for t, i in item["pairs"]]
                                 for item in ledger.get("abandoned_pairs", [])}  # absent from older checkpoints
        self._next_apply = int(ledger["next_apply"])
        self._open = {}
        for item in ledger["open"]:
            pairs = [(int(t), int(i)) for t, i in item["pairs"]]
            worker = None if item["worker"] is None else str(item["worker"])
            self._open[int(item["batch_id"])] = _Open(
                pairs=pairs, tasks=self._materialise(pairs), attempt=int(item["attempt"]), worker=worker,
                deadline=math.inf if worker is None else self._deadline())
        self._requeue = collections.deque(int(b) for b in ledger["requeue"])
        self._buffer = {int(item["batch_id"]): {int(tid): ([int(i) for i in idx], [float(v) for v in vals])
                                                for tid, idx, vals in item["payload"]}
                        for item in ledger["buffer"]}
        self.counters = {k: int(ledger["counters"].get(k, 0)) for k in COUNTERS}

    def _materialise(self, pairs: Sequence[tuple[int, int]]) -> tuple[Task, ...]:
        """Rebuild a batch's tasks from (taskset, index) pairs, keeping their order."""
        rows: dict[tuple[int, int], Any] = {}
        by_taskset: dict[int, list[int]] = {}
        for tid, index in pairs:
            by_taskset.setdefault(tid, []).append(index)
        for tid, indices in by_taskset.items():
            for index, row in zip(indices, self.scheduler.entries[tid].taskset.read(indices), strict=True):
                rows[(tid, index)] = row
        names = self.scheduler.names
        return tuple(Task(taskset_id=t, taskset=names[t], index=i, data=rows[(t, i)]) for t, i in pairs)

    def save_checkpoint(self, directory: str | os.PathLike[str], *, extra: Mapping[str, Any] | None = None) -> Path:
        """Atomically save the pipeline and the ledger (and ``extra``) with the pipeline's checkpointing."""
        return self.pipeline.save_checkpoint(directory, extra={"ledger": self._ledger_state(), **dict(extra or {})})

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Load :meth:`save_checkpoint`'s output (pipeline fingerprint checked); returns the caller's ``extra``."""
        before = self.state_dict()
        extra = self.pipeline.load_checkpoint(directory)
        ledger = extra.pop("ledger", None)
        if not isinstance(ledger, Mapping) or ledger.get("version") != LEDGER_VERSION:
            self.load_state_dict(before)
            raise StateMismatchError(f"checkpoint in {directory} holds no batch ledger of version "
                                     f"{LEDGER_VERSION}")
        self._load_ledger(ledger)
        return extra
