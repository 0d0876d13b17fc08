"""Dynamic sampling (DAPO's refill loop): rounds, feedback of every group, rollout accounting, exact resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from flexkit import ConfigError, pipeline_from_dict, pipeline_metrics
from flexkit._metric_names import (
    EVAL_ACCURACY,
    FILTER_ROUNDS,
    KEPT_FRACTION,
    KEPT_GROUPS,
    ROLLOUTS,
    RUN_GENERATED_TOKENS,
    RUN_ROLLOUTS,
)
from flexkit.plugins._contract import Rollout
from flexkit.run._dynamic_sampling import fill_batch
from flexkit.run._runner import run_pipeline
from flexkit.sample._batch import RolloutBatch
from flexkit.scheduler._scheduler import AFTER_FEEDBACK
from tests.fixtures import crash_run, read_metrics, without_clock_text

G = 4  # responses per task


def _pipeline(tmp_path: Path, *, solved: list[float], batch_size: int = 4, max_rounds: int = 4,
              surplus: str = "drop", target_groups: int | None = None, selector: dict | None = None,
              **run: Any) -> Any:
    """A pipeline over tasks whose rollouts solve a fixed share (0, 0.5 or 1) of their responses."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"solved": s}) + "\n" for s in solved))
    actuator: dict[str, Any] = {"type": "zero_variance_filter", "max_rounds": max_rounds}
    if target_groups is not None:
        actuator["target_groups"] = target_groups
    data = {
        "run": {"batch_size": batch_size, "seed": 3, "total_steps": 5, **run},
        "tasksets": [{"name": "t", "path": str(path), "selector": selector or {"type": "shuffle"}}],
        "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"}, "actuator": actuator,
                   "refill": {"surplus": surplus}},
    }
    return pipeline_from_dict(data, base_dir=tmp_path)


def _rollout(tasks: list[Any]) -> Rollout:
    """``G`` responses per task: the first ``solved · G`` correct; two tokens per response, one masked out."""
    rewards = np.concatenate([(np.arange(G) < round(t.data["solved"] * G)).astype(np.float32) for t in tasks])
    n = len(tasks)
    scores = torch.zeros(n * G, 2)
    scores[:, 0] = torch.from_numpy(rewards)
    mask = torch.zeros(n * G, 2)
    mask[:, 0] = 1
    batch = RolloutBatch.from_dict({
        "token_level_scores": scores, "response_mask": mask, "uid": np.repeat(np.arange(n), G),
        "taskset_id": np.repeat([t.taskset_id for t in tasks], G), "index": np.repeat([t.index for t in tasks], G),
    })
    experiences = {"reward": rewards, "taskset_id": batch["taskset_id"], "index": batch["index"]}
    return Rollout(batch=batch, experiences=experiences, metrics={"reward_mean": float(rewards.mean())})


def test_refill_draws_rounds_until_the_kept_groups_fill_the_batch(tmp_path: Path) -> None:
    # 12 tasks, a third of them mixed: a 4-task batch keeps about 1.3 groups per round
    pipe = _pipeline(tmp_path, solved=[0.0, 0.5, 1.0] * 4, max_rounds=10)
    fed: list[np.ndarray] = []
    inner = pipe.scheduler.feedback
    pipe.scheduler.feedback = lambda metrics: (fed.append(np.asarray(metrics["selector_metric"][0]["indices"])),
                                               inner(metrics))[1]
    filled = fill_batch(pipe, _rollout, step=0)
    assert filled.target_groups == 4
    assert filled.kept_groups == 4
    assert filled.filter_rounds >= 3  # at most 4 mixed tasks in 12, at most 1.x per round
    assert filled.responses == filled.filter_rounds * 4 * G
    assert filled.generated_tokens == filled.responses  # one unmasked token per response
    # the one count: the filter's own (its checkpointed state) agrees with the step's
    count, own = filled.count, pipe.sample_stage.actuator.count
    assert (count.rounds, count.groups_drawn, count.groups_passed) == (own.rounds, 4 * own.rounds, own.groups_passed)
    assert count.groups_kept + count.surplus_dropped == count.groups_passed and count.groups_needed == 0
    assert count.responses_kept == 4 * G and count.kept_fraction == 4 * G / filled.responses
    # every rolled-out group's feedback reached the selectors, kept or not
    assert [sorted(f.tolist()) for f in fed] == [sorted(t.index for t in r.tasks) for r in filled.rounds]
    batch = filled.batch
    assert batch.batch_size == 4 * G
    rewards = batch.sequence_rewards().numpy().reshape(4, G)
    assert (rewards.min(axis=1) < rewards.max(axis=1)).all()  # only mixed groups were kept
    gid, groups = batch.group_index()
    assert groups == 4 and (np.bincount(gid) == G).all()  # uids of different rounds never collide


