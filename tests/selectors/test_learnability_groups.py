"""learnability with a grouping column: per-group pass rates learned online steer unseen tasks."""

from __future__ import annotations

import numpy as np
import pytest

from flexkit import ConfigError, make_selector


def _selector(**params):
    levels = np.repeat([1.0, 2.0, 3.0], 100)
    return make_selector("learnability", size=300, seed=1, features={"level": levels}, **params)


def test_unseen_tasks_take_their_group_rate() -> None:
    sel = _selector(candidates=3, group_rate=1.0)
    sel.feedback(np.array([0, 1, 100, 101, 200]), np.array([1.0, 1.0, 0.5, 0.25, 0.0]))
    p = sel.estimates(np.array([5, 150, 250]))  # never observed: their group's mean
    assert p.tolist() == pytest.approx([1.0, 0.375, 0.0])
    seen = sel.estimates(np.array([100]))  # observed: shrunk toward its group, not the pool
    assert seen[0] == pytest.approx((0.5 + 0.375) / 2)
    picked = sel.get_indices(30)
    assert ((picked >= 100) & (picked < 200)).all()  # the whole batch from the only learnable group


def test_group_rates_are_moving_averages_and_fall_back_to_the_pool() -> None:
    sel = _selector(group_rate=0.5, pool_rate=1.0)
    sel.feedback(np.array([0, 100]), np.array([1.0, 0.0]))
    sel.feedback(np.array([1]), np.array([0.0]))
    assert sel.groups.values[:2].tolist() == [0.5, 0.0]  # level 1: 0.5·1 + 0.5·0; level 2 untouched
    assert sel.estimates(np.array([250]))[0] == pytest.approx(0.0)  # level 3 unseen: the pool's rate (last batch)


def test_resume_with_groups_is_exact_and_checks_the_saved_rates() -> None:
    sel = _selector(tau=0.5)
    for _ in range(3):
        picked = sel.get_indices(20)
        sel.feedback(picked, (picked < 150).astype(float) * 0.5)
    other = _selector(tau=0.5)
    other.load_state_dict(sel.state_dict())
    assert other.get_indices(20).tolist() == sel.get_indices(20).tolist()
    broken = sel.state_dict()
    broken["groups"] = {"values": np.array([0.5, 2.0, -1.0])}
    with pytest.raises(ValueError, match="above"):
        other.load_state_dict(broken)


def test_at_most_one_grouping_column() -> None:
    with pytest.raises(ConfigError, match="at most one grouping column"):
        make_selector("learnability", size=10, features={"a": np.zeros(10), "b": np.zeros(10)})
