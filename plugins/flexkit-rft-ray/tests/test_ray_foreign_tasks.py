"""The scheduler actor refuses feedback naming tasks that were not in the lease it answers (issue G2, item 18).

A worker that sends another batch's results under a batch id (a mixed-up id, a stale buffer) used to have them
applied to the selectors as if they were that batch's. The check lives in the batch ledger, which the actor
serves; these tests drive :class:`flexkit_ray.SchedulerService` (the actor's class, without a Ray runtime) and
the ledger directly for an abandoned batch and a checkpoint round trip.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from flexkit import FeedbackError
from flexkit.distributed import BatchLedger, digest
from flexkit.testing.distributed import experiences, make_pipeline, pipeline_data

flexkit_ray = pytest.importorskip("flexkit_ray")


def foreign_to(lease: Any, other: Any) -> list[Any]:
    """The tasks of ``other`` that are not in ``lease``."""
    mine = {(t.taskset_id, t.index) for t in lease.tasks}
    return [t for t in other.tasks if (t.taskset_id, t.index) not in mine]


def test_the_actor_refuses_feedback_naming_tasks_outside_the_lease(tmp_path: Path) -> None:
    make_pipeline(tmp_path)  # writes the taskset files
    service = flexkit_ray.SchedulerService(pipeline_data(), base_dir=str(tmp_path))

    async def scenario() -> None:
        a = await service.lease("w0")
        b = await service.lease("w1")
        foreign = foreign_to(a, b)
        assert foreign
        before, stats = digest(await service.state_dict()), await service.stats()
        mixed = experiences(a.tasks, a.batch_id) + experiences(foreign[:1], a.batch_id)
        with pytest.raises(FeedbackError, match=f"feedback for batch {a.batch_id} names 1 task\\(s\\) that were not "
                                                f"in its lease, such as task {foreign[0].index} of taskset "
                                                f"'{foreign[0].taskset}'; nothing was applied"):
            await service.feedback_experiences(a.batch_id, mixed)
        assert digest(await service.state_dict()) == before
        assert await service.stats() == stats and stats["open"] == 2 and stats["received"] == 0
        # the lease stays open: the worker's corrected feedback is applied
        assert await service.feedback_experiences(a.batch_id, experiences(a.tasks, a.batch_id)) == "applied"
        assert await service.feedback_experiences(b.batch_id, experiences(b.tasks, b.batch_id)) == "applied"
        assert (await service.stats())["applied"] == 2

    asyncio.run(scenario())


def test_late_feedback_for_an_abandoned_batch_is_checked_too_also_after_a_checkpoint(tmp_path: Path) -> None:
    now = [0.0]
    pipe = make_pipeline(tmp_path)
    ledger = BatchLedger(pipe, lease_timeout=1.0, on_expiry="drop", clock=lambda: now[0])
    a, b = ledger.lease("w0"), ledger.lease("w1")
    assert a is not None and b is not None
    now[0] = 5.0
    assert ledger.stats()["abandoned"] == 2
    mixed = experiences(a.tasks, a.batch_id) + experiences(foreign_to(a, b)[:1], a.batch_id)
    with pytest.raises(FeedbackError, match="not in its lease"):
        ledger.feedback_experiences(a.batch_id, mixed)
    ledger.save_checkpoint(tmp_path / "ckpt")
    resumed = BatchLedger(make_pipeline(tmp_path, write=False), lease_timeout=1.0, on_expiry="drop",
                          clock=lambda: now[0])
    resumed.load_checkpoint(tmp_path / "ckpt")
    before = digest(resumed.state_dict())
    with pytest.raises(FeedbackError, match="not in its lease"):
        resumed.feedback_experiences(a.batch_id, mixed)
    assert digest(resumed.state_dict()) == before
    assert resumed.feedback_experiences(a.batch_id, experiences(a.tasks, a.batch_id)) == "late_applied"
