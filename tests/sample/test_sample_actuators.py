"""Actuators: select / reweight / mix behaviour, the adaptive mixer's window in steps, state round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flexkit.config._converter import make_converter
from flexkit.errors import ConfigError, SampleError
from flexkit.sample import (
    DifficultyBandConfig,
    DifficultyBandReweighter,
    Keep,
    Mix,
    RewardGapConfig,
    RewardGapMixer,
    RolloutBatch,
    SoftmaxConfig,
    SoftmaxReweighter,
    StaticConfig,
    StaticMixer,
    ThresholdBandConfig,
    ThresholdBandFilter,
    TopkFractionConfig,
    TopkFractionFilter,
    Weights,
)


def _batch(b: int = 5, t: int = 3, **extra: object) -> RolloutBatch:
    return RolloutBatch.from_dict({"response_mask": torch.ones(b, t, dtype=torch.int64), **extra})


# -- select -------------------------------------------------------------------------------------------------


def test_threshold_band_is_strict() -> None:
    sel = ThresholdBandFilter(ThresholdBandConfig(low=0.2, high=0.8))
    action = sel(torch.tensor([0.2, 0.25, 0.5, 0.8, 0.0]), _batch(), step=0)
    assert isinstance(action, Keep) and action.indices.tolist() == [1, 2]
    assert sel(torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0]), _batch(), step=0).indices.size == 0


def test_threshold_band_config_checks_order() -> None:
    with pytest.raises(ValueError, match="low must be < high"):
        ThresholdBandConfig(low=0.8, high=0.2)
    with pytest.raises(ConfigError, match="low must be < high"):
        make_converter().structure({"low": 0.5, "high": 0.5}, ThresholdBandConfig)


def test_topk_fraction_ties_by_index_and_at_least_one() -> None:
    scores = torch.tensor([0.5, 0.9, 0.5, 0.5, 0.1])
    sel = TopkFractionFilter(TopkFractionConfig(fraction=0.6))  # ceil(3.0) = 3
    assert sel(scores, _batch(), step=0).indices.tolist() == [0, 1, 2]
    assert TopkFractionFilter(TopkFractionConfig(fraction=0.01))(scores, _batch(), step=0).indices.tolist() == [1]
    low = TopkFractionFilter(TopkFractionConfig(fraction=0.4, largest=False))
    assert low(scores, _batch(), step=0).indices.tolist() == [0, 4]
    assert TopkFractionFilter(TopkFractionConfig(fraction=1.0))(scores, _batch(), step=0).indices.size == 5


def test_nan_scores_are_rejected() -> None:
    with pytest.raises(SampleError, match="finite"):
        TopkFractionFilter()(torch.tensor([0.5, float("nan"), 0, 0, 0]), _batch(), step=0)


# -- reweight -----------------------------------------------------------------------------------------------


def test_softmax_weights_have_mean_one_and_follow_scores() -> None:
    scores = torch.tensor([0.0, 1.0, 2.0, 2.0, -1.0])
    w = SoftmaxReweighter(SoftmaxConfig(temperature=0.5))(scores, _batch(), step=0)
    assert isinstance(w, Weights)
    torch.testing.assert_close(w.weights.mean(), torch.tensor(1.0))
    expected = torch.softmax(scores / 0.5, 0) * 5
    torch.testing.assert_close(w.weights, expected)
    neg = SoftmaxReweighter(SoftmaxConfig(negate=True))(scores, _batch(), step=0).weights
    assert int(neg.argmax()) == 4


def test_softmax_token_scores_mean_one_over_response_tokens() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batch = RolloutBatch.from_dict({"response_mask": mask})
    w = SoftmaxReweighter()(torch.tensor([[0.0, 1.0, 50.0], [2.0, 3.0, 3.0]]), batch, step=0).weights
    assert w[0, 2] == 0 and w[1, 1] == 0 and w[1, 2] == 0
    torch.testing.assert_close(w.sum(), torch.tensor(3.0))


def test_difficulty_band_weights() -> None:
    rw = DifficultyBandReweighter(DifficultyBandConfig(low=0.2, high=0.8, inside=1.0, outside=0.25))
    w = rw(torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0]), _batch(), step=0).weights
    raw = torch.tensor([0.25, 1.0, 1.0, 1.0, 0.25])
    torch.testing.assert_close(w, raw / raw.mean())
    drop = DifficultyBandReweighter(DifficultyBandConfig(outside=0.0))
    assert drop(torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0]), _batch(), step=0).weights.tolist() == [0.0] * 5
    with pytest.raises(ValueError, match="both be 0"):
        DifficultyBandConfig(inside=0.0, outside=0.0)


# -- mix: static ----------------------------------------------------------------------------------------------


def test_static_mixer_keyed_by_names_bound_to_ids() -> None:
    mixer = StaticMixer(StaticConfig(proportions={"code": 1.0, "math": 3.0}))
    mixer.bind(["math", "code"])
    action = mixer(torch.zeros(5), _batch(), step=0)
    assert isinstance(action, Mix) and action.proportions == {0: 0.75, 1: 0.25}
    with pytest.raises(ConfigError) as info:
        StaticMixer(StaticConfig(proportions={"mth": 1.0})).bind(["math", "code"])
    text = str(info.value)
    assert "unknown taskset 'mth' (did you mean 'math'?)" in text
    assert "no proportion for taskset(s) 'math', 'code'" in text
    unbound = StaticMixer(StaticConfig(proportions={"0": 1.0, "1": 1.0}))
    assert unbound(torch.zeros(5), _batch(), step=0).proportions == {0: 0.5, 1: 0.5}
    with pytest.raises(SampleError, match="bind"):
        StaticMixer(StaticConfig(proportions={"math": 1.0}))(torch.zeros(5), _batch(), step=0)


def test_static_config_validation() -> None:
    conv = make_converter()
    with pytest.raises(ConfigError, match="proportion of 'a' must be a finite number >= 0"):
        conv.structure({"proportions": {"a": -1.0}}, StaticConfig)
    with pytest.raises(ConfigError, match="must not all be 0"):
        conv.structure({"proportions": {"a": 0, "b": 0}}, StaticConfig)
    assert conv.structure({"proportions": {"a": 1, "b": 2.5}}, StaticConfig).proportions == {"a": 1, "b": 2.5}


# -- mix: reward_gap ------------------------------------------------------------------------------------------


def _mix_batch(rewards: list[float], tasksets: list[int]) -> tuple[torch.Tensor, RolloutBatch]:
    batch = RolloutBatch.from_dict({"taskset_id": np.array(tasksets)})
    return torch.tensor(rewards), batch


def test_reward_gap_formula() -> None:
    mixer = RewardGapMixer(RewardGapConfig(window=5, temperature=0.5, floor=0.2))
    mixer.bind(["a", "b", "c"])
    scores, batch = _mix_batch([1.0, 0.0, 1.0, 0.5], [0, 0, 1, 1])  # means: a 0.5, b 0.75, c unseen -> 0.625
    p = mixer(scores, batch, step=0).proportions
    gap = np.array([0.25, 0.0, 0.125]) / 0.5
    soft = np.exp(gap) / np.exp(gap).sum()
    np.testing.assert_allclose([p[0], p[1], p[2]], 0.2 / 3 + 0.8 * soft)
    assert abs(sum(p.values()) - 1) < 1e-12


def test_reward_gap_follows_scripted_rewards_and_window_counts_steps() -> None:
    """Taskset 0 is solved, 1 is hard: the mix moves to 1. Then the signal flips; after `window` steps the old
    steps have fallen out and the mix moves to 0. Several calls within one step add up."""
    mixer = RewardGapMixer(RewardGapConfig(window=3, temperature=0.1, floor=0.1))
    mixer.bind(["easy", "hard"])
    history = []
    for step in range(10):
        good, bad = (0.9, 0.1) if step < 5 else (0.1, 0.9)
        scores, batch = _mix_batch([good, good, bad, bad], [0, 0, 1, 1])
        history.append(mixer(scores, batch, step=step).proportions)
    assert history[0][1] > 0.9 and history[4][1] > 0.9
    assert history[5][1] > 0.5  # two old steps still outweigh one new one
    assert history[7][0] > 0.9  # steps 5, 6, 7 only: the old signal is out of the window
    assert min(min(h.values()) for h in history) >= 0.1 / 2  # the floor
    assert [entry["step"] for entry in mixer.state_dict()["window"]] == [7, 8, 9]
    # gaps in the step sequence count as steps: after a jump of 3 only the new step is in the window
    scores, batch = _mix_batch([0.1, 0.9], [0, 1])
    mixer(scores, batch, step=12)
    assert [entry["step"] for entry in mixer.state_dict()["window"]] == [12]
    with pytest.raises(SampleError, match="backwards"):
        mixer(scores, batch, step=11)


def test_reward_gap_domain_scores_and_unbound_growth() -> None:
    mixer = RewardGapMixer()
    p = mixer({0: 1.0, 2: 0.0}, RolloutBatch(), step=0).proportions
    assert set(p) == {0, 1, 2} and p[2] > p[1] > p[0]  # unseen taskset 1 gets the mean of the others
    bound = RewardGapMixer()
    bound.bind(["a"])
    scores, batch = _mix_batch([0.5], [1])
    with pytest.raises(SampleError, match="taskset id 1 is out of range"):
        bound(scores, batch, step=0)
    with pytest.raises(SampleError, match="'taskset_id'"):
        RewardGapMixer()(torch.zeros(2), RolloutBatch.from_dict({"uid": [1, 2]}), step=0)


def test_reward_gap_state_round_trip() -> None:
    a = RewardGapMixer(RewardGapConfig(window=4))
    a.bind(["x", "y", "z"])
    rng = np.random.default_rng(0)
    for step in range(6):
        scores, batch = _mix_batch(rng.random(6).tolist(), rng.integers(0, 3, 6).tolist())
        a(scores, batch, step=step)
    state = json.loads(json.dumps(a.state_dict()))  # plain data
    b = RewardGapMixer(RewardGapConfig(window=4))
    b.bind(["x", "y", "z"])
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    scores, batch = _mix_batch([0.3, 0.7], [0, 2])
    assert a(scores, batch, step=6).proportions == b(scores, batch, step=6).proportions
    with pytest.raises(ValueError, match="inconsistent"):
        b.load_state_dict({**state, "window": [{"step": 0, "sums": [1.0], "counts": [1.0, 2.0]}]})


def test_stateless_actuators_have_empty_state() -> None:
    for act in (ThresholdBandFilter(), TopkFractionFilter(), SoftmaxReweighter(), DifficultyBandReweighter(),
                StaticMixer(StaticConfig(proportions={"a": 1.0}))):
        assert act.state_dict() == {}
        act.load_state_dict({})


def test_action_types_are_checked() -> None:
    with pytest.raises(SampleError, match="non-negative"):
        Weights(torch.tensor([1.0, -1.0]))
    with pytest.raises(SampleError, match="float tensor"):
        Weights(torch.tensor([1, 2]))
    with pytest.raises(SampleError, match="integers"):
        Keep(np.array([0.5]))
    assert Keep([3, 1, 3]).indices.tolist() == [1, 3]
    assert Mix({1: 3, 0: 1}).proportions == {0: 0.25, 1: 0.75}
    assert Mix({0: 1.0}).as_list(3) == [1.0, 0.0, 0.0]
    with pytest.raises(SampleError, match="all be zero"):
        Mix({0: 0.0})
