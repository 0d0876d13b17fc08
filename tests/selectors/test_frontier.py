"""``frontier``: discounted Thompson sampling over task groups for informative (mixed-reward) answer groups.

The scenario tests simulate a curriculum: each level has a pass rate, a drawn task's feedback is the mean of 8
Bernoulli answers, and the pass rates change over time. They fail when the exploration is removed (the ablation
``thompson = false, uniform_fraction = 0`` stalls), when discounting is removed, or when the floor is removed.
"""

from __future__ import annotations

import numpy as np
import pytest

from flexkit import make_selector
from flexkit.selectors._estimates import GroupBeta

LEVELS = np.repeat(np.arange(1.0, 7.0), 200)


#: The draw alone, as these scenarios were written for it: no floor for learnt levels and no guard, and the short
#: evidence window (γ = 0.95) under which their step counts were chosen. The defaults (the recipe) are tested below.
DRAW_ONLY = {"discount": 0.95, "retain": 0.0, "retain_above": 0.5, "guard_metric": ""}


def _frontier(**params):
    return make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS},
                         feature_keys=["level"], **{**DRAW_ONLY, **params})


def _simulate(sel, pass_rates, steps: int, rng: np.random.Generator, batch: int = 64) -> np.ndarray:
    """Draw ``steps`` batches with ``pass_rates`` per level (a callable of the step); return draws per level."""
    drawn = np.zeros((steps, 6), dtype=np.int64)
    for step in range(steps):
        idx = sel.get_indices(batch)
        level = LEVELS[idx].astype(int) - 1
        drawn[step] = np.bincount(level, minlength=6)
        rates = np.asarray(pass_rates(step))[level]
        sel.feedback(idx, rng.binomial(8, rates) / 8)
    return drawn


def test_informative_feedback_is_mixed_rewards_and_old_evidence_is_discounted() -> None:
    sel = _frontier(discount=0.5)
    sel.feedback(np.array([0, 1, 200, 201]), np.array([0.0, 1.0, 0.5, 0.125]))
    assert sel.informative[:2].tolist() == [0.0, 2.0] and sel.uninformative[:2].tolist() == [2.0, 0.0]
    sel.feedback(np.array([400]), np.array([1.0]))
    assert sel.informative[:3].tolist() == [0.0, 1.0, 0.0]
    assert sel.uninformative[:3].tolist() == [1.0, 0.0, 1.0]
    assert sel.informative_rates()[1] == pytest.approx(2.0 / 3.0)


def test_most_draws_go_to_the_groups_that_give_informative_answers() -> None:
    rates = [1.0, 0.5, 0.2, 0.0, 0.0, 0.0]
    drawn = _simulate(_frontier(), lambda step: rates, 40, np.random.default_rng(0))[10:].sum(axis=0)
    assert drawn[1] + drawn[2] > 0.75 * drawn.sum()
    assert drawn[1] > drawn[0] and drawn[1] > drawn[3]


def test_a_level_that_becomes_learnable_wins_its_draws_back_and_the_ablation_stalls() -> None:
    # level 4 is hopeless for 60 steps, then learnable (pass rate 0.4): the exploring selector finds it again as
    # its old evidence fades; the greedy ablation (posterior means) never draws it again.
    def rates(step: int) -> list[float]:
        return [1.0, 0.5, 0.5, 0.0 if step < 60 else 0.4, 0.0, 0.0]

    exploring = _simulate(_frontier(), rates, 200, np.random.default_rng(1))
    greedy = _simulate(_frontier(thompson=False, tau=0.0), rates, 200, np.random.default_rng(1))
    assert exploring[100:, 3].mean() > 6  # at the level of the other learnable levels' shares
    assert greedy[40:, 3].sum() == 0


def test_without_discounting_a_stale_group_is_never_found_again() -> None:
    # winner-takes-all selection (tau = 0): only the fading of old evidence brings the level back
    def rates(step: int) -> list[float]:
        return [1.0, 0.5, 0.5, 0.0 if step < 60 else 0.4, 0.0, 0.0]

    kept = _simulate(_frontier(tau=0.0), rates, 200, np.random.default_rng(1))
    no_discount = _simulate(_frontier(tau=0.0, discount=1.0), rates, 200, np.random.default_rng(1))
    assert kept[100:, 3].sum() > 10 * max(1, no_discount[100:, 3].sum())


