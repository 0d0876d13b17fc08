"""The math of the sample-stage algorithms (docs/algorithms.md): DAPO's zero-variance filter with its refill
signal, Online Difficulty Filtering's pass-rate band, SEC's TD(0) bandit mixer and ODM's EXP3 mixer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from flexkit.config._converter import make_converter
from flexkit.errors import ConfigError
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.run._runner import run_pipeline
from flexkit.sample import (
    CategoryBandit,
    CategoryBanditConfig,
    Exp3Config,
    Exp3Mixer,
    GroupKeep,
    GroupRewardRangeScorer,
    GroupRewardStdScorer,
    Mix,
    PassRateBand,
    PassRateBandConfig,
    RolloutBatch,
    SampleStage,
    ZeroVarianceFilter,
    ZeroVarianceFilterConfig,
)
from flexkit.sample.actuators.exp3 import exploration
from tests.fixtures import EXAMPLES, crash_run, without_clock_text


def _groups(rewards: list[list[float]], taskset_ids: list[int] | None = None) -> RolloutBatch:
    """A batch of groups (one list of rewards per group); ``taskset_ids`` per group."""
    flat = [r for g in rewards for r in g]
    uid = [i for i, g in enumerate(rewards) for _ in g]
    data = {"token_level_scores": torch.tensor(flat, dtype=torch.float32)[:, None],
            "response_mask": torch.ones(len(flat), 1), "uid": np.asarray(uid)}
    if taskset_ids is not None:
        data["taskset_id"] = np.asarray([taskset_ids[i] for i in uid])
    return RolloutBatch.from_dict(data)


# -- group_reward_range + zero_variance_filter (DAPO) -------------------------------------------------------


def test_group_reward_range_is_exactly_zero_for_equal_rewards() -> None:
    batch = _groups([[0.1] * 7, [0.3, 0.7, 0.5], [1.0, 1.0]])
    scores = GroupRewardRangeScorer()(batch, step=0)
    assert scores[:7].tolist() == [0.0] * 7
    assert scores[7:10].tolist() == pytest.approx([0.4] * 3) and scores[10:].tolist() == [0.0, 0.0]


def test_zero_variance_filter_keeps_mixed_groups_and_reports_the_refill() -> None:
    stage = SampleStage(GroupRewardRangeScorer(), ZeroVarianceFilter(), mechanism="select", estimator="grpo")
    action = stage.run(_groups([[1, 1, 1], [0, 1, 0], [0, 0, 0], [1, 0, 1]]), step=0)
    assert isinstance(action, GroupKeep)
    assert action.indices.tolist() == [3, 4, 5, 9, 10, 11]
    assert (action.kept_groups, action.total_groups, action.groups_needed, action.refill) == (2, 4, 2, True)
    refill = stage.run(_groups([[0, 1], [1, 1], [1, 0]]), step=0)  # a refill batch at the same step
    assert (refill.kept_groups, refill.kept_so_far, refill.groups_needed, refill.rounds) == (2, 4, 0, 2)
    assert not refill.refill
    assert stage.actuator.count.groups_passed == 4 and stage.actuator.count.groups_drawn == 7
    assert stage.actuator.metrics() == {"flexkit/sample/kept_groups": 4.0, "flexkit/sample/groups_needed": 0.0,
                                        "flexkit/sample/filter_rounds": 2.0}  # the step's count, both calls
    nxt = stage.run(_groups([[1, 1], [0, 0]]), step=1)  # a new step starts a new count
    assert (nxt.kept_groups, nxt.groups_needed, nxt.rounds, nxt.refill) == (0, 2, 1, True)


def test_zero_variance_filter_caps_the_rounds_and_uses_target_groups() -> None:
    act = ZeroVarianceFilter(ZeroVarianceFilterConfig(target_groups=3, max_rounds=2))
    batch = _groups([[1, 1], [0, 1]])
    scores = GroupRewardRangeScorer()(batch, step=5)
    first = act(scores, batch, step=5)
    assert (first.groups_needed, first.refill) == (2, True)
    second = act(scores, batch, step=5)
    assert (second.groups_needed, second.rounds, second.refill) == (1, 2, False)  # cap reached


def test_zero_variance_filter_with_std_scores_and_a_spread_threshold() -> None:
    batch = _groups([[0.0, 0.1], [0.0, 1.0]])
    std = GroupRewardStdScorer()(batch, step=0)
    assert ZeroVarianceFilter(ZeroVarianceFilterConfig(min_spread=0.1))(std, batch, step=0).indices.tolist() == [2, 3]


def test_group_filter_state_round_trip_continues_the_count() -> None:
    act = ZeroVarianceFilter()
    batch = _groups([[1, 0], [1, 1], [0, 0]])
    scores = GroupRewardRangeScorer()(batch, step=2)
    act(scores, batch, step=2)
    fresh = ZeroVarianceFilter()
    fresh.load_state_dict(json.loads(json.dumps(act.state_dict())))
    assert fresh(scores, batch, step=2).kept_so_far == act(scores, batch, step=2).kept_so_far == 2


# -- pass_rate_band (Online Difficulty Filtering) -----------------------------------------------------------


def test_pass_rate_band_is_closed_by_default_and_can_be_open() -> None:
    rates = torch.tensor([0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    batch = _groups([[0, 1]] * 5)
    closed = PassRateBand()(rates, batch, step=0)
    assert closed.indices.tolist() == [0, 1, 2, 3, 4, 5] and closed.groups_needed == 2
    opened = PassRateBand(PassRateBandConfig(inclusive=False))(rates, batch, step=0)
    assert opened.indices.tolist() == [2, 3]


def test_pass_rate_band_config_refuses_an_empty_band() -> None:
    with pytest.raises(ValueError, match="band is empty"):
        PassRateBandConfig(low=0.8, high=0.2)
    with pytest.raises(ConfigError, match="band is empty"):
        make_converter().structure({"low": 0.5, "high": 0.5, "inclusive": False}, PassRateBandConfig)


# -- category_bandit (SEC) ----------------------------------------------------------------------------------


def test_category_bandit_td0_and_boltzmann() -> None:
    mixer = CategoryBandit(CategoryBanditConfig(learning_rate=0.5, temperature=0.5))
    mixer.bind(["a", "b", "c"])
    batch = _groups([[0, 1], [1, 1]], taskset_ids=[0, 1])  # per-sample scores; taskset 2 absent
    action = mixer(torch.tensor([1.0, 0.6, 0.2, 0.2]), batch, step=0)
    np.testing.assert_allclose(mixer.values, [0.5 * 0.8, 0.5 * 0.2, 0.0])
    logits = np.array([0.4, 0.1, 0.0]) / 0.5
    assert isinstance(action, Mix)
    np.testing.assert_allclose(action.as_list(3), np.exp(logits) / np.exp(logits).sum())
    mixer({0: 0.0, 2: 1.0}, batch, step=1)  # domain scores: Q ← Q + α(r − Q)
    np.testing.assert_allclose(mixer.values, [0.2, 0.1, 0.5])


def test_category_bandit_floor_and_state() -> None:
    mixer = CategoryBandit(CategoryBanditConfig(temperature=0.01, floor=0.2))
    mixer.bind(["a", "b"])
    props = mixer({0: 1.0, 1: 0.0}, _groups([[1]]), step=0).proportions
    assert props[1] == pytest.approx(0.1) and props[0] == pytest.approx(0.9)
    fresh = CategoryBandit(CategoryBanditConfig(temperature=0.01, floor=0.2))
    fresh.bind(["a", "b"])
    fresh.load_state_dict(json.loads(json.dumps(mixer.state_dict())))
    assert fresh.current_proportions() == mixer.current_proportions()


# -- exp3 (Online Data Mixing) ------------------------------------------------------------------------------


def test_exp3_exploration_schedule() -> None:
    assert exploration(4, 0) == 0.25 and exploration(1, 5) == 0.0
    assert exploration(4, 100) == pytest.approx(math.sqrt(math.log(4) / 400))
    assert exploration(4, 1) == 0.25  # sqrt(ln4/4) = 0.59 > 1/4


def test_exp3_importance_weighted_update_and_policy() -> None:
    mixer = Exp3Mixer(Exp3Config(smoothing=0.5))
    mixer.bind(["a", "b"])
    batch = _groups([[1, 1, 1], [0]], taskset_ids=[0, 1])  # 3 samples of taskset 0, 1 of taskset 1
    first = mixer(torch.tensor([1.0, 1.0, 1.0, 2.0]), batch, step=0)
    # π_0 uniform; x_0 = (3/4)/0.5 · 1 = 1.5, x_1 = (1/4)/0.5 · 2 = 1.0; R̂ = 0.5·0 + 0.5·x
    np.testing.assert_allclose(mixer.values, [0.75, 0.5])
    eps1, eps0 = exploration(2, 1), exploration(2, 0)
    soft = np.exp(eps0 * mixer.values) / np.exp(eps0 * mixer.values).sum()
    np.testing.assert_allclose(first.as_list(2), (1 - 2 * eps1) * soft + eps1)
    assert first.as_list(2) == [0.5, 0.5]  # ε_1 = 1/K: still uniform
    for step in range(1, 200):
        last = mixer({0: 1.0, 1: 0.0}, batch, step=step)
    assert 0.5 < last.proportions[0] < 0.55  # the moving average keeps R̂ ≈ R/π: ε·R̂ stays small
    summed = Exp3Mixer(Exp3Config(estimate="sum"))
    summed.bind(["a", "b"])
    for step in range(200):
        props = summed({0: 1.0, 1: 0.0}, batch, step=step).proportions
    eps = exploration(2, 200)
    assert props[0] > 0.9 and props[1] >= eps  # textbook EXP3: the rewarding arm takes over, ε kept
    fresh = Exp3Mixer(Exp3Config(smoothing=0.5))
    fresh.bind(["a", "b"])
    fresh.load_state_dict(json.loads(json.dumps(mixer.state_dict())))
    assert fresh({0: 1.0}, batch, step=300).proportions == mixer({0: 1.0}, batch, step=300).proportions


# -- in a pipeline ------------------------------------------------------------------------------------------




def crash_and_resume(data: dict, tmp_path: Path) -> tuple[str, str]:
    """Metrics of an uninterrupted run and of one that crashed at step 4 and resumed from its checkpoint, as
    written but for their wall clock (``flexkit/run/seconds``)."""
    run_pipeline(pipeline_from_dict(data), run_dir=tmp_path / "full", progress=None)
    crash_run(pipeline_from_dict(data), tmp_path / "broken", 4)
    run_pipeline(pipeline_from_dict(data), run_dir=tmp_path / "broken", resume=True, progress=None)
    return (without_clock_text((tmp_path / "full" / "metrics.jsonl").read_text()),
            without_clock_text((tmp_path / "broken" / "metrics.jsonl").read_text()))


def _simulated(tmp_path: Path, selector: dict, sample: dict | None = None, tasksets: int = 1) -> dict:
    data = {
        "run": {"batch_size": 8, "seed": 0, "total_steps": 6, "eval_every": 3, "checkpoint_every": 3},
        "tasksets": [{"name": f"t{i}", "storage_type": "simulated", "size": 50, "levels": [i + 1],
                      "selector": dict(selector)} for i in range(tasksets)],
        "trainer": {"type": "simulator", "group_size": 4},
    }
    if sample is not None:
        data["sample"] = sample
    return data


@pytest.mark.parametrize("selector", [
    {"type": "learnability"}, {"type": "thompson_target"}, {"type": "zero_variance_skip"},
    {"type": "target_difficulty", "feature_keys": ["weak_pass_rate"], "harder": "lower"},
    {"type": "prioritized_replay"},
])
def test_selectors_run_and_resume_in_a_pipeline(tmp_path: Path, selector: dict) -> None:
    full, resumed = crash_and_resume(_simulated(tmp_path, selector), tmp_path)
    assert full == resumed and full.count("\n") == 7  # 6 steps and the evaluation before training


@pytest.mark.parametrize("sample", [
    {"mechanism": "select", "scorer": {"type": "group_reward_range"}, "actuator": {"type": "zero_variance_filter"}},
    {"mechanism": "select", "scorer": {"type": "group_solve_rate"}, "actuator": {"type": "pass_rate_band"}},
    {"mechanism": "mix", "scorer": {"type": "advantage_magnitude"}, "actuator": {"type": "category_bandit"}},
    {"mechanism": "mix", "scorer": {"type": "advantage_magnitude"}, "actuator": {"type": "exp3"}},
])
def test_sample_algorithms_run_and_resume_in_a_pipeline(tmp_path: Path, sample: dict) -> None:
    full, resumed = crash_and_resume(_simulated(tmp_path, {"type": "random"}, sample, tasksets=2), tmp_path)
    assert full == resumed and full.count("\n") == 7  # 6 steps and the evaluation before training
    if sample["mechanism"] == "mix":
        assert "flexkit/sample/proportion/1" in full
    else:
        assert "flexkit/sample/kept_fraction" in full


@pytest.mark.parametrize("name", ["mixing.toml", "dynamic_sampling.toml"])
def test_algorithm_examples_load(name: str) -> None:
    from flexkit.pipeline._pipeline import load_pipeline

    pipe = load_pipeline(EXAMPLES / "algorithms" / name)
    assert pipe.has_sample_stage and pipe.scheduler.total_steps == 400
