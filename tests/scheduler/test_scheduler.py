"""TasksetScheduler: epoch composition, per-epoch reshuffle, stopping, feedback routing, exact resume."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexkit
from flexkit import FeedbackError, FlexkitError, hookimpl
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.scheduler._scheduler import epoch_counts
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.testing import write_jsonl_taskset as write_taskset
from tests.fixtures import plain_feedback

SELECTORS = [
    {"type": "sequential"},
    {"type": "shuffle"},
    {"type": "random"},
    {"type": "offline_easy2hard", "feature_keys": ["f0"]},
    {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5},
    {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "tau": 0.0, "do_sample": True,
     "adaptive_rho": True},
]


def make_pipeline(tmp_path: Path, sizes=(10, 6, 4), selectors=None, run=None, weights=None) -> flexkit.Pipeline:
    tasksets = []
    for i, n in enumerate(sizes):
        write_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
        chosen = selectors or SELECTORS
        table = {"name": f"t{i}", "path": f"t{i}.jsonl", "selector": chosen[i % len(chosen)]}
        if weights:
            table["weight"] = weights[i]
        tasksets.append(table)
    data = {"run": {"batch_size": 4, "seed": 3, "total_epochs": 3, **(run or {})}, "tasksets": tasksets}
    return pipeline_from_dict(data, base_dir=tmp_path)


def batch_key(tasks) -> list[tuple[int, int]]:
    return [(t.taskset_id, t.index) for t in tasks]


def test_each_epoch_holds_each_taskset_exactly_its_size(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(10, 6, 4), selectors=[{"type": "shuffle"}], run={"batch_size": 5})
    sched = pipe.scheduler
    assert sched.steps_per_epoch == 4 and sched.total_steps == 12
    orders = []
    for epoch in range(3):
        counts = Counter()
        for _ in range(sched.steps_per_epoch):
            tasks = sched.read()
            counts.update(t.taskset_id for t in tasks)
            assert [t.taskset_id for t in tasks] == sorted(t.taskset_id for t in tasks)  # grouped by taskset
        assert counts == {0: 10, 1: 6, 2: 4}
        orders.append(sched.epoch_order(epoch).tolist())
    assert orders[0] != orders[1] and orders[1] != orders[2]
    with pytest.raises(StopIteration):
        sched.read()


def test_tasks_carry_ids_names_indices_and_rows(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(5,), selectors=[{"type": "sequential"}], run={"batch_size": 2})
    tasks = pipe.scheduler.read()
    assert [(t.taskset_id, t.taskset, t.index, t.data["id"]) for t in tasks] == [(0, "t0", 0, 0), (0, "t0", 1, 1)]


def test_weights_set_each_epochs_shares(tmp_path: Path) -> None:
    assert epoch_counts([10, 10], [3.0, 1.0]).tolist() == [15, 5]
    assert epoch_counts([5, 5, 5], [1.0, 1.0, 1.0]).sum() == 15
    pipe = make_pipeline(tmp_path, sizes=(10, 10), selectors=[{"type": "random"}], weights=[3.0, 1.0],
                         run={"batch_size": 5, "total_epochs": 1})
    counts = Counter(t.taskset_id for batch in pipe.scheduler for t in batch)
    assert counts == {0: 15, 1: 5}


def test_weights_all_or_none(tmp_path: Path) -> None:
    write_taskset(tmp_path / "a.jsonl", 4)
    data = {"run": {"batch_size": 2}, "tasksets": [{"name": "a", "path": "a.jsonl", "weight": 1.0},
                                                  {"name": "b", "path": "a.jsonl"}]}
    with pytest.raises(flexkit.ConfigError, match="give every taskset a weight or none; missing: b"):
        pipeline_from_dict(data, base_dir=tmp_path).scheduler  # noqa: B018


def test_total_steps_runs_past_one_epoch(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(4,), selectors=[{"type": "sequential"}],
                         run={"batch_size": 3, "total_epochs": None, "total_steps": 5})
    batches = [batch_key(b) for b in pipe.scheduler]
    assert len(batches) == 5
    assert [i for b in batches for _, i in b][:8] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_independent_streams_per_taskset(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(50, 50), selectors=[{"type": "random"}], run={"batch_size": 20})
    sched = pipe.scheduler
    a = sched.entries[0].selector.get_indices(10)
    b = sched.entries[1].selector.get_indices(10)
    assert a.tolist() != b.tolist()


def test_seed_changes_the_epoch_order(tmp_path: Path) -> None:
    one = make_pipeline(tmp_path, sizes=(10, 10), run={"seed": 1}).scheduler.epoch_order(0)
    two = make_pipeline(tmp_path, sizes=(10, 10), run={"seed": 2}).scheduler.epoch_order(0)
    assert one.tolist() != two.tolist()


def test_feedback_routes_to_the_right_selector_and_moves_difficulty_based(tmp_path: Path) -> None:
    sel = {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.0}
    pipe = make_pipeline(tmp_path, sizes=(20, 20), selectors=[sel], run={"batch_size": 4, "prefetch": False})
    sched = pipe.scheduler
    target = [3, 7, 11]
    for _ in range(5):
        sched.feedback({SELECTOR_METRIC: {1: {"indices": target, "values": [0.5, 0.5, 0.5]},
                                          "t0": {"indices": [0, 1], "values": [1.0, 0.0]}}})
    picked = sched.entries[1].selector.get_indices(3)
    assert sorted(picked.tolist()) == target


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({9: {"indices": [0], "values": [0.5]}}, "unknown taskset 9"),
        ({"nope": {"indices": [0], "values": [0.5]}}, "unknown taskset 'nope'"),
        ({0: {"indices": [0, 1], "values": [0.5]}}, "2 indices but 1 values"),
        ({0: {"indices": [99], "values": [0.5]}}, "out of range"),
        ({0: {"indices": [0], "values": [float("nan")]}}, "finite"),
        ({0: {"indices": [0, 0], "values": [0.5, 0.5]}}, "repeats index 0"),
        ({0: {"indices": ["a"], "values": [0.5]}}, "integers"),
        ({0: {"values": [0.5]}}, "needs 'indices' and 'values'"),
    ],
)
def test_bad_feedback_is_rejected_and_changes_nothing(tmp_path: Path, payload, message: str) -> None:
    sel = {"type": "difficulty_based", "feature_keys": ["f0", "f1"]}
    pipe = make_pipeline(tmp_path, sizes=(10, 10), selectors=[sel], run={"prefetch": False})
    sched = pipe.scheduler
    before = json.dumps(to_plain(sched.state_dict()), sort_keys=True)
    good_first = {1: {"indices": [1], "values": [0.3]}}
    with pytest.raises(FeedbackError, match=message):
        sched.feedback({SELECTOR_METRIC: {**good_first, **payload}})
    assert json.dumps(to_plain(sched.state_dict()), sort_keys=True) == before


def test_out_of_range_policy(tmp_path: Path) -> None:
    sel = {"type": "difficulty_based", "feature_keys": ["f0", "f1"]}
    pipe = make_pipeline(tmp_path, sizes=(10,), selectors=[sel])
    pipe.scheduler.feedback({SELECTOR_METRIC: {0: {"indices": [0], "values": [7.0]}}})  # clipped
    data = {"run": {"batch_size": 2}, "feedback": {"out_of_range": "error"},
            "tasksets": [{"name": "t0", "path": "t0.jsonl", "selector": sel}]}
    strict = pipeline_from_dict(data, base_dir=tmp_path)
    with pytest.raises(FeedbackError, match="outside"):
        strict.scheduler.feedback({SELECTOR_METRIC: {0: {"indices": [0], "values": [-0.5]}}})


def test_regression_clipped_feedback_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reward of -1 / +1 was clipped into [0, 1] without a word: every -1 counted as a failure and the guard read
    negative accuracies."""
    from structlog.testing import capture_logs

    from flexkit import _log

    monkeypatch.setattr(_log, "_cli_format", None)  # library use (a CLI test in this process may have set it)
    sel = {"type": "difficulty_based", "feature_keys": ["f0", "f1"]}
    pipe = make_pipeline(tmp_path, sizes=(10,), selectors=[sel])
    with capture_logs() as logs:
        pipe.scheduler.feedback({SELECTOR_METRIC: {0: {"indices": [0, 1], "values": [0.5, 1.0]}}})
        assert not [e for e in logs if e["event"] == "feedback_clipped"]
        pipe.scheduler.feedback({SELECTOR_METRIC: {0: {"indices": [0, 1], "values": [-1.0, 1.0]}}})
        pipe.scheduler.feedback({SELECTOR_METRIC: {0: {"indices": [2], "values": [3.0]}}})
    warned = [e for e in logs if e["event"] == "feedback_clipped"]
    assert len(warned) == 1 and warned[0]["clipped"] == ["-1.0 for taskset 't0'"]
    assert "(r + 1) / 2" in warned[0]["message"] and 'out_of_range = "error"' in warned[0]["message"]


