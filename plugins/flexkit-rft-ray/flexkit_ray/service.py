"""The scheduler service a Ray actor runs: a :class:`~flexkit.distributed.BatchLedger` behind asyncio methods.

:class:`SchedulerService` is a plain class (usable and testable without Ray); :data:`flexkit_ray.SchedulerActor`
is ``ray.remote(SchedulerService)``. Its methods are coroutines, so Ray runs the actor as an *async actor*: all
calls share one event loop, which serialises every change to the ledger (the single writer), while callers
blocked in :meth:`SchedulerService.lease` wait without holding anything up.

The service refuses, where it is built, every part of the pipeline its ``host`` does not honour
(:func:`flexkit.host.check_support`; by default :data:`~flexkit_ray.support.SERVICE_SUPPORT`: selection and
feedback only), so that a guard no evaluation reaches, or a ``[replay]`` no learner trains on, is an error naming
the key instead of a part silently ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flexkit import load_pipeline, pipeline_from_dict
from flexkit.distributed import BatchLedger, Lease
from flexkit.host import HostSupport, check_support
from flexkit_ray.support import SERVICE_SUPPORT

#: Longest a waiting :meth:`SchedulerService.lease` sleeps before looking again (expiries wake it earlier).
POLL_S = 1.0


class SchedulerService:
    """A pipeline and its batch ledger, for many concurrent rollout workers.

    Args:
        pipeline: a pipeline TOML path, or its parsed data (a dict; relative paths against ``base_dir``).
        base_dir: where a dict pipeline's relative paths live (default: the current directory).
        plugins: extra local plugins, as for :func:`flexkit.load_pipeline`.
        checkpoint: a checkpoint directory to resume from (written by :meth:`save_checkpoint`).
        host: what the run around the service honours of the pipeline (:class:`flexkit.host.HostSupport`); every
            part it does not give is a :class:`~flexkit.ConfigError` here, naming the key and what to do. Default
            :data:`~flexkit_ray.support.SERVICE_SUPPORT` (selection and feedback only); a learner that calls
            :meth:`evaluation` passes ``HostSupport(name="my learner", evaluation=True)``.
        **ledger: options of :class:`~flexkit.distributed.BatchLedger` (``lease_timeout``, ``max_staleness``,
            ``on_expiry``, ``max_attempts``, ``late``).
    """

    def __init__(
        self,
        pipeline: str | os.PathLike[str] | Mapping[str, Any],
        *,
        base_dir: str | os.PathLike[str] | None = None,
        plugins: Sequence[str] = (),
        checkpoint: str | os.PathLike[str] | None = None,
        host: HostSupport = SERVICE_SUPPORT,
        **ledger: Any,
    ) -> None:
        if isinstance(pipeline, Mapping):
            pipe = pipeline_from_dict(dict(pipeline), base_dir=base_dir or ".", plugins=plugins)
        else:
            pipe = load_pipeline(pipeline, plugins=plugins)
        check_support(pipe, host)
        #: What the run around the service honours of the pipeline (checked above).
        self.host = host
        self.ledger = BatchLedger(pipe, **ledger)
        self._changed: asyncio.Condition | None = None
        if checkpoint is not None:
            self.ledger.load_checkpoint(checkpoint)

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:  # created on the actor's event loop, at first use
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    # -- workers ------------------------------------------------------------------------------------------

    async def lease(self, worker: str, wait: float | None = None) -> Lease | None:
        """The next batch for ``worker``, waiting while the staleness bound holds it back or leases are out
        that may expire; ``None`` once the run is over (or after ``wait`` seconds without a batch)."""
        cond = self._condition()
        give_up = None if wait is None else time.monotonic() + wait
        while True:
            lease = self.ledger.lease(worker)
            if lease is not None or self.ledger.finished:
                return lease
            now = time.monotonic()
            if give_up is not None and now >= give_up:
                return None
            timeout = POLL_S
            deadline = self.ledger.next_deadline()
            if deadline is not None:
                timeout = min(timeout, max(deadline - now, 0.0) + 0.01)
            if give_up is not None:
                timeout = min(timeout, give_up - now)
            async with cond:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(cond.wait(), timeout)

    async def feedback(self, batch_id: int, metrics: Mapping[str, Any]) -> str:
        """Record batch ``batch_id``'s selector metrics; returns ``"applied"``, ``"buffered"``, ``"duplicate"``,
        ``"late_applied"`` or ``"late_dropped"`` (see :class:`~flexkit.distributed.BatchLedger`)."""
        status = self.ledger.feedback(batch_id, metrics)
        await self._notify()
        return status

    async def feedback_experiences(self, batch_id: int, experiences: Sequence[Any]) -> str:
        """:meth:`feedback` from rollout experiences (through the pipeline's feedback operator)."""
        status = self.ledger.feedback_experiences(batch_id, experiences)
        await self._notify()
        return status

    async def evaluation(self, metrics: Mapping[str, Any]) -> None:
        """Hand the selectors a held-out evaluation (metric name → value,
        :meth:`~flexkit.distributed.BatchLedger.evaluation`), e.g. a ``frontier`` guard's ``val_accuracy/<group>``;
        it reaches the batches leased after it. Declare it with ``host=HostSupport(..., evaluation=True)``."""
        self.ledger.evaluation(metrics)
        await self._notify()

    async def renew(self, batch_id: int) -> bool:
        """Heartbeat: extend batch ``batch_id``'s lease; False if it is no longer out."""
        return self.ledger.renew(batch_id)

    async def release(self, batch_id: int) -> bool:
        """Give a batch back unfinished (requeued or abandoned at once)."""
        released = self.ledger.release(batch_id)
        await self._notify()
        return released

    # -- inspection and state -----------------------------------------------------------------------------

    async def stats(self) -> dict[str, int]:
        """The ledger's counters (:meth:`~flexkit.distributed.BatchLedger.stats`)."""
        return self.ledger.stats()

    async def finished(self) -> bool:
        """Whether every batch is handed out and fed back or abandoned."""
        return self.ledger.finished

    async def step(self) -> int:
        """Batches read from the scheduler so far."""
        return int(self.ledger.scheduler.step)

    async def state_dict(self) -> dict[str, Any]:
        """Pipeline and ledger state (plain data with numpy arrays)."""
        return self.ledger.state_dict()

    async def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (open leases get a fresh timeout)."""
        self.ledger.load_state_dict(state)
        await self._notify()

    async def save_checkpoint(self, directory: str | os.PathLike[str], extra: Mapping[str, Any] | None = None) -> str:
        """Atomically write pipeline, ledger and ``extra`` to ``directory`` (on the actor's filesystem)."""
        return str(self.ledger.save_checkpoint(Path(directory), extra=extra))

    async def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Load :meth:`save_checkpoint`'s output; returns its ``extra``."""
        extra = self.ledger.load_checkpoint(Path(directory))
        await self._notify()
        return extra