@pytest.mark.parametrize("unsolved_weight", [0.0, 1.0])
def test_a_solved_level_that_is_forgotten_is_drawn_again_at_once(unsolved_weight: float) -> None:
    # level 1 is solved (no informative answers) until step 50, then forgotten (pass rate 0.5).
    def rates(step: int) -> list[float]:
        return [1.0 if step < 50 else 0.5, 0.5, 0.5, 0.0, 0.0, 0.0]

    drawn = _simulate(_frontier(unsolved_weight=unsolved_weight), rates, 150, np.random.default_rng(3))
    assert drawn[20:50, 0].mean() < 64 / 6 / 4  # solved: probed now and then, far below its uniform share
    assert drawn[90:, 0].mean() > 10  # forgotten: back to a learnable level's share within 40 steps


def test_a_level_still_hard_keeps_a_share_in_proportion_to_its_informative_answers() -> None:
    # level 4 at pass rate 0.03: about one group in five comes back mixed. Probability matching (tau = 1) keeps
    # drawing it; winner-takes-all (tau = 0) leaves it to the few Thompson draws that rank it first.
    rates = [1.0, 0.5, 0.5, 0.03, 0.0, 0.0]
    matching = _simulate(_frontier(), lambda step: rates, 80, np.random.default_rng(6))[30:].mean(axis=0)
    winner = _simulate(_frontier(tau=0.0), lambda step: rates, 80, np.random.default_rng(6))[30:].mean(axis=0)
    assert matching[3] > 2 * winner[3] and matching[3] > 2
    assert matching[1] > matching[3] > matching[4]  # informative levels first, hopeless ones last


def test_a_uniform_floor_keeps_a_share_of_every_group() -> None:
    drawn = _simulate(_frontier(uniform_fraction=0.25), lambda step: [1.0, 0.5, 0.5, 0.0, 0.0, 0.0], 60,
                      np.random.default_rng(3))
    assert drawn[20:, 0].mean() >= 16 / 6 * 0.6  # 16 uniform draws a batch, a sixth of them on level 1


@pytest.mark.parametrize("params", [{"tau": 0.3}, {"retain": 0.5}])
def test_exact_resume_and_state_checks(params: dict[str, float]) -> None:
    sel = _frontier(**params)
    _simulate(sel, lambda step: [1.0, 0.9, 0.2, 0.0, 0.0, 0.0], 6, np.random.default_rng(4))
    other = _frontier(**params)
    other.load_state_dict(sel.state_dict())
    assert other.get_indices(64).tolist() == sel.get_indices(64).tolist()
    broken = sel.state_dict()
    broken["informative"] = np.full(6, -1.0)
    with pytest.raises(ValueError, match="below"):
        other.load_state_dict(broken)
    with pytest.raises(ValueError, match="groups"):
        make_selector("frontier", size=len(LEVELS), features={"level": LEVELS % 2}).load_state_dict(sel.state_dict())


def test_summary_and_predicted_pass_rates_are_per_group() -> None:
    sel = _frontier(pass_rate=1.0)
    sel.feedback(np.array([0, 200]), np.array([1.0, 0.5]))
    summary = sel.summary()
    assert summary["groups"] == 6 and summary["pass_rate/level=2"] == 0.5
    assert summary["informative/level=2"] == pytest.approx(2 / 3)
    rates = sel.predicted_pass_rates()
    assert rates[0] == 1.0 and rates[399] == 0.5 and rates[1000] == 0.75  # unseen level: the groups' mean


def test_without_grouping_columns_the_pool_is_one_group() -> None:
    sel = make_selector("frontier", size=50, seed=0)
    assert sel.groups.count == 1 and len(set(sel.get_indices(10).tolist())) == 10


def test_unsolved_weight_moves_draws_from_nearly_solved_groups_to_the_frontier() -> None:
    # level 1 nearly solved (p = 0.93: most groups still mixed), level 3 at the frontier (p = 0.25)
    rates = [0.93, 0.6, 0.25, 0.0, 0.0, 0.0]
    plain = _simulate(_frontier(unsolved_weight=0.0), lambda step: rates, 60, np.random.default_rng(4))[20:].sum(axis=0)
    weighted = _simulate(_frontier(unsolved_weight=1.0), lambda step: rates, 60,
                         np.random.default_rng(4))[20:].sum(axis=0)
    assert weighted[0] < 0.5 * plain[0]
    assert weighted[2] > plain[2] and weighted[2] > weighted[1] > weighted[0]