def test_pipeline_feedback_runs_pass_rate_calculator(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(10,), selectors=[{"type": "difficulty_based", "feature_keys": ["f0", "f1"]}])
    exps = [{"reward": r, "taskset_id": 0, "index": i} for i, r in [(2, 1.0), (2, 0.0), (5, 1.0)]]
    metrics = pipe.feedback(exps)
    assert plain_feedback(metrics)[SELECTOR_METRIC] == {0: {"indices": [2, 5], "values": [0.5, 1.0]}}


def test_lifecycle_hooks_see_selection_and_feedback(tmp_path: Path) -> None:
    seen: list[tuple[str, int, object]] = []

    class Observer:
        @hookimpl
        def flexkit_on_select(self, step, tasks):
            seen.append(("select", step, len(tasks)))

        @hookimpl
        def flexkit_on_feedback(self, step, metrics):
            seen.append(("feedback", step, sorted(metrics)))

    pipe = make_pipeline(tmp_path, sizes=(8,), selectors=[{"type": "shuffle"}])
    pipe.plugins.pm.register(Observer())
    sched = pipe.scheduler
    sched.read()
    sched.feedback({SELECTOR_METRIC: {0: {"indices": [1], "values": [1.0]}}})
    sched.read()
    assert seen == [("select", 0, 4), ("feedback", 1, [0]), ("select", 1, 4)]


