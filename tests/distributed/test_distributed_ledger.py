"""BatchLedger: leases, exactly-once feedback by batch id, expiry/requeue/late policies, staleness-bounded
deterministic order, checkpoint/resume. Pure Python (the Ray actor in flexkit-rft-ray serves this object)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexkit
from flexkit import FeedbackError, FlexkitError
from flexkit.distributed import BatchLedger, digest
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.testing.distributed import (
    TOTAL_STEPS,
    experiences,
    make_pipeline,
    metrics_for,
    pairs,
    reference,
)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(ledger: BatchLedger, pipe: Any, choices: list[int], *, workers: int = 3, hold: int = 2,
          stop_after: int | None = None, clock: FakeClock | None = None) -> dict[str, Any]:
    """Run workers against the ledger in the interleaving ``choices`` picks: each event, one possible action
    (lease, feed back one held batch in any order, resend an old feedback) happens. With a ``clock``, workers
    also die holding a batch, time jumps past every lease's timeout, and dead workers come back to send their
    feedback. Returns what was seen."""
    held: dict[int, list[Any]] = {w: [] for w in range(workers)}
    zombies: list[Any] = []
    sent: list[tuple[int, Any]] = []
    seen: dict[int, list[tuple[int, int]]] = {}
    statuses: Counter[str] = Counter()
    counts = Counter()
    k = 0
    while not ledger.finished and (stop_after is None or counts["events"] < stop_after):
        actions: list[tuple[str, int, int]] = [("lease", w, 0) for w in held if len(held[w]) < hold]
        actions += [("feed", w, i) for w in held for i in range(len(held[w]))]
        actions += [("resend", 0, i) for i in range(len(sent))] if counts["resend"] < 6 else []
        if clock is not None:
            actions += [("die", w, i) for w in held for i in range(len(held[w]))] if counts["die"] < 3 else []
            actions += [("zombie", 0, i) for i in range(len(zombies))]
            actions += [("tick", 0, 0)] if counts["tick"] < 3 else []
        choice = choices[k % len(choices)] if choices else 0
        k += 1
        kind, w, i = actions[choice % len(actions)]
        if kind == "lease":
            lease = ledger.lease(f"w{w}")
            if lease is not None:
                assert seen.setdefault(lease.batch_id, pairs(lease.tasks)) == pairs(lease.tasks)
                held[w].append(lease)
                counts["events"] += 1
                continue
            feeds = [a for a in actions if a[0] in ("feed", "zombie")]  # the gate waits for feedback
            if feeds:
                kind, w, i = feeds[choice % len(feeds)]
            elif clock is not None:
                kind = "tick"  # only dead workers hold batches: their leases must run out
            else:
                raise AssertionError("ledger refuses a lease with nothing outstanding")
        counts[kind] += 1
        counts["events"] += 1
        if kind == "tick":
            clock.now += ledger.lease_timeout + 1
        elif kind == "die":
            zombies.append(held[w].pop(i))
        elif kind in ("feed", "zombie"):
            lease = held[w].pop(i) if kind == "feed" else zombies.pop(i)
            metrics = metrics_for(pipe, lease.tasks, lease.batch_id)
            statuses[ledger.feedback(lease.batch_id, metrics)] += 1
            sent.append((lease.batch_id, metrics))
        else:
            statuses[ledger.feedback(*sent[i])] += 1
    return {"seen": seen, "statuses": statuses, "resends": counts["resend"], "held": held, "counts": counts}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(staleness=st.integers(0, 2), prefetch=st.booleans(),
       choices=st.lists(st.integers(0, 50), min_size=1, max_size=40))
def test_any_arrival_order_equals_the_sequential_loop(tmp_path_factory: Any, staleness: int, prefetch: bool,
                                                      choices: list[int]) -> None:
    root = tmp_path_factory.mktemp("ledger")
    pipe = make_pipeline(root, prefetch=prefetch)
    ledger = BatchLedger(pipe, max_staleness=staleness)
    out = drive(ledger, pipe, choices)
    want_batches, want_digest = reference(make_pipeline(root, prefetch=prefetch), staleness)
    assert [out["seen"][b] for b in range(TOTAL_STEPS)] == want_batches
    assert digest(pipe.scheduler.state_dict()) == want_digest
    stats = ledger.stats()
    assert stats["applied"] == stats["received"] == stats["batches"] == TOTAL_STEPS
    assert stats["duplicates"] == out["resends"] == out["statuses"]["duplicate"]
    assert stats["open"] == stats["buffered"] == stats["expired"] == 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(staleness=st.one_of(st.none(), st.integers(0, 2)),
       choices=st.lists(st.integers(0, 80), min_size=1, max_size=40))
def test_dead_workers_and_expiries_lose_and_duplicate_nothing(tmp_path_factory: Any, staleness: int | None,
                                                              choices: list[int]) -> None:
    """Workers die holding batches, leases time out (live ones too) and are requeued, dead workers come back:
    every batch is still received and applied exactly once, and in order mode the state is the sequential one."""
    root = tmp_path_factory.mktemp("ledger")
    pipe = make_pipeline(root)
    clock = FakeClock()
    ledger = BatchLedger(pipe, max_staleness=staleness, lease_timeout=10.0, max_attempts=1000, clock=clock)
    out = drive(ledger, pipe, choices, clock=clock)
    stats = ledger.stats()
    calls = out["counts"]["feed"] + out["counts"]["zombie"] + out["counts"]["resend"]
    assert stats["applied"] == stats["received"] == stats["batches"] == TOTAL_STEPS
    assert stats["duplicates"] == calls - TOTAL_STEPS == out["statuses"]["duplicate"]
    assert stats["abandoned"] == stats["late"] == stats["open"] == stats["waiting"] == 0
    assert TOTAL_STEPS <= stats["handed_out"] <= TOTAL_STEPS + stats["requeued"]
    if staleness is not None:
        want_batches, want_digest = reference(make_pipeline(root), staleness)
        assert [out["seen"][b] for b in range(TOTAL_STEPS)] == want_batches
        assert digest(pipe.scheduler.state_dict()) == want_digest


def test_asynchronous_mode_applies_every_batch_exactly_once(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    applied: list[tuple[int, int, float]] = []
    original = pipe.scheduler.feedback

    def record(metrics: Any) -> None:
        for tid, part in metrics[SELECTOR_METRIC].items():
            applied.extend((tid, i, v) for i, v in zip(part["indices"], part["values"], strict=True))
        original(metrics)

    pipe.scheduler.feedback = record
    ledger = BatchLedger(pipe)  # max_staleness=None: applied on arrival, in any order
    out = drive(ledger, pipe, [5, 3, 8, 1, 13, 2, 21, 4, 34, 0, 7], workers=4, hold=3)
    expected = Counter()
    for batch_id, batch in out["seen"].items():
        for tid, part in metrics_for(pipe, [flexkit.Task(taskset_id=t, taskset="", index=i, data={})
                                            for t, i in batch], batch_id)[SELECTOR_METRIC].items():
            expected.update((tid, i, v) for i, v in zip(part["indices"], part["values"], strict=True))
    assert Counter(applied) == expected  # nothing lost, nothing twice
    stats = ledger.stats()
    assert stats["applied"] == stats["batches"] == TOTAL_STEPS and stats["duplicates"] == out["resends"] > 0
    assert out["statuses"]["applied"] == TOTAL_STEPS


def test_expired_lease_is_requeued_and_the_first_feedback_wins(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=10.0, max_staleness=0, clock=clock)
    dead = ledger.lease("dead")
    assert dead is not None and dead.batch_id == 0 and dead.attempt == 0 and dead.timeout == 10.0
    assert ledger.lease("live") is None  # staleness 0: batch 1 waits for batch 0
    clock.now = 10.5
    again = ledger.lease("live")
    assert again is not None and (again.batch_id, again.attempt, again.worker) == (0, 1, "live")
    assert pairs(again.tasks) == pairs(dead.tasks)
    assert ledger.feedback(0, metrics_for(pipe, again.tasks, 0)) == "applied"
    assert ledger.feedback(0, metrics_for(pipe, dead.tasks, 0)) == "duplicate"  # the dead worker wakes up
    stats = ledger.stats()
    assert (stats["expired"], stats["requeued"], stats["abandoned"], stats["duplicates"]) == (1, 1, 0, 1)
    assert ledger.lease("live").batch_id == 1


def test_feedback_from_the_expired_holder_counts_if_it_comes_first(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=1.0, clock=clock)
    slow = ledger.lease("slow")
    clock.now = 2.0
    assert ledger.stats()["waiting"] == 1
    assert ledger.feedback(slow.batch_id, metrics_for(pipe, slow.tasks, 0)) == "applied"
    assert ledger.stats()["waiting"] == 0
    assert ledger.lease("other").batch_id == 1  # the requeued copy is gone


def test_renew_keeps_a_lease_and_release_requeues_at_once(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=5.0, clock=clock)
    lease = ledger.lease("w")
    clock.now = 4.0
    assert ledger.renew(lease.batch_id)
    clock.now = 8.0
    assert ledger.stats()["expired"] == 0 and ledger.next_deadline() == 9.0
    assert ledger.release(lease.batch_id) and not ledger.renew(lease.batch_id)
    assert ledger.lease("v").batch_id == lease.batch_id


def test_a_batch_is_abandoned_after_max_attempts(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=1.0, max_attempts=2, max_staleness=0, clock=clock)
    first = ledger.lease("a")
    clock.now += 2
    assert ledger.lease("b").attempt == 1
    clock.now += 2
    stats = ledger.stats()
    assert (stats["expired"], stats["requeued"], stats["abandoned"]) == (2, 1, 1)
    assert ledger.lease("c").batch_id == 1  # batch 0 is settled as abandoned; the run goes on
    assert ledger.feedback(first.batch_id, metrics_for(pipe, first.tasks, 0)) == "late_applied"
    assert ledger.feedback(first.batch_id, metrics_for(pipe, first.tasks, 0)) == "duplicate"


@pytest.mark.parametrize("late", ["apply", "drop"])
def test_late_feedback_for_an_abandoned_batch(tmp_path: Path, late: str) -> None:
    pipe = make_pipeline(tmp_path, prefetch=False)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=1.0, on_expiry="drop", late=late, clock=clock)
    lost = ledger.lease("a")
    clock.now = 5.0
    assert ledger.stats()["abandoned"] == 1
    before = digest(pipe.scheduler.state_dict())
    status = ledger.feedback(lost.batch_id, metrics_for(pipe, lost.tasks, 0))
    assert status == f"late_{'applied' if late == 'apply' else 'dropped'}"
    assert (digest(pipe.scheduler.state_dict()) == before) is (late == "drop")
    stats = ledger.stats()
    assert stats["late"] == 1 and stats[f"late_{'applied' if late == 'apply' else 'dropped'}"] == 1


def test_in_order_mode_skips_an_abandoned_batch_unless_its_feedback_comes_in_time(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    clock = FakeClock()
    ledger = BatchLedger(pipe, lease_timeout=1.0, on_expiry="drop", max_staleness=2, clock=clock)
    b0, b1 = ledger.lease("a"), ledger.lease("b")
    clock.now = 0.5
    ledger.renew(b0.batch_id)
    clock.now = 1.2  # batch 1 expires and is abandoned; batch 0 is still out, so batch 1's turn has not come
    assert ledger.stats()["abandoned"] == 1
    assert ledger.feedback(1, metrics_for(pipe, b1.tasks, 1)) == "buffered"  # takes its place in the order
    assert ledger.feedback(0, metrics_for(pipe, b0.tasks, 0)) == "buffered"  # staleness 2: not yet needed
    assert [ledger.lease("c").batch_id for _ in range(3)] == [2, 3, 4]  # batch 4 needs batches 0 and 1 applied
    stats = ledger.stats()
    assert stats["applied"] == 2 and stats["late"] == 1 and stats["late_applied"] == 0


def test_bad_feedback_is_refused_and_the_lease_stays_open(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    ledger = BatchLedger(pipe, max_staleness=0)
    lease = ledger.lease("w")
    before = digest(pipe.scheduler.state_dict())
    with pytest.raises(FeedbackError, match="never handed out"):
        ledger.feedback(5, metrics_for(pipe, lease.tasks, 0))
    with pytest.raises(FeedbackError, match="batch_id must be an int"):
        ledger.feedback(True, metrics_for(pipe, lease.tasks, 0))
    with pytest.raises(FeedbackError, match="out of range"):
        ledger.feedback(0, {SELECTOR_METRIC: {0: {"indices": [999], "values": [0.5]}}})
    with pytest.raises(FeedbackError, match="unknown taskset"):
        ledger.feedback(0, {SELECTOR_METRIC: {"nope": {"indices": [0], "values": [0.5]}}})
    assert digest(pipe.scheduler.state_dict()) == before and ledger.stats()["open"] == 1
    assert ledger.feedback_experiences(0, experiences(lease.tasks, 0)) == "applied"


def test_options_are_checked(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    for bad in ({"lease_timeout": 0}, {"max_staleness": -1}, {"on_expiry": "retry"}, {"late": "keep"},
                {"max_attempts": 0}):
        with pytest.raises(ValueError):
            BatchLedger(pipe, **bad)


def test_checkpoint_mid_run_resumes_exactly(tmp_path: Path) -> None:
    """Stop with leases out and feedback buffered, resume in a new pipeline; the holders' feedback still
    counts and the run ends exactly where an uninterrupted one does."""
    data = tmp_path / "data"
    data.mkdir()
    choices = [0, 1, 4, 2, 9, 3, 3, 7, 1, 5, 6, 2, 8]
    whole = make_pipeline(data)
    drive(BatchLedger(whole, max_staleness=1), whole, choices)

    first = make_pipeline(data)
    ledger = BatchLedger(first, max_staleness=1)
    out = drive(ledger, first, choices, stop_after=9)
    stats = ledger.stats()
    assert stats["open"] > 0
    ledger.save_checkpoint(tmp_path / "ckpt", extra={"note": "mine"})

    second = make_pipeline(data)
    resumed = BatchLedger(second, max_staleness=1)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == {"note": "mine"}
    assert resumed.stats() == stats
    for leases in out["held"].values():  # the workers that held leases feed back to the new ledger
        for lease in leases:
            assert resumed.feedback(lease.batch_id, metrics_for(second, lease.tasks, lease.batch_id)) != "duplicate"
    drive(resumed, second, choices)
    assert digest(second.scheduler.state_dict()) == digest(whole.scheduler.state_dict())
    assert resumed.stats()["applied"] == TOTAL_STEPS


def test_a_checkpoint_without_a_ledger_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    pipe.save_checkpoint(tmp_path / "plain")
    ledger = BatchLedger(pipe)
    ledger.lease("w")
    before = ledger.state_dict()
    with pytest.raises(FlexkitError, match="no batch ledger"):
        ledger.load_checkpoint(tmp_path / "plain")
    assert digest(ledger.state_dict()) == digest(before)