def test_round_limit_stops_a_step_that_cannot_fill(tmp_path: Path) -> None:
    pipe = _pipeline(tmp_path, solved=[0.0, 1.0] * 6, max_rounds=3)
    filled = fill_batch(pipe, _rollout, step=0)
    assert filled.filter_rounds == 3
    assert filled.kept_groups == 0 and filled.batch.batch_size == 0
    assert filled.responses == 3 * 4 * G


@pytest.mark.parametrize(("surplus", "expected"), [("drop", 2), ("keep", 4)])
def test_surplus_of_the_last_round(tmp_path: Path, surplus: str, expected: int) -> None:
    pipe = _pipeline(tmp_path, solved=[0.5] * 8, surplus=surplus, target_groups=2)
    filled = fill_batch(pipe, _rollout, step=0)
    assert filled.filter_rounds == 1
    assert filled.kept_groups == expected
    assert filled.batch.batch_size == expected * G
    assert (filled.count.groups_passed, filled.count.surplus_dropped) == (4, 4 - expected)
    metrics = pipeline_metrics(pipe, refill=filled.count)  # a host loop reports the step's count, not the round's
    assert metrics[KEPT_GROUPS] == expected and metrics[FILTER_ROUNDS] == 1 and metrics[ROLLOUTS] == 4 * G
    assert metrics[KEPT_FRACTION] == expected / 4 and metrics["flexkit/sample/groups_needed"] == 0


def test_refill_is_refused_where_it_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run.prefetch"):
        _pipeline(tmp_path, solved=[0.5] * 8, prefetch=True)
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"x": 1}\n' * 8)
    data = {"run": {"batch_size": 4}, "tasksets": [{"name": "t", "path": str(path)}],
            "sample": {"mechanism": "select", "scorer": {"type": "group_solve_rate"},
                       "actuator": {"type": "topk_fraction", "fraction": 0.5}, "refill": {}}}
    with pytest.raises(ConfigError, match=r"sample.refill.*group filter"):
        pipeline_from_dict(data, base_dir=tmp_path)
    data["sample"]["refill"] = {"surplus": "some"}
    with pytest.raises(ConfigError, match=r"sample.refill.surplus"):
        pipeline_from_dict(data, base_dir=tmp_path)


def test_prefetch_defaults_to_after_feedback_with_refill_and_on_without(tmp_path: Path) -> None:
    assert _pipeline(tmp_path, solved=[0.5] * 8).scheduler.prefetch == AFTER_FEEDBACK
    path = tmp_path / "plain.jsonl"
    path.write_text('{"x": 1}\n' * 8)
    plain = pipeline_from_dict({"run": {"batch_size": 4}, "tasksets": [{"name": "t", "path": str(path)}]},
                               base_dir=tmp_path)
    assert plain.scheduler.prefetch is True


def test_refill_rounds_with_the_default_prefetch_are_those_without_prefetch(tmp_path: Path) -> None:
    """Each round is selected right after the previous round's feedback, in the background: the same rounds as
    ``prefetch = false``, step after step, with a learning selector."""

    def rounds(folder: str, **run: Any) -> list[list[int]]:
        (tmp_path / folder).mkdir()
        pipe = _pipeline(tmp_path / folder, solved=[0.0, 0.5, 1.0, 0.5] * 6, max_rounds=6,
                         selector={"type": "learnability"}, **run)
        out = []
        for step in range(4):
            out.extend([t.index for t in r.tasks] for r in fill_batch(pipe, _rollout, step=step).rounds)
        pipe.scheduler.close()
        return out

    assert rounds("default") == rounds("off", prefetch=False)


def test_concat_rows_pads_token_fields_and_renumbers_groups() -> None:
    a = RolloutBatch.from_dict({"response_mask": torch.ones(4, 2), "uid": np.array(["x", "x", "y", "y"])})
    b = RolloutBatch.from_dict({"response_mask": torch.ones(2, 3), "uid": np.array(["x", "x"])})
    out = RolloutBatch.concat_rows([a, b], [np.array([2, 3]), np.array([0, 1])])
    assert out["response_mask"].tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
    assert out["uid"].tolist() == [1, 1, 2, 2]


def test_regression_concat_rows_pads_the_token_dimension_of_a_field_with_trailing_dimensions() -> None:
    """A (rows, tokens, k) field (verl's routed_experts, a teacher's top-k ids) of different token widths was padded
    along its last dimension, and the join raised torch's RuntimeError; its token dimension is padded, on the side
    the padding names."""
    a = RolloutBatch.from_dict({"experts": torch.ones(1, 2, 3), "uid": np.array(["x"])})
    b = RolloutBatch.from_dict({"experts": torch.full((1, 4, 3), 2.0), "uid": np.array(["y"])})
    for side, first in (("right", [[1.0] * 3] * 2 + [[0.0] * 3] * 2), ("left", [[0.0] * 3] * 2 + [[1.0] * 3] * 2)):
        out = RolloutBatch.concat_rows([a, b], [np.array([0]), np.array([0])], padding={"experts": side})
        assert out["experts"].shape == (2, 4, 3)
        assert out["experts"][0].tolist() == first and (out["experts"][1] == 2).all()


