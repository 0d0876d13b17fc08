"""flexkit's metrics for host trainers' loggers: one ``flexkit/...`` scheme, computed without changing state."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from flexkit.integrations._host_metrics import (
    ESTIMATE_MEAN_LIMIT,
    PREFIX,
    feedback_metrics,
    pipeline_metrics,
    selector_metrics,
)
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.sample._batch import RolloutBatch
from flexkit.scheduler.feedback import SELECTOR_METRIC
from tests.scheduler.test_scheduler import make_pipeline, write_taskset

LEARNING = {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.0}


def test_every_name_starts_with_the_prefix_and_step_and_epoch_follow_the_scheduler(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(12, 4), selectors=[{"type": "shuffle"}, LEARNING], run={"batch_size": 4})
    assert set(pipeline_metrics(pipe)) == {"flexkit/step", "flexkit/epoch",
                                           "flexkit/selector/t1/predicted_pass_rate_mean"}  # no mix before a read
    for _ in range(5):
        batch = pipe.scheduler.read()
    out = pipeline_metrics(pipe, rollouts=32)
    assert all(k.startswith(PREFIX) for k in out)
    assert out["flexkit/step"] == 5 and out["flexkit/epoch"] == 1 and out["flexkit/rollouts"] == 32
    shares = [out["flexkit/mix/t0"], out["flexkit/mix/t1"]]
    assert sum(shares) == pytest.approx(1.0)
    counts = np.bincount([t.taskset_id for t in batch], minlength=2) / len(batch)
    assert shares == pytest.approx(counts.tolist())


def test_feedback_statistics_are_those_of_the_fed_back_pass_rates(tmp_path: Path) -> None:
    payload = {SELECTOR_METRIC: {0: {"indices": [0, 1, 2, 3], "values": [0.0, 0.5, 1.0, 0.25]},
                                 "t1": {"indices": [5], "values": [1.0]}}}
    out = feedback_metrics(payload)
    rates = np.array([0.0, 0.5, 1.0, 0.25, 1.0])
    assert out == pytest.approx({
        "flexkit/feedback/tasks": 5, "flexkit/feedback/pass_rate_mean": rates.mean(),
        "flexkit/feedback/pass_rate_std": rates.std(), "flexkit/feedback/pass_rate_min": 0.0,
        "flexkit/feedback/pass_rate_max": 1.0, "flexkit/feedback/zero_fraction": 0.2,
        "flexkit/feedback/one_fraction": 0.4})
    assert feedback_metrics({}) == {} and feedback_metrics({SELECTOR_METRIC: {}}) == {}


@pytest.mark.parametrize("payload", [
    None, [], {SELECTOR_METRIC: None}, {SELECTOR_METRIC: [1, 2]}, {SELECTOR_METRIC: {0: "x"}},
    {SELECTOR_METRIC: {0: {"values": ["a", "b"]}}}, {SELECTOR_METRIC: {0: {"values": [float("nan")]}}},
    {SELECTOR_METRIC: {0: {"values": {"a": 1}}}},
])
def test_malformed_feedback_gives_no_statistics_and_never_raises(payload: object) -> None:
    assert feedback_metrics(payload) == {}  # type: ignore[arg-type]


def test_only_the_numeric_parts_of_a_mixed_payload_are_counted() -> None:
    out = feedback_metrics({SELECTOR_METRIC: {0: {"values": ["a"]}, 1: {"values": [0.5, float("inf"), 1.0]}}})
    assert out["flexkit/feedback/tasks"] == 2 and out["flexkit/feedback/pass_rate_mean"] == 0.75


def test_selector_estimates_move_with_feedback_and_reading_them_changes_nothing(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(40,), selectors=[LEARNING], run={"batch_size": 8})
    sched = pipe.scheduler
    tasks = sched.read()
    before = pipeline_metrics(pipe)["flexkit/selector/t0/predicted_pass_rate_mean"]
    payload = {SELECTOR_METRIC: {0: {"indices": [t.index for t in tasks], "values": [1.0] * len(tasks)}}}
    sched.feedback(payload)
    state = sched.state_dict()
    after = pipeline_metrics(pipe, feedback=payload)
    assert after["flexkit/selector/t0/predicted_pass_rate_mean"] > before
    assert after["flexkit/feedback/pass_rate_mean"] == 1.0
    assert repr(sched.state_dict()) == repr(state)


def test_a_selector_summary_is_reported_and_non_numbers_are_left_out(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, sizes=(10,), selectors=[{"type": "shuffle"}])
    selector = pipe.scheduler.entries[0].selector
    selector.summary = lambda: {"seen": 3, "name": "x", "flag": True, "ratio": np.float32(0.5)}
    out = pipeline_metrics(pipe)
    assert out["flexkit/selector/t0/seen"] == 3.0 and out["flexkit/selector/t0/ratio"] == 0.5
    assert "flexkit/selector/t0/name" not in out and "flexkit/selector/t0/flag" not in out
    pipe.scheduler.close()


def test_sample_stage_metrics_are_prefixed(tmp_path: Path) -> None:
    write_taskset(tmp_path / "t.jsonl", 16)
    pipe = pipeline_from_dict({
        "run": {"batch_size": 4}, "tasksets": [{"name": "t", "path": "t.jsonl"}],
        "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"},
                   "actuator": {"type": "zero_variance_filter"}},
    }, base_dir=tmp_path)
    batch = RolloutBatch.from_dict({"uid": np.repeat(np.arange(4), 2),
                                    "token_level_scores": np.array([[0], [1], [1], [1], [0], [0], [1], [0.]]),
                                    "response_mask": np.ones((8, 1))})
    pipe.apply_sample_stage(batch, step=0)
    out = pipeline_metrics(pipe)
    assert out["flexkit/sample/kept_fraction"] == 0.5


def test_tasksets_above_the_limit_skip_the_estimate_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = make_pipeline(tmp_path, sizes=(40,), selectors=[LEARNING])
    assert "flexkit/selector/t0/predicted_pass_rate_mean" in pipeline_metrics(pipe)
    monkeypatch.setattr("flexkit.integrations._host_metrics.ESTIMATE_MEAN_LIMIT", 39)
    assert "flexkit/selector/t0/predicted_pass_rate_mean" not in pipeline_metrics(pipe)
    assert ESTIMATE_MEAN_LIMIT >= 10**6


def test_a_scheduler_is_read_while_idle_and_an_adapters_entries_as_they_are(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = make_pipeline(tmp_path, sizes=(40,), selectors=[LEARNING])
    sched, held = pipe.scheduler, []
    hold = sched.idle

    @contextlib.contextmanager
    def idle() -> Iterator[None]:
        with hold():
            held.append(True)
            yield

    monkeypatch.setattr(sched, "idle", idle)
    assert pipeline_metrics(pipe) == pipeline_metrics(sched)  # a pipeline reports its scheduler's
    from_scheduler = selector_metrics(sched)
    assert held == [True, True, True]
    assert "flexkit/selector/t0/predicted_pass_rate_mean" in from_scheduler
    assert selector_metrics(SimpleNamespace(entries=list(sched.entries))) == from_scheduler  # Trinity's monitor
    assert held == [True, True, True]
def _labelled_pipeline(tmp_path: Path, selectors: list[dict]) -> object:  # type: ignore[type-arg]
    """Two tasksets of 30 rows with a ``source`` label (``s<i % 3>``) and a ``difficulty`` of ``i / 30``."""
    for name in ("a", "b"):
        rows = [{"prompt": f"q{i}", "id": i, "source": f"s{i % 3}", "difficulty": i / 30} for i in range(30)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasksets = [{"name": name, "path": f"{name}.jsonl", "selector": selector}
                for name, selector in zip(("a", "b"), selectors, strict=True)]
    return pipeline_from_dict({"run": {"batch_size": 6, "seed": 0, "total_steps": 5}, "tasksets": tasksets},
                              base_dir=tmp_path)


def test_regression_the_fed_back_tasks_mix_is_reported_by_any_grouping_column(tmp_path: Path) -> None:
    """Hosts logged only the taskset mix: a ``source`` label (the selector's, or the first categorical column for a
    selector that groups nothing) and a number column in the selector's bins now give
    ``flexkit/group_mix/<taskset>/<group>``, the shares ``flexkit preview`` counts."""
    pipe = _labelled_pipeline(tmp_path, [{"type": "frontier", "feature_keys": ["source"]}, {"type": "random"}])
    payload = {SELECTOR_METRIC: {0: {"indices": [0, 3, 4, 7], "values": [1.0] * 4},
                                 "b": {"indices": [2, 5], "values": [0.0, 1.0]}}}
    out = pipeline_metrics(pipe, feedback=payload)
    mix = {k: v for k, v in out.items() if k.startswith("flexkit/group_mix/")}
    assert mix == {"flexkit/group_mix/a/s0": 0.5, "flexkit/group_mix/a/s1": 0.5, "flexkit/group_mix/b/s2": 1.0}
    binned = _labelled_pipeline(tmp_path, [{"type": "frontier", "feature_keys": ["difficulty"], "bins": 2}] * 2)
    out = pipeline_metrics(binned, feedback={SELECTOR_METRIC: {1: {"indices": [0, 1, 2, 29], "values": [0.0] * 4}}})
    assert [v for k, v in out.items() if k.startswith("flexkit/group_mix/b/")] == [0.75, 0.25]
    assert not any(k.startswith("flexkit/group_mix/a/") for k in out)  # nothing of it was fed back
    for malformed in ({0: {"indices": [99]}}, {0: {"indices": ["x"]}}, {7: {"indices": [1]}}, {"c": {}}):
        assert not any(k.startswith("flexkit/group_mix/") for k in pipeline_metrics(
            pipe, feedback={SELECTOR_METRIC: malformed}))


def test_regression_a_host_logs_the_running_total_of_rollouts(tmp_path: Path) -> None:
    """``flexkit/rollouts`` is the step's count; the total an adapter counted is ``flexkit/run/rollouts``, the name
    ``flexkit run`` records it under."""
    pipe = make_pipeline(tmp_path, sizes=(12,), selectors=[{"type": "shuffle"}])
    out = pipeline_metrics(pipe, rollouts=32, run_rollouts=96)
    assert (out["flexkit/rollouts"], out["flexkit/run/rollouts"]) == (32, 96)
    assert "flexkit/run/rollouts" not in pipeline_metrics(pipe, rollouts=32)