def test_without_unsolved_weight_only_mixedness_counts() -> None:
    # feedback 0.25 and 0.75 are equally informative: with k = 0 the draws are the same, with k = 1 they are not
    def draws(unsolved_weight: float, value: float) -> list[list[int]]:
        sel = _frontier(unsolved_weight=unsolved_weight)
        out = []
        for _ in range(10):
            idx = sel.get_indices(64)
            out.append(idx.tolist())
            sel.feedback(idx, np.where(LEVELS[idx] == 1, value, 0.5))
        return out

    assert draws(0.0, 0.25) == draws(0.0, 0.75)
    assert draws(1.0, 0.25) != draws(1.0, 0.75)


def test_the_unsolved_factor_follows_the_one_pass_rate_the_floor_reads() -> None:
    # level 1 sat at 0.3 for 100 batches, then was nearly learnt (0.95) for 10; level 2 sits at 0.5. Every value
    # is mixed, so only the unsolved factor tells them apart. Its pass rate is the moving average (about 0.88 now),
    # the estimate retain decides by: level 1 draws far less than level 2. A second posterior over the pass rate
    # (γ = 0.99, about the last 100 batches) still put it near 0.4 and drew level 1 more than level 2.
    sel = _frontier(discount=0.99, thompson=False)
    one, two = np.arange(0, 8), np.arange(200, 208)
    for step in range(110):
        sel.feedback(np.concatenate([one, two]), np.r_[np.full(8, 0.3 if step < 100 else 0.95), np.full(8, 0.5)])
    assert sel.summary()["pass_rate/level=1"] == pytest.approx(0.95 - 0.65 * 0.8 ** 10)
    drawn = np.bincount(LEVELS[np.concatenate([sel.get_indices(64) for _ in range(20)])].astype(int), minlength=7)
    assert drawn[1] < 0.4 * drawn[2]


def test_the_pass_rate_draw_is_centred_on_the_estimate_and_as_wide_as_the_evidence() -> None:
    beta = GroupBeta(np.arange(3), 3, 0.9)
    beta.a, beta.b = np.array([90.0, 0.5, 0.0]), np.array([10.0, 0.5, 0.0])  # much, little and no evidence
    around = beta.recentred(np.array([0.2, 0.2, np.nan]))
    assert around.a.tolist() == pytest.approx([20.0, 0.2, 0.0]) and around.b.tolist() == pytest.approx([80.0, 0.8, 0.0])
    assert around.mean()[0] == pytest.approx(21 / 102) and around.mean()[2] == 0.5  # no estimate: the prior
    draws = around.draw(np.random.default_rng(0), np.repeat([0, 1], 4000)).reshape(2, -1)
    assert draws[0].std() < 0.05 < 0.15 < draws[1].std()
    assert (beta.a.tolist(), beta.b.tolist()) == ([90.0, 0.5, 0.0], [10.0, 0.5, 0.0])  # a view: nothing changed


def test_a_state_saved_with_a_second_pass_rate_posterior_still_loads_and_draws_the_same() -> None:
    sel = _frontier()
    _simulate(sel, lambda step: [1.0, 0.9, 0.2, 0.0, 0.0, 0.0], 6, np.random.default_rng(4))
    old = {**sel.state_dict(), "passed": np.ones(6), "failed": np.ones(6)}  # as saved before one estimate
    other = _frontier()
    other.load_state_dict(old)
    assert other.get_indices(64).tolist() == sel.get_indices(64).tolist()


def test_retain_keeps_a_share_of_learnt_groups_and_none_of_the_others() -> None:
    # level 1 solved (no gradient, value near 0), level 2 nearly solved, levels 3-4 at the frontier, 5-6 hopeless
    rates = [1.0, 0.95, 0.4, 0.2, 0.0, 0.0]
    plain = _simulate(_frontier(), lambda step: rates, 80, np.random.default_rng(8))[30:].mean(axis=0)
    kept = _simulate(_frontier(retain=0.5), lambda step: rates, 80, np.random.default_rng(8))[30:].mean(axis=0)
    share = 64 / 6 * 0.5  # half the uniform share of a level
    assert plain[0] < 0.5 * share  # without the floor a solved level gets almost nothing
    assert kept[0] >= 0.8 * share and kept[1] >= 0.8 * share  # each learnt level keeps about r of its share
    assert kept[4] + kept[5] <= plain[4] + plain[5] + 1  # hopeless levels get no floor
    assert kept[2] > kept[4] and kept[3] > kept[5]  # the rest still goes by value


