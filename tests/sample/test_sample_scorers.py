"""Scorers: the built-ins against naive references, class-definition checks, requires, compatibility."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.errors import ConfigError, SampleError
from flexkit.plugins._manager import PluginHost
from flexkit.sample import (
    GROUP_ESTIMATORS,
    Actuator,
    AdvantageMagnitudeConfig,
    AdvantageMagnitudeScorer,
    GroupRewardStdScorer,
    GroupSolveRateConfig,
    GroupSolveRateScorer,
    RewardConfig,
    RewardGapMixer,
    RewardScorer,
    RolloutBatch,
    Scorer,
    SoftmaxReweighter,
    ThresholdBandFilter,
    TokenProbScorer,
    check_compatible,
    register_group_estimator,
)

# -- random grouped batches ---------------------------------------------------------------------------------


@st.composite
def grouped_batches(draw: Any) -> dict[str, Any]:
    """Random group sizes, string uids, shuffled order, random masks, token scores in quarters (exact sums)."""
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=10))
    names = draw(st.lists(st.text(min_size=1, max_size=6), min_size=len(sizes), max_size=len(sizes), unique=True))
    t = draw(st.integers(1, 6))
    uid = [name for name, size in zip(names, sizes, strict=True) for _ in range(size)]
    b = len(uid)
    order = draw(st.permutations(range(b)))
    uid = [uid[i] for i in order]
    quarters = draw(st.lists(st.integers(-4, 8), min_size=b * t, max_size=b * t))
    mask = draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t))
    return {
        "token_level_scores": torch.tensor(quarters, dtype=torch.float32).reshape(b, t) / 4,
        "response_mask": torch.tensor(mask).reshape(b, t).to(torch.int64),
        "uid": np.array(uid, dtype=object),
    }


def naive_solve_rate(data: dict[str, Any], threshold: float) -> list[float]:
    """DataFlex-RL's loop, in plain Python: per-sequence sum, success, per-group fraction."""
    scores, mask, uid = data["token_level_scores"].tolist(), data["response_mask"].tolist(), list(data["uid"])
    solved = [sum(s * m for s, m in zip(row, mrow, strict=True)) > threshold for row, mrow in zip(scores, mask,
                                                                                                    strict=True)]
    out = []
    for g in uid:
        members = [solved[i] for i in range(len(uid)) if uid[i] == g]
        out.append(sum(members) / len(members))
    return out


@settings(max_examples=80, deadline=None)
@given(data=grouped_batches(), threshold=st.sampled_from([-0.25, 0.0, 0.5, 1.0, 1.25]))
def test_group_solve_rate_matches_naive_reference(data: dict[str, Any], threshold: float) -> None:
    scorer = GroupSolveRateScorer(GroupSolveRateConfig(success_threshold=threshold))
    got = scorer(RolloutBatch.from_dict(data), step=0)
    assert got.shape == (len(data["uid"]),)
    torch.testing.assert_close(got, torch.tensor(naive_solve_rate(data, threshold)), rtol=0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(data=grouped_batches())
def test_group_reward_std_matches_numpy(data: dict[str, Any]) -> None:
    got = GroupRewardStdScorer()(RolloutBatch.from_dict(data), step=0)
    rewards = (data["token_level_scores"].double() * data["response_mask"]).sum(-1).numpy()
    uid = list(data["uid"])
    expected = [np.std([r for r, u in zip(rewards, uid, strict=True) if u == g]) for g in uid]  # ddof 0
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)


# -- the other built-ins ----------------------------------------------------------------------------------


def _batch() -> RolloutBatch:
    return RolloutBatch.from_dict({
        "rm_scores": torch.tensor([[0.0, 1.0, 9.0], [0.5, 0.0, 0.0], [1.0, 1.0, 1.0]]),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]]),
        "advantages": torch.tensor([[-2.0, 1.0, 100.0], [0.5, -0.5, 3.0], [4.0, 7.0, 7.0]]),
        "old_log_probs": torch.log(torch.tensor([[0.5, 0.25, 1.0], [1.0, 0.5, 0.5], [0.125, 1.0, 1.0]])),
        "uid": ["p", "p", "q"],
    })


def test_reward_scorer_and_reward_key() -> None:
    b = _batch()
    assert RewardScorer()(b, step=0).tolist() == [1.0, 0.5, 1.0]
    b["my_reward"] = torch.tensor([3.0, 2.0, 1.0])
    scorer = RewardScorer(RewardConfig(reward_key="my_reward"))
    assert scorer.requires[0] == "my_reward"
    assert scorer(b, step=0).tolist() == [3.0, 2.0, 1.0]


@pytest.mark.parametrize(("reduce", "expected"), [("mean", [1.5, 4 / 3, 4.0]), ("sum", [3.0, 4.0, 4.0]),
                                                  ("max", [2.0, 3.0, 4.0])])
def test_advantage_magnitude(reduce: str, expected: list[float]) -> None:
    scorer = AdvantageMagnitudeScorer(AdvantageMagnitudeConfig(reduce=reduce))  # type: ignore[arg-type]
    assert scorer.timing == "post_advantage"
    torch.testing.assert_close(scorer(_batch(), step=0), torch.tensor(expected))


