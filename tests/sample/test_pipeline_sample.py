"""The [sample] table wired into a pipeline: load-time checks, token weights, mix driving the scheduler."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from flexkit import ConfigError
from flexkit.pipeline._pipeline import load_pipeline, pipeline_from_dict
from flexkit.sample import RolloutBatch
from tests.fixtures import plain_feedback
from tests.scheduler.test_scheduler import from_plain_state, write_taskset

SELECT = {
    "mechanism": "select",
    "estimator": "grpo",
    "scorer": {"type": "group_solve_rate", "success_threshold": 0.5},
    "actuator": {"type": "threshold_band", "low": 0.2, "high": 0.8},
}


def pipeline(tmp_path: Path, sample: dict, sizes=(20, 20), **run) -> object:
    for i, n in enumerate(sizes):
        write_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
    data = {"run": {"batch_size": 8, "seed": 1, "prefetch": False, "total_epochs": 20, **run},
            "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": {"type": "random"}}
                         for i in range(len(sizes))],
            "sample": sample}
    return pipeline_from_dict(data, base_dir=tmp_path)


def rollout(rewards: list[float], uids: list[str], taskset_ids: list[int] | None = None, length: int = 4) -> dict:
    b = len(rewards)
    scores = torch.zeros(b, length)
    scores[:, -1] = torch.tensor(rewards)
    out = {"token_level_scores": scores, "response_mask": torch.ones(b, length), "uid": uids}
    if taskset_ids is not None:
        out["taskset_id"] = taskset_ids
    return out


def test_gae_with_a_group_scorer_fails_at_load_naming_all_three(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    write_taskset(tmp_path / "t.jsonl", 4)
    path.write_text('[run]\nbatch_size = 2\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\n[sample]\n'
                    'mechanism = "select"\nestimator = "gae"\n[sample.scorer]\ntype = "group_solve_rate"\n'
                    '[sample.actuator]\ntype = "threshold_band"\nlow = 0.2\nhigh = 0.8\n')
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    [issue] = info.value.issues
    assert issue.path == "sample.estimator"
    assert "group_solve_rate" in issue.message and "needs_groups" in issue.message and "'gae'" in issue.message
    assert str(path) in str(info.value)


def test_sample_table_errors_have_paths(tmp_path: Path) -> None:
    bad = {**SELECT, "mechanism": "reweight", "scorer": {"type": "group_solve_rate", "succes_threshold": 1}}
    with pytest.raises(ConfigError) as info:
        pipeline(tmp_path, bad)
    paths = {i.path for i in info.value.issues}
    assert "sample.scorer.succes_threshold" in paths


def test_mechanism_must_match_the_actuator(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        pipeline(tmp_path, {**SELECT, "mechanism": "reweight"})
    assert any(i.path == "sample.mechanism" for i in info.value.issues)


def test_token_weights_drop_groups_outside_the_band_and_multiply_existing(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, SELECT)
    data = rollout([1, 1, 1, 0, 0, 1], ["a", "a", "b", "b", "c", "c"])
    data["rollout_is_weights"] = torch.full((6, 4), 0.5)
    batch = RolloutBatch.from_dict(data)
    weights = pipe.sample_stage.token_weights(batch, step=0)
    assert weights.shape == (6, 4)
    # group a solves 2/2 (dropped), b 1/2 and c 1/2 kept; existing 0.5 weights multiplied, not overwritten
    assert weights[:, 0].tolist() == [0.0, 0.0, 0.5, 0.5, 0.5, 0.5]
    assert pipe.sample_stage.kept_fraction == pytest.approx(4 / 6)


def test_a_batch_missing_a_required_field_is_named(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, SELECT)
    data = rollout([1, 0], ["a", "a"])
    del data["uid"]
    with pytest.raises(Exception, match="uid"):
        pipe.apply_sample_stage(data, step=0)


def test_mix_moves_scheduler_proportions_toward_the_weaker_taskset(tmp_path: Path) -> None:
    mix = {"mechanism": "mix", "scorer": {"type": "reward"},
           "actuator": {"type": "reward_gap", "window": 3, "temperature": 0.1, "floor": 0.1}}
    pipe = pipeline(tmp_path, mix)
    sched = pipe.scheduler
    shares = []
    for step in range(12):
        tasks = sched.read()
        counts = Counter(t.taskset_id for t in tasks)
        shares.append(counts.get(1, 0) / len(tasks))
        # scripted signal: taskset 0 always solved, taskset 1 solved only after step 6
        rewards = [1.0 if t.taskset_id == 0 or step >= 6 else 0.0 for t in tasks]
        pipe.apply_sample_stage(rollout(rewards, [str(i) for i in range(len(tasks))],
                                        [t.taskset_id for t in tasks]), step=step)
    assert pipe.sample_stage.proportions is not None
    assert np.mean(shares[1:6]) > 0.8  # taskset 1 lags: it gets most of each batch
    assert shares[11] == pytest.approx(0.5, abs=0.13)  # once both are solved (window passed), back to even


def test_sample_state_is_in_the_pipeline_checkpoint(tmp_path: Path) -> None:
    mix = {"mechanism": "mix", "scorer": {"type": "reward"}, "actuator": {"type": "reward_gap", "window": 4}}
    pipe = pipeline(tmp_path, mix)
    tasks = pipe.scheduler.read()
    pipe.apply_sample_stage(rollout([0.0] * len(tasks), [str(i) for i in range(len(tasks))],
                                    [t.taskset_id for t in tasks]), step=0)
    pipe.save_checkpoint(tmp_path / "ckpt")
    other = pipeline(tmp_path, mix)
    other.load_checkpoint(tmp_path / "ckpt")
    assert from_plain_state(other.state_dict()) == from_plain_state(pipe.state_dict())
    changed = pipeline(tmp_path, {**mix, "actuator": {"type": "reward_gap", "window": 5}})
    with pytest.raises(Exception, match="window"):
        changed.load_checkpoint(tmp_path / "ckpt")


def test_no_sample_table_means_no_stage(tmp_path: Path) -> None:
    write_taskset(tmp_path / "t.jsonl", 4)
    pipe = pipeline_from_dict({"run": {"batch_size": 2}, "tasksets": [{"name": "t", "path": "t.jsonl"}]},
                              base_dir=tmp_path)
    assert not pipe.has_sample_stage
    with pytest.raises(ConfigError, match="no \\[sample\\] table"):
        pipe.sample_stage  # noqa: B018


def test_the_stage_runs_only_at_its_scorers_timing(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, SELECT)  # group_solve_rate: post_reward
    data = rollout([1, 0], ["a", "a"])
    assert pipe.apply_sample_stage(data, step=0, timing="post_advantage") is None
    assert pipe.sample_stage.last_action is None
    action = pipe.apply_sample_stage(data, step=0, timing="post_reward")
    assert action is not None and pipe.sample_stage.kept_indices.tolist() == [0, 1]
    with pytest.raises(ValueError, match="timing"):
        pipe.apply_sample_stage(data, step=0, timing="whenever")


def test_columnar_experiences_give_the_same_feedback_as_rows() -> None:
    from flexkit.errors import FeedbackError
    from flexkit.scheduler.feedback import PassRateCalculator

    rng = np.random.default_rng(0)
    tids = rng.integers(0, 3, 200)
    idxs = rng.integers(0, 20, 200)
    rewards = rng.random(200)
    rows = [{"reward": float(r), "taskset_id": int(t), "index": int(i)}
            for r, t, i in zip(rewards, tids, idxs, strict=True)]
    calc = PassRateCalculator()
    from_columns = calc.process({"reward": rewards, "taskset_id": tids, "index": idxs})[1]
    assert plain_feedback(from_columns) == plain_feedback(calc.process(rows)[1])
    assert calc.process({"reward": [], "taskset_id": [], "index": []})[1] == {"selector_metric": {}}
    with pytest.raises(FeedbackError, match="equal lengths"):
        calc.process({"reward": rewards, "taskset_id": tids[:-1], "index": idxs})
    with pytest.raises(FeedbackError, match="one-dimensional"):
        calc.process({"reward": 1.0, "taskset_id": 0, "index": 3})  # one experience is not a batch of columns
    with pytest.raises(FeedbackError, match="integers"):
        calc.process({"reward": rewards, "taskset_id": tids.astype(float), "index": idxs})


def test_pass_rates_with_negative_or_huge_ids_match_the_row_path() -> None:
    from flexkit.scheduler.feedback import _unique_tasks

    rng = np.random.default_rng(1)
    for tids, idxs in [(rng.integers(0, 4, 300), rng.integers(0, 50, 300)),
                       (rng.integers(-2, 3, 300), rng.integers(0, 50, 300)),
                       (rng.integers(0, 3, 300), rng.integers(0, 2**62, 300))]:
        uniq, first, inverse = _unique_tasks(tids.astype(np.int64), idxs.astype(np.int64))
        want = np.unique(np.stack([tids, idxs], axis=1), axis=0, return_index=True, return_inverse=True)
        assert np.array_equal(uniq, want[0]) and np.array_equal(first, want[1])
        assert np.array_equal(inverse, want[2].reshape(-1))