def test_retain_follows_the_learnt_threshold_and_leaves_no_floor_to_unseen_groups() -> None:
    sel = _frontier(retain=1.0, retain_above=0.6, pass_rate=1.0)
    assert not sel.learnt_groups().any()  # nothing seen yet: nothing is retained
    _, info = sel.get_indices(64, return_extra_info=True)
    assert info["retained"] == 0
    sel.feedback(np.array([0, 200, 400]), np.array([0.75, 0.5, 0.0]))
    assert sel.learnt_groups().tolist() == [True, False, False, False, False, False]
    idx, info = sel.get_indices(64, return_extra_info=True)
    assert len(idx) == 64 and len(set(idx.tolist())) == 64
    assert 0 < info["retained"] == int((LEVELS[idx[:info["retained"]]] == 1).sum())
    assert np.isnan(info["value"][:info["retained"]]).all()


def test_retain_zero_draws_exactly_as_before() -> None:
    # the floor's code path is skipped at retain = 0: the same draws as a selector without the field set
    rates = [1.0, 0.9, 0.4, 0.1, 0.0, 0.0]
    assert (_simulate(_frontier(retain=0.0), lambda step: rates, 20, np.random.default_rng(2)).tolist()
            == _simulate(_frontier(), lambda step: rates, 20, np.random.default_rng(2)).tolist())


def test_retain_with_a_floor_and_a_batch_of_the_whole_candidate_set() -> None:
    sel = _frontier(retain=1.0, uniform_fraction=0.5, candidates=1.0, pass_rate=1.0)
    sel.feedback(np.arange(0, 1200, 7), np.ones(172))  # every level learnt
    idx, info = sel.get_indices(64, return_extra_info=True)
    assert len(idx) == 64 and len(set(idx.tolist())) == 64
    assert info["uniform"] == 32 and info["retained"] == 32



# -- group_prior: finer groups that share evidence with their level -------------------------------------------------

SUBGROUP = np.tile(np.arange(5.0), 240)  # five groups inside every level (as carries split a level)


def _by_level_and_subgroup(**params):
    return make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS, "sub": SUBGROUP},
                         feature_keys=["level", "sub"], **params)


def test_a_group_without_evidence_is_valued_as_its_parent_and_with_much_by_its_own() -> None:
    beta = GroupBeta(np.arange(3), 3, 1.0, parents=np.array([0, 0, 1]), prior=8.0)
    beta.update(np.repeat([0, 2], 1000), np.concatenate([np.ones(300), np.zeros(700), np.ones(1000)]))
    parent = (1 + 300) / (2 + 1000)
    assert beta.mean()[1] == pytest.approx(parent)  # no evidence of its own: its level's mean
    assert beta.mean()[0] == pytest.approx(0.3, abs=0.001) and beta.mean()[2] == pytest.approx(1.0, abs=0.01)
    plain = GroupBeta(np.arange(3), 3, 1.0, parents=np.array([0, 0, 1]), prior=0.0)
    plain.update(np.array([0]), np.array([1.0]))
    assert plain.mean().tolist() == [2 / 3, 0.5, 0.5]  # prior 0: Beta(1 + a, 1 + b), each group on its own


def test_group_prior_stops_finer_groups_from_re_probing_a_hopeless_level_piece_by_piece() -> None:
    # levels 5-6 are out of reach. Split into five groups each, every piece is re-probed on its own as its
    # evidence fades, and the pieces' draws add up; sharing evidence with the level brings them back down.
    rates = [1.0, 0.5, 0.4, 0.02, 0.0, 0.0]
    alone = _simulate(_by_level_and_subgroup(), lambda step: rates, 120, np.random.default_rng(7))[30:].sum(axis=0)
    shared = _simulate(_by_level_and_subgroup(group_prior=8.0), lambda step: rates, 120,
                       np.random.default_rng(7))[30:].sum(axis=0)
    by_level = _simulate(_frontier(), lambda step: rates, 120, np.random.default_rng(7))[30:].sum(axis=0)
    hopeless = slice(4, 6)
    assert shared[hopeless].sum() < 0.6 * alone[hopeless].sum()
    assert shared[hopeless].sum() < 1.2 * by_level[hopeless].sum()
    assert shared[1] + shared[2] > alone[1] + alone[2]  # the draws go to the frontier instead


