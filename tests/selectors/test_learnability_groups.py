"""learnability with a grouping column: per-group pass rates learned online steer unseen tasks."""

from __future__ import annotations

import numpy as np
import pytest

from flexkit import make_selector


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


def test_several_grouping_columns_pool_by_their_combinations() -> None:
    levels = np.repeat([1.0, 2.0], 100)
    source = np.tile(["a", "b"], 100)
    sel = make_selector("learnability", size=200, seed=1, features={"level": levels, "source": source},
                        group_rate=1.0)
    assert sel.groups.values.shape == (4,)
    sel.feedback(np.array([0, 1]), np.array([1.0, 0.0]))  # level 1 / a, level 1 / b
    assert sel.estimates(np.array([2, 3])).tolist() == pytest.approx([1.0, 0.0])  # unseen tasks of each pair


def test_bins_pool_tasks_by_quantiles_of_a_numeric_feature() -> None:
    difficulty = np.linspace(0.0, 1.0, 300)
    sel = make_selector("learnability", size=300, seed=1, features={"difficulty": difficulty}, bins=3,
                        group_rate=1.0)
    assert len(sel.groups.values) == 3 and np.bincount(sel.groups.group).tolist() == [100, 100, 100]
    sel.feedback(np.array([0, 299]), np.array([1.0, 0.0]))
    assert sel.estimates(np.array([50, 250])).tolist() == pytest.approx([1.0, 0.0])


def test_a_uniform_floor_keeps_drawing_groups_the_estimates_rule_out() -> None:
    def drawn_from_solved_level(fraction: float) -> int:
        sel = _selector(candidates=8, group_rate=1.0, uniform_fraction=fraction)
        sel.feedback(np.array([0, 100, 101, 200]), np.array([1.0, 0.5, 0.5, 0.0]))
        return sum(int((sel.get_indices(30) < 100).sum()) for _ in range(20))

    assert drawn_from_solved_level(0.0) == 0
    assert 20 <= drawn_from_solved_level(0.3) <= 100  # 9 uniform draws a batch, a third of them on level 1


def test_explore_re_probes_a_group_that_became_learnable_and_resumes_exactly() -> None:
    levels = np.repeat(np.arange(1.0, 7.0), 200)

    def run(explore: bool) -> np.ndarray:
        sel = make_selector("learnability", size=1200, seed=2, features={"level": levels}, feature_keys=["level"],
                            candidates=4, explore=explore)
        rng = np.random.default_rng(0)
        drawn = []
        for step in range(160):
            rates = np.array([1.0, 0.5, 0.5, 0.0 if step < 40 else 0.5, 0.0, 0.0])
            idx = sel.get_indices(64)
            level = levels[idx].astype(int) - 1
            drawn.append(int((level == 3).sum()))
            sel.feedback(idx, rng.binomial(8, rates[level]) / 8)
        return np.array(drawn)

    assert run(explore=True)[80:].sum() > 5 * max(1, run(explore=False)[80:].sum())
    sel = make_selector("learnability", size=1200, seed=2, features={"level": levels}, explore=True)
    sel.feedback(np.arange(0, 1200, 7), np.linspace(0, 1, len(range(0, 1200, 7))))
    other = make_selector("learnability", size=1200, seed=2, features={"level": levels}, explore=True)
    other.load_state_dict(sel.state_dict())
    assert other.get_indices(64).tolist() == sel.get_indices(64).tolist()