def test_token_prob() -> None:
    got = TokenProbScorer()(_batch(), step=0)
    assert got.shape == (3, 3) and TokenProbScorer.granularity == "token"
    torch.testing.assert_close(got[0, :2], torch.tensor([0.5, 0.25]))


def test_missing_required_field_is_named_at_first_call() -> None:
    b = RolloutBatch.from_dict({"rm_scores": torch.ones(2, 2), "response_mask": torch.ones(2, 2)})
    with pytest.raises(SampleError, match=r"scorer 'group_solve_rate' \(GroupSolveRateScorer\) requires .*'uid'"):
        GroupSolveRateScorer()(b, step=0)
    with pytest.raises(SampleError, match=r"'advantages'"):
        AdvantageMagnitudeScorer()(b, step=0)


def test_wrong_output_shape_is_rejected() -> None:
    class Bad(Scorer):
        granularity = "response"

        def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
            return torch.zeros(batch.batch_size + 1)

    with pytest.raises(SampleError, match=r"must return shape \(3,\), got \(4,\)"):
        Bad()(_batch(), step=0)


# -- class definition checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("attr", "value", "message"), [
    ("timing", "post_rewards", "timing = 'post_rewards' is invalid; allowed values: pre_rollout, post_reward"),
    ("granularity", "sample", "granularity = 'sample' is invalid; allowed values: domain, prompt"),
    ("needs_groups", "yes", "needs_groups = 'yes' is invalid"),
    ("requires", "uid", "requires = 'uid' is invalid"),
])
def test_invalid_scorer_attributes_fail_at_class_definition(attr: str, value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("(", r"\(")):
        type("Broken", (Scorer,), {attr: value, "score": lambda self, batch, *, step: None})


def test_invalid_actuator_attributes_fail_at_class_definition() -> None:
    with pytest.raises(TypeError, match="mechanism = 'drop' is invalid; allowed values: select, reweight, mix"):
        type("BadMech", (Actuator,), {"mechanism": "drop"})
    with pytest.raises(TypeError, match="accepts = \\('sample',\\) is invalid"):
        type("BadAccepts", (Actuator,), {"accepts": ("sample",)})


def test_needs_groups_adds_uid_to_requires() -> None:
    class G(Scorer):
        requires = ("rm_scores",)
        needs_groups = True

        def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
            return torch.zeros(batch.batch_size)

    assert G.requires == ("rm_scores", "uid")


# -- compatibility ----------------------------------------------------------------------------------------------


def test_needs_groups_with_gae_is_rejected_naming_scorer_flag_and_estimator() -> None:
    with pytest.raises(ConfigError) as info:
        check_compatible(GroupSolveRateScorer, ThresholdBandFilter, "gae", "select")
    text = str(info.value)
    assert "group_solve_rate" in text and "needs_groups" in text and "'gae'" in text
    assert text.startswith("sample.estimator:")
    check_compatible(GroupSolveRateScorer, ThresholdBandFilter, "grpo", "select")
    check_compatible(RewardScorer(), ThresholdBandFilter(), "gae", "select")  # instances, no groups needed


def test_group_estimators_are_extensible() -> None:
    assert {"grpo", "grpo_passk", "rloo", "opo", "gdpo"} <= GROUP_ESTIMATORS
    with pytest.raises(ConfigError):
        check_compatible(GroupSolveRateScorer, ThresholdBandFilter, "my_group_est", "select")
    register_group_estimator("my_group_est")
    try:
        check_compatible(GroupSolveRateScorer, ThresholdBandFilter, "my_group_est", "select")
    finally:
        GROUP_ESTIMATORS.discard("my_group_est")


def test_granularity_and_mechanism_mismatches_are_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        check_compatible(TokenProbScorer, ThresholdBandFilter, "grpo", "reweight")
    issues = {i.path: i.message for i in info.value.issues}
    assert "accepts prompt, response scores, but scorer 'token_prob'" in issues["sample.actuator"]
    assert "is a 'select' actuator" in issues["sample.mechanism"]
    check_compatible(TokenProbScorer, SoftmaxReweighter, "gae", "reweight")
    with pytest.raises(ConfigError, match="unknown mechanism 'mixx' \\(did you mean 'mix'\\?\\)"):
        check_compatible(RewardScorer, RewardGapMixer, "grpo", "mixx")


# -- plugin registration ----------------------------------------------------------------------------------------


def test_builtins_register_through_the_hooks() -> None:
    import flexkit.plugins.builtins

    host = PluginHost()
    assert host.add(flexkit.plugins.builtins, name="flexkit.plugins.builtins", distribution="flexkit-rft")
    assert host.names("scorer") == ["advantage_magnitude", "group_reward_range", "group_reward_std",
                                    "group_solve_rate", "reward", "token_prob"]
    assert host.names("actuator") == ["advantage_reweight", "category_bandit", "difficulty_band", "dump_ucb",
                                      "exp3", "gfpo", "max_variance", "pass_rate_band", "per_advantage",
                                      "reward_gap", "softmax", "static", "threshold_band", "topk_fraction", "tscl",
                                      "zero_variance_filter"]
    scorer = host.component("scorer", "group_solve_rate").build()
    assert isinstance(scorer, GroupSolveRateScorer) and scorer.config.success_threshold == 0.5


def test_import_does_not_import_torch() -> None:
    code = "import sys, flexkit.sample, flexkit.sample._weights; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
