"""The sample stage's batch entry points (``SampleStage.run``, ``SampleStage.token_weights``,
``Pipeline.apply_sample_stage``) take a plain mapping of tensors as well as a ``RolloutBatch``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flexkit import pipeline_from_dict
from flexkit.sample import GroupSolveRateScorer, RolloutBatch, SampleStage, ThresholdBandConfig, ThresholdBandFilter
from flexkit.sample.actuators.zero_variance_filter import ZeroVarianceFilter
from flexkit.sample.scorers.group_reward_range import GroupRewardRangeScorer


def _fields() -> dict[str, object]:
    """Two groups of four: group 0 solved 1/4 (kept by the band), group 1 solved 4/4 (dropped)."""
    return {"token_level_scores": torch.tensor([[1.0], [0], [0], [0], [1], [1], [1], [1]]),
            "response_mask": torch.ones(8, 1), "uid": np.repeat([0, 1], 4)}


def _stage() -> SampleStage:
    return SampleStage(GroupSolveRateScorer(), ThresholdBandFilter(ThresholdBandConfig(low=0.2, high=0.8)),
                       mechanism="select", estimator="grpo")


def test_token_weights_of_a_plain_dict_equal_those_of_its_batch() -> None:
    from_dict = _stage().token_weights(_fields(), step=0)
    from_batch = _stage().token_weights(RolloutBatch.from_dict(_fields()), step=0)
    assert torch.equal(from_dict, from_batch)
    assert from_dict[:, 0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]


def test_run_takes_a_plain_dict() -> None:
    assert _stage().run(_fields(), step=0).indices.tolist() == [0, 1, 2, 3]


def test_the_same_dict_runs_the_stage_once_per_step() -> None:
    """A group filter counts kept groups per step: the dict passed to apply_sample_stage and then to
    token_weights is one batch, so the stage runs once, even after the trainer adds a field."""
    pipe = pipeline_from_dict({
        "run": {"batch_size": 2}, "tasksets": [{"name": "t", "storage_type": "simulated", "size": 8}],
        "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"},
                   "actuator": {"type": "zero_variance_filter"}}})
    assert isinstance(pipe.sample_stage.scorer, GroupRewardRangeScorer)
    assert isinstance(pipe.sample_stage.actuator, ZeroVarianceFilter)
    fields = _fields()
    action = pipe.apply_sample_stage(fields, step=0, timing="post_reward")
    assert action.kept_so_far == 1 and action.rounds == 1
    fields["advantages"] = torch.zeros(8, 1)
    weights = pipe.sample_stage.token_weights(fields, step=0)
    assert pipe.sample_stage.last_action.rounds == 1  # not run again
    assert weights[:, 0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    pipe.sample_stage.token_weights(fields, step=1)  # a new step runs it again
    assert pipe.sample_stage.last_action.rounds == 1 and pipe.sample_stage.last_step == 1


def test_a_dict_refilled_with_another_batch_size_is_a_new_batch() -> None:
    stage, fields = _stage(), _fields()
    stage.token_weights(fields, step=0)
    fields.update({"token_level_scores": torch.tensor([[1.0], [0]]), "response_mask": torch.ones(2, 1),
                   "uid": np.array([0, 0])})
    assert stage.token_weights(fields, step=1)[:, 0].tolist() == [1, 1]


@pytest.mark.parametrize("entry", ["run", "token_weights"])
def test_anything_else_is_a_type_error_naming_from_dict(entry: str) -> None:
    with pytest.raises(TypeError, match=rf"SampleStage\.{entry} needs a flexkit\.RolloutBatch.*got list.*"
                                        r"RolloutBatch\.from_dict"):
        getattr(_stage(), entry)([1, 2, 3], step=0)
