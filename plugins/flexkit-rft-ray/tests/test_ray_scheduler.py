"""flexkit-rft-ray: the scheduler as a Ray actor serving concurrent rollout workers on a local Ray runtime.

Workers feed back in any order and late, resend, and one dies holding a batch; the run must still apply every
batch's feedback exactly once and, with bounded staleness, end in exactly the state of the sequential loop.
State and checkpoints go through the actor. Skipped when ray or flexkit-rft-ray is not installed."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flexkit.distributed import digest
from flexkit.testing.distributed import experiences, make_pipeline, pipeline_data, reference

ray = pytest.importorskip("ray")
flexkit_ray = pytest.importorskip("flexkit_ray")

STEPS = 10
STALENESS = 1


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """One local Ray runtime for the module (start-up takes seconds); built-in plugins only in its workers."""
    with flexkit_ray.local_runtime(2, namespace="flexkit-test"):
        yield


@ray.remote(num_cpus=0.5)
class RolloutWorker:
    """A rollout worker: lease, 'generate' after a random delay, feed back, sometimes resend."""

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.rng = name, random.Random(seed)

    def ready(self) -> bool:
        return True

    def run(self, scheduler: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"batches": [], "resent": 0, "statuses": Counter()}
        while True:
            lease = ray.get(scheduler.lease.remote(self.name))
            if lease is None:
                return out
            time.sleep(self.rng.uniform(0.01, 0.06))
            exps = experiences(lease.tasks, lease.batch_id)
            out["statuses"][ray.get(scheduler.feedback_experiences.remote(lease.batch_id, exps))] += 1
            out["batches"].append(lease.batch_id)
            if self.rng.random() < 0.3:  # a retry after a lost acknowledgement: must be a no-op
                out["statuses"][ray.get(scheduler.feedback_experiences.remote(lease.batch_id, exps))] += 1
                out["resent"] += 1


def test_concurrent_workers_out_of_order_resends_and_a_dead_worker(ray_runtime: None, tmp_path: Path) -> None:
    make_pipeline(tmp_path, steps=STEPS)
    scheduler = flexkit_ray.SchedulerActor.remote(pipeline_data(steps=STEPS), base_dir=str(tmp_path),
                                                  lease_timeout=1.0, max_staleness=STALENESS)
    workers = [RolloutWorker.remote(f"w{i}", i) for i in range(2)]
    ray.get([w.ready.remote() for w in workers])  # all started: they run concurrently from here
    dead = ray.get(scheduler.lease.remote("dead"))  # a worker takes batch 0 and dies mid-step
    results = ray.get([w.run.remote(scheduler) for w in workers])
    # its process comes back to life and sends the (late) feedback: another worker has fed that batch since
    zombie = experiences(dead.tasks, dead.batch_id)
    assert ray.get(scheduler.feedback_experiences.remote(dead.batch_id, zombie)) == "duplicate"

    fed = Counter(b for r in results for b in r["batches"])
    assert sorted(fed) == list(range(STEPS)) and set(fed.values()) == {1}  # every batch fed once, by someone
    assert all(r["batches"] for r in results)  # served concurrently to every worker
    statuses = sum((r["statuses"] for r in results), Counter())
    resent = sum(r["resent"] for r in results)
    assert statuses["duplicate"] == resent and statuses["applied"] + statuses["buffered"] == STEPS
    stats = ray.get(scheduler.stats.remote())
    assert stats["applied"] == stats["received"] == stats["batches"] == STEPS
    assert stats["duplicates"] == resent + 1
    assert (stats["expired"], stats["requeued"], stats["abandoned"], stats["open"]) == (1, 1, 0, 0)
    assert ray.get(scheduler.finished.remote())

    state = ray.get(scheduler.state_dict.remote())
    _batches, want = reference(make_pipeline(tmp_path, steps=STEPS, write=False), STALENESS)
    assert digest(state["pipeline"]["scheduler"]) == want  # as if one process had run the sequential loop


def test_checkpoint_through_the_actor_with_leases_out(ray_runtime: None, tmp_path: Path) -> None:
    make_pipeline(tmp_path, steps=STEPS)
    data = pipeline_data(steps=STEPS)
    first = flexkit_ray.SchedulerActor.remote(data, base_dir=str(tmp_path), max_staleness=STALENESS)
    l0 = ray.get(first.lease.remote("a"))
    l1 = ray.get(first.lease.remote("b"))
    assert ray.get(first.feedback_experiences.remote(l1.batch_id, experiences(l1.tasks, l1.batch_id))) == "buffered"
    ray.get(first.save_checkpoint.remote(str(tmp_path / "ckpt"), {"trainer": 1}))
    stats = ray.get(first.stats.remote())
    ray.kill(first)

    second = flexkit_ray.SchedulerActor.remote(data, base_dir=str(tmp_path), max_staleness=STALENESS,
                                               checkpoint=str(tmp_path / "ckpt"))
    assert ray.get(second.stats.remote()) == stats
    # worker "a" outlived the old actor: its feedback for batch 0 is taken by the new one
    assert ray.get(second.feedback_experiences.remote(l0.batch_id, experiences(l0.tasks, l0.batch_id))) == "applied"
    done = flexkit_ray.run_worker(second, "c", lambda lease: experiences(lease.tasks, lease.batch_id),
                                  heartbeat_s=0.05)
    assert done == STEPS - 2
    _batches, want = reference(make_pipeline(tmp_path, steps=STEPS, write=False), STALENESS)
    state = ray.get(second.state_dict.remote())
    assert digest(state["pipeline"]["scheduler"]) == want

    final_stats = ray.get(second.stats.remote())
    assert ray.get(second.load_checkpoint.remote(str(tmp_path / "ckpt"))) == {"trainer": 1}
    assert ray.get(second.step.remote()) == 2 and ray.get(second.stats.remote()) == stats
    ray.get(second.load_state_dict.remote(state))
    assert ray.get(second.stats.remote()) == final_stats
    assert ray.get(second.finished.remote()) and ray.get(second.lease.remote("d")) is None
