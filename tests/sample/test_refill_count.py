"""A step's refill accounting in one record (:class:`flexkit.sample._refill_count.RefillCount`), and the group
filter that keeps it as its state."""

from __future__ import annotations

import numpy as np
import torch

from flexkit._metric_names import FILTER_ROUNDS, KEPT_FRACTION, KEPT_GROUPS
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._refill_count import RefillCount
from flexkit.sample.actuators.zero_variance_filter import ZeroVarianceFilter


def test_rounds_add_up_and_the_surplus_is_what_passed_but_is_not_trained_on() -> None:
    count = RefillCount.start(7, target_groups=4)
    count = count.add_round(groups=4, passed=1, responses=16, responses_kept=4, tokens=20)
    assert (count.groups_needed, count.surplus_dropped) == (3, 0)
    count = count.add_round(groups=4, passed=4, kept=3, responses=16, responses_kept=12, tokens=18)
    assert (count.step, count.rounds, count.groups_drawn, count.groups_passed, count.groups_kept) == (7, 2, 8, 5, 4)
    assert (count.groups_needed, count.surplus_dropped, count.responses, count.tokens) == (0, 1, 32, 38)
    assert count.metrics() == {KEPT_GROUPS: 4, FILTER_ROUNDS: 2, KEPT_FRACTION: 0.5}
    assert isinstance(count.metrics()[KEPT_GROUPS], int)  # whole numbers stay whole in metrics.jsonl


def test_weighted_responses_have_no_kept_fraction() -> None:
    count = RefillCount(step=0).add_round(groups=2, passed=2, responses=8)
    assert count.kept_fraction is None and KEPT_FRACTION not in count.metrics()


def _batch(rewards: list[list[float]]) -> tuple[torch.Tensor, RolloutBatch]:
    """Per-sample group spreads (the scorer's output) and the batch of groups with these rewards."""
    flat = np.array([r for group in rewards for r in group])
    uid = np.repeat(np.arange(len(rewards)), [len(g) for g in rewards])
    spread = np.array([max(g) - min(g) for g in rewards])[uid]
    return torch.from_numpy(spread), RolloutBatch.from_dict({"uid": uid, "reward": flat})


def test_regression_a_group_filter_state_saved_before_the_count_resumes_the_same_step() -> None:
    """The filter's state keeps the layout it had (step, target, kept, rounds): a checkpoint written before
    :class:`RefillCount` loads, and a call at the same step goes on counting from it."""
    filt = ZeroVarianceFilter()
    filt.load_state_dict({"step": 3, "target": 4, "kept": 2, "rounds": 1})
    assert filt.state_dict() == {"step": 3, "target": 4, "kept": 2, "rounds": 1}
    action = filt.act(*_batch([[0, 1], [1, 1], [1, 0]]), step=3)
    assert (action.kept_groups, action.kept_so_far, action.groups_needed, action.rounds) == (2, 4, 0, 2)
    assert filt.state_dict() == {"step": 3, "target": 4, "kept": 4, "rounds": 2}
    assert filt.metrics() == {KEPT_GROUPS: 4.0, "flexkit/sample/groups_needed": 0.0, FILTER_ROUNDS: 2.0}