def test_aread_and_stop_async_iteration(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(4,), selectors=[{"type": "sequential"}],
                         run={"batch_size": 2, "total_epochs": 1})

    async def drain():
        out = []
        while True:
            try:
                out.append(batch_key(await pipe.scheduler.aread()))
            except StopAsyncIteration:
                return out

    assert asyncio.run(drain()) == [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]


def test_refuses_state_from_other_tasksets(tmp_path: Path) -> None:
    a = make_pipeline(tmp_path / "a" if (tmp_path / "a").mkdir() is None else tmp_path, sizes=(10, 6))
    b = make_pipeline(tmp_path / "b" if (tmp_path / "b").mkdir() is None else tmp_path, sizes=(10, 7))
    with pytest.raises(FlexkitError, match="scheduler state is for tasksets"):
        b.scheduler.load_state_dict(a.scheduler.state_dict())


def to_plain(obj):
    """A state as JSON would carry it (arrays become lists), to prove it is plain data."""
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def from_plain_state(state):
    return json.loads(json.dumps(to_plain(state)))


def feedback_for(tasks, rng: np.random.Generator) -> dict:
    metric: dict[int, dict[str, list]] = {}
    for t in tasks:
        part = metric.setdefault(t.taskset_id, {"indices": [], "values": []})
        if t.index not in part["indices"]:
            part["indices"].append(t.index)
            part["values"].append(float(rng.uniform(-0.2, 1.2)))  # some out of range: clipped
    return {SELECTOR_METRIC: metric}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cut=st.integers(min_value=0, max_value=11),
    prefetch=st.booleans(),
    fb_seed=st.integers(min_value=0, max_value=2**16),
    rotate=st.integers(min_value=0, max_value=len(SELECTORS) - 1),
)
def test_resume_at_any_step_is_exact(tmp_path: Path, cut: int, prefetch: bool, fb_seed: int, rotate: int) -> None:
    """A scheduler restored at any step yields exactly the uninterrupted run's batches, feedback interleaved."""
    selectors = SELECTORS[rotate:] + SELECTORS[:rotate]
    run = {"batch_size": 5, "prefetch": prefetch}

    def fresh():
        return make_pipeline(tmp_path, sizes=(9, 7, 5), selectors=selectors, run=run).scheduler

    def play(sched, steps, rng):
        out = []
        for _ in range(steps):
            tasks = sched.read()
            out.append(batch_key(tasks))
            sched.feedback(feedback_for(tasks, rng))
        return out

    full = fresh()
    reference = play(full, full.total_steps, np.random.default_rng(fb_seed))

    first = fresh()
    rng = np.random.default_rng(fb_seed)
    head = play(first, cut, rng)
    state = from_plain_state(first.state_dict())
    first.close()
    resumed = make_pipeline(tmp_path, sizes=(9, 7, 5), selectors=selectors,
                            run={**run, "seed": 999}).scheduler  # a different seed: the state must carry all
    resumed.seed = 3  # the epoch order is part of the pipeline, not of the state
    resumed.load_state_dict(state)
    tail = play(resumed, resumed.total_steps - cut, rng)
    assert head + tail == reference
    full.close()
    resumed.close()