# -- flexkit run with [sample.refill] on the learner simulator ------------------------------------------------

SIMULATED = {
    "run": {"batch_size": 16, "seed": 1, "total_steps": 12, "eval_every": 4, "checkpoint_every": 3},
    "tasksets": [{"name": "graded", "storage_type": "simulated", "size": 400, "levels": [1, 2, 3, 4],
                  "selector": {"type": "random"}}],
    "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"},
               "actuator": {"type": "zero_variance_filter", "max_rounds": 4}, "refill": {}},
    "trainer": {"type": "simulator", "group_size": 4},
}


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """The step records (the first record, ``"step": -1``, is the evaluation before training)."""
    records = read_metrics(run_dir)
    assert records[0]["step"] == -1 and records[0][RUN_ROLLOUTS] == 0 and EVAL_ACCURACY in records[0]
    return records[1:]


def test_run_records_cumulative_rollouts_and_resumes_exactly_after_a_kill_mid_refill(tmp_path: Path) -> None:
    run_pipeline(pipeline_from_dict(SIMULATED, base_dir=tmp_path), run_dir=tmp_path / "whole", progress=None)
    whole = _records(tmp_path / "whole")
    rounds = [r[FILTER_ROUNDS] for r in whole]
    assert max(rounds) >= 2, "the setting must need refills for this test to mean anything"
    # cumulative responses: every round's batch_size × group_size, kept or not
    assert [r[RUN_ROLLOUTS] for r in whole] == np.cumsum([16 * 4 * n for n in rounds]).tolist()
    assert [r[RUN_GENERATED_TOKENS] for r in whole] == [r[RUN_ROLLOUTS] for r in whole]  # one token per response
    assert all(0 <= r[KEPT_GROUPS] <= 16 for r in whole)
    assert all(r[KEPT_FRACTION] == pytest.approx(r[KEPT_GROUPS] * 4 / (16 * 4 * n))
               for r, n in zip(whole, rounds, strict=True))

    # crash at the second round of a step after the first checkpoint that needed a refill
    step = next(i for i, n in enumerate(rounds) if n >= 2 and i >= 4)
    read = sum(rounds[:step]) + 1
    crash_run(pipeline_from_dict(SIMULATED, base_dir=tmp_path), tmp_path / "broken", read)
    assert len(_records(tmp_path / "broken")) == step  # died inside step `step`, mid-refill
    run_pipeline(pipeline_from_dict(SIMULATED, base_dir=tmp_path), run_dir=tmp_path / "broken", resume=True,
                 progress=None)
    resumed, uninterrupted = ((tmp_path / run / "metrics.jsonl").read_text() for run in ("broken", "whole"))
    assert without_clock_text(resumed) == without_clock_text(uninterrupted)


def test_plain_runs_count_rollouts_too(tmp_path: Path) -> None:
    data = {k: v for k, v in SIMULATED.items() if k != "sample"}
    run_pipeline(pipeline_from_dict(data, base_dir=tmp_path), run_dir=tmp_path / "plain", progress=None)
    records = _records(tmp_path / "plain")
    assert [r[RUN_ROLLOUTS] for r in records] == [64 * (i + 1) for i in range(12)]
    assert all(r[FILTER_ROUNDS] == 1 and r[KEPT_GROUPS] == 16 for r in records)


def test_max_rollouts_stops_the_run_with_a_last_evaluation_and_checkpoint(tmp_path: Path) -> None:
    data = {**SIMULATED, "run": {**SIMULATED["run"], "total_steps": 100, "max_rollouts": 1000}}
    result = run_pipeline(pipeline_from_dict(data, base_dir=tmp_path), run_dir=tmp_path / "budget", progress=None)
    records = _records(tmp_path / "budget")
    assert records[-1][RUN_ROLLOUTS] >= 1000 > records[-2][RUN_ROLLOUTS]  # stopped after the step that spent it
    assert result.steps == len(records) and records[-1][EVAL_ACCURACY] == result.last_eval["eval_accuracy"]
    from flexkit.pipeline._checkpoint import load_state

    state, _meta = load_state(tmp_path / "budget" / "checkpoint")
    assert state["extra"]["runner"]["step"] == len(records)
    assert state["extra"]["runner"]["rollouts"] == records[-1][RUN_ROLLOUTS]