def test_with_group_prior_a_level_that_becomes_learnable_still_wins_its_draws_back() -> None:
    def rates(step: int) -> list[float]:
        return [1.0, 0.5, 0.5, 0.0 if step < 60 else 0.4, 0.0, 0.0]

    drawn = _simulate(_by_level_and_subgroup(group_prior=8.0), rates, 200, np.random.default_rng(1))
    assert drawn[40:60, 3].mean() < 3 and drawn[100:, 3].mean() > 6


def test_group_prior_zero_draws_exactly_as_before_and_resume_is_exact() -> None:
    rates = lambda step: [1.0, 0.9, 0.2, 0.0, 0.0, 0.0]  # noqa: E731
    before = _simulate(_by_level_and_subgroup(), rates, 20, np.random.default_rng(2))
    assert (_simulate(_by_level_and_subgroup(group_prior=0.0), rates, 20, np.random.default_rng(2)) == before).all()
    sel = _by_level_and_subgroup(group_prior=8.0)
    _simulate(sel, rates, 6, np.random.default_rng(4))
    other = _by_level_and_subgroup(group_prior=8.0)
    other.load_state_dict(sel.state_dict())
    assert other.get_indices(64).tolist() == sel.get_indices(64).tolist()
    assert other.informative_rates().tolist() == sel.informative_rates().tolist()


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
def test_retain_keeps_about_r_of_a_learnt_share_at_every_batch_size(batch: int) -> None:
    """``retain · B`` is rounded at random, not to the nearest whole number: with B = 1 and r = 0.5 it used to
    keep no floor at all (round(0.5) = 0), with B = 3 two thirds instead of half."""
    rates = [1.0, 0.95, 0.4, 0.2, 0.0, 0.0]

    def share(retain: float) -> float:
        sel = _frontier(retain=retain, retain_above=0.9, discount=1.0)
        drawn = _simulate(sel, lambda step: rates, 1500, np.random.default_rng(3), batch=batch)[300:]
        return float(drawn[:, 0].sum() / drawn.sum())

    without, half, whole = share(0.0), share(0.5), share(1.0)
    assert without < 0.05
    assert whole > 0.12  # near the uniform share of a level, 1/6
    assert half == pytest.approx((without + whole) / 2, abs=0.04)  # about half of it


def test_a_whole_floor_draws_no_extra_random_numbers() -> None:
    """``retain · B`` and ``uniform_fraction · B`` whole: the batches are those of round(), draw for draw."""
    from flexkit.selectors._estimates import uniform_floor

    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert [uniform_floor(64, f, rng) for f in (0.0, 0.5, 1.0, 0.25)] == [0, 32, 64, 16]
    assert uniform_floor(10, 0.3, rng) == 3  # 0.3 · 10 is 3.0000000000000004
    assert rng.bit_generator.state == state
    draws = [uniform_floor(1, 0.3, rng) for _ in range(4000)]
    assert np.mean(draws) == pytest.approx(0.3, abs=0.03)


def test_guard_metric_naming_groups_without_feature_keys_is_a_config_error() -> None:
    from flexkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"without feature_keys there are no groups"):
        make_selector("frontier", size=20, retain=1.0, guard_metric="val_accuracy/{}")
    sel = make_selector("frontier", size=20, retain=1.0, retain_above=0.0, guard_metric="val_accuracy")
    assert sel.held_out.metrics == ["val_accuracy"]  # one metric for the whole pool


def test_a_group_prior_that_underflows_still_draws() -> None:
    sel = _by_level_and_subgroup(group_prior=5e-324)
    rng = np.random.default_rng(0)
    for _ in range(5):
        idx = sel.get_indices(32)
        sel.feedback(idx, rng.random(len(idx)))
    assert len(set(sel.get_indices(32).tolist())) == 32
