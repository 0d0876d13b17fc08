"""flexkit on Ray: the scheduler as an actor that serves many rollout workers.

::

    scheduler = SchedulerActor.remote("pipeline.toml", lease_timeout=600, max_staleness=1)
    # in each rollout worker (a Ray task or actor):
    run_worker(scheduler, "worker-3", rollout)     # rollout(lease) -> experiences for lease.tasks

See ``docs/distributed.md`` for the lease, duplicate and late-feedback policies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import ray

from flexkit.distributed import Lease
from flexkit_ray.runtime import local_runtime
from flexkit_ray.service import SchedulerService
from flexkit_ray.support import SERVICE_SUPPORT

__version__ = "0.1.0"

#: :class:`SchedulerService` as a Ray actor class (an async actor: calls share one event loop).
SchedulerActor = ray.remote(SchedulerService)

__all__ = ["SERVICE_SUPPORT", "SchedulerActor", "SchedulerService", "local_runtime", "run_worker"]


def run_worker(
    scheduler: Any,
    worker: str,
    rollout: Callable[[Lease], Sequence[Any]],
    *,
    heartbeat_s: float | None = None,
    max_batches: int | None = None,
) -> int:
    """A rollout worker's loop: lease a batch from ``scheduler`` (an actor handle), run ``rollout(lease)`` to
    get its experiences (``reward``, ``taskset_id``, ``index`` each), send them back tagged with the batch id;
    until the run is over or ``max_batches`` are done. Returns the number of batches this worker fed back.

    With ``heartbeat_s`` a background thread renews the lease that often while ``rollout`` runs, so a slow
    but live worker keeps its batch. If ``rollout`` raises, the batch is released (requeued at once for
    another worker) and the error propagates."""
    done = 0
    while max_batches is None or done < max_batches:
        lease = ray.get(scheduler.lease.remote(worker))
        if lease is None:
            break
        stop = threading.Event()
        beat = None
        if heartbeat_s is not None:
            beat = threading.Thread(target=_heartbeat, args=(scheduler, lease.batch_id, heartbeat_s, stop),
                                    daemon=True)
            beat.start()
        try:
            experiences = rollout(lease)
        except BaseException:
            ray.get(scheduler.release.remote(lease.batch_id))
            raise
        finally:
            stop.set()
            if beat is not None:
                beat.join()
        ray.get(scheduler.feedback_experiences.remote(lease.batch_id, list(experiences)))
        done += 1
    return done


def _heartbeat(scheduler: Any, batch_id: int, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        if not ray.get(scheduler.renew.remote(batch_id)):
            return
