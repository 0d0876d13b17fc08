"""The default feedback operator reads a ``RolloutBatch`` itself: a trainer hands over one object, and a
``Rollout`` without experiences feeds back from its batch's ``taskset_id``, ``index`` and rewards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flexkit import FeedbackError, SampleError
from flexkit.plugins._contract import Rollout
from flexkit.sample import RolloutBatch
from flexkit.scheduler.feedback import PassRateCalculator
from tests.fixtures import plain_feedback


def _batch() -> RolloutBatch:
    scores = torch.zeros(6, 3)
    scores[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    return RolloutBatch.from_dict({"token_level_scores": scores, "response_mask": torch.ones(6, 3),
                                   "uid": np.repeat(np.arange(3), 2), "taskset_id": np.array([1, 1, 0, 0, 1, 1]),
                                   "index": np.array([4, 4, 2, 2, 0, 0])})


def test_the_operator_reads_a_batch_as_its_columns() -> None:
    batch = _batch()
    out, metrics = PassRateCalculator().process(batch)
    assert out is batch
    columns = {"reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0], "taskset_id": [1, 1, 0, 0, 1, 1], "index": [4, 4, 2, 2, 0, 0]}
    assert plain_feedback(metrics) == plain_feedback(PassRateCalculator().process(columns)[1])
    assert plain_feedback(metrics) == {"selector_metric": {1: {"indices": [4, 0], "values": [0.5, 0.0]},
                                                           0: {"indices": [2], "values": [1.0]}}}


def test_a_rollout_without_experiences_feeds_back_a_copy_of_its_batch() -> None:
    batch = _batch()
    columns = Rollout(batch=batch).feedback_experiences()
    batch["token_level_scores"][:] = 0.0  # in place, as a trainer's compute_advantages might
    batch["index"][:] = 9
    assert columns["reward"].dtype == np.float64
    assert columns["reward"].tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert columns["index"].tolist() == [4, 4, 2, 2, 0, 0]
    given = [{"reward": 1.0, "taskset_id": 0, "index": 1}]
    assert Rollout(batch=batch, experiences=given).feedback_experiences() is given


def test_feeding_back_from_a_batch_needs_its_task_fields() -> None:
    with pytest.raises(FeedbackError, match="needs a RolloutBatch"):
        Rollout(batch={"token_level_scores": torch.ones(2, 1)}).feedback_experiences()
    batch = RolloutBatch.from_dict({"token_level_scores": torch.ones(2, 1), "response_mask": torch.ones(2, 1)})
    with pytest.raises(SampleError, match="'taskset_id'"):
        PassRateCalculator().process(batch)