def test_set_mix_changes_proportions_from_the_next_unselected_batch(tmp_path: Path) -> None:
    for prefetch in (False, True):
        pipe = make_pipeline(tmp_path, sizes=(40, 40), selectors=[{"type": "random"}],
                             run={"batch_size": 10, "prefetch": prefetch, "total_epochs": 2})
        sched = pipe.scheduler
        sched.read()
        sched.set_mix({"t0": 0.8, 1: 0.2})
        if prefetch:  # batch 1 was already selected with the epoch plan
            sched.read()
        for _ in range(3):
            counts = Counter(t.taskset_id for t in sched.read())
            assert counts == {0: 8, 1: 2}
        sched.close()


def test_mix_counts_respect_taskset_sizes(tmp_path: Path) -> None:
    from flexkit.scheduler._scheduler import mix_counts

    rng = np.random.default_rng(0)
    assert mix_counts([0.5, 0.5], 7, [10, 10], rng).sum() == 7
    assert mix_counts([0.9, 0.1], 10, [3, 20], rng).tolist() == [3, 7]
    with pytest.raises(ValueError, match="exceeds"):
        mix_counts([1.0, 1.0], 10, [3, 3], rng)


def test_set_mix_rejects_bad_proportions(tmp_path: Path) -> None:
    sched = make_pipeline(tmp_path, sizes=(5, 5)).scheduler
    for bad in ([1.0], [-1.0, 2.0], [0.0, 0.0], [float("nan"), 1.0]):
        with pytest.raises(ValueError, match="mix proportions"):
            sched.set_mix(bad)


def test_resume_keeps_the_mix(tmp_path: Path) -> None:
    def fresh():
        return make_pipeline(tmp_path, sizes=(30, 30), selectors=[{"type": "random"}],
                             run={"batch_size": 7, "prefetch": False}).scheduler

    full = fresh()
    full.read()
    full.set_mix([0.3, 0.7])
    state = from_plain_state(full.state_dict())
    expected = [batch_key(full.read()) for _ in range(4)]
    resumed = fresh()
    resumed.load_state_dict(state)
    assert [batch_key(resumed.read()) for _ in range(4)] == expected


def test_regression_a_state_failing_part_way_changes_nothing(tmp_path: Path) -> None:
    """Loading used to leave earlier selectors restored when a later one's state was broken."""
    pipe = make_pipeline(tmp_path, sizes=(9, 7, 5), run={"prefetch": False})
    sched = pipe.scheduler
    for _ in range(3):
        sched.feedback(feedback_for(sched.read(), np.random.default_rng(1)))
    good = from_plain_state(sched.state_dict())
    other = make_pipeline(tmp_path, sizes=(9, 7, 5), run={"prefetch": False}).scheduler
    before = json.dumps(to_plain(other.state_dict()), sort_keys=True)
    broken = json.loads(json.dumps(good))
    broken["selectors"][2] = {"rng": "not a state"}
    with pytest.raises(Exception):  # noqa: B017 - any error; the point is what it leaves behind
        other.load_state_dict(broken)
    assert json.dumps(to_plain(other.state_dict()), sort_keys=True) == before
