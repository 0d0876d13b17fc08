"""The math of the selectors from the literature (docs/algorithms.md): LILO learnability, MoPPS Thompson
sampling, GRESO skipping, AdaRFT's target difficulty and PLR's rank + staleness replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.selectors import (
    LearnabilityConfig,
    LearnabilitySelector,
    PrioritizedReplayConfig,
    PrioritizedReplaySelector,
    TargetDifficultyConfig,
    TargetDifficultySelector,
    ThompsonTargetConfig,
    ThompsonTargetSelector,
    ZeroVarianceSkipConfig,
    ZeroVarianceSkipSelector,
)
from flexkit.selectors._estimates import candidate_count, gumbel_top_k

# -- shared pieces ------------------------------------------------------------------------------------------


def test_candidate_count_is_clamped_to_the_batch_and_the_taskset() -> None:
    assert candidate_count(8, 4.0, 1000) == 32
    assert candidate_count(8, 1.01, 1000) == 9
    assert candidate_count(8, 4.0, 20) == 20
    assert candidate_count(8, 1.0, 8) == 8


def test_gumbel_top_k_samples_proportionally_to_the_weights() -> None:
    rng = np.random.default_rng(0)
    weights = np.array([0.1, 0.3, 0.6])
    counts = np.zeros(3)
    for _ in range(6000):
        counts[gumbel_top_k(np.log(weights), 1, 1.0, rng)[0]] += 1
    np.testing.assert_allclose(counts / counts.sum(), weights, atol=0.02)
    assert gumbel_top_k(np.log(weights), 2, 0.0, rng).tolist() == [2, 1]


# -- learnability (LILO) ------------------------------------------------------------------------------------


def test_learnability_estimates_shrink_toward_the_pooled_rate() -> None:
    sel = LearnabilitySelector(LearnabilityConfig(prior_strength=1.0), size=4)
    assert sel.estimates().tolist() == [0.5] * 4  # no data: the pool's initial 0.5
    sel.feedback([0, 1], [1.0, 0.0])  # first batch: pooled rate = its mean, 0.5
    assert sel.pool.value == 0.5
    np.testing.assert_allclose(sel.estimates(), [(1 + 0.5) / 2, (0 + 0.5) / 2, 0.5, 0.5])
    sel.feedback([0], [1.0])  # pool ← 0.9·0.5 + 0.1·1.0 = 0.55; task 0: S = 2, n = 2
    assert sel.pool.value == pytest.approx(0.55)
    assert sel.estimates(np.array([0]))[0] == pytest.approx((2 + 0.55) / 3)


def test_learnability_decay_discounts_older_observations() -> None:
    sel = LearnabilitySelector(LearnabilityConfig(decay=0.5), size=2)
    sel.feedback([0], [1.0])
    sel.feedback([0], [0.0])
    assert sel.sums[0] == pytest.approx(0.5) and sel.counts[0] == pytest.approx(1.5)


def test_learnability_picks_the_most_learnable_candidates() -> None:
    sel = LearnabilitySelector(LearnabilityConfig(candidates=10.0, prior_strength=0.1), size=10, seed=1)
    for _ in range(5):
        sel.feedback(np.arange(10), [1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.4, 0.6])
    for _ in range(10):
        assert sorted(sel.get_indices(5).tolist()) == [5, 6, 7, 8, 9]


def test_learnability_one_lucky_observation_does_not_beat_the_evidence() -> None:
    """The selection-bias trap: task 0 was seen at 0.5 once, task 1 ten times; with the pool near 0.9,
    task 1's estimate stays at ~0.5 while task 0's is pulled toward the pool."""
    sel = LearnabilitySelector(LearnabilityConfig(prior_strength=2.0, candidates=3.0), size=3)
    sel.feedback([2], [0.9])
    for _ in range(10):
        sel.feedback([1, 2], [0.5, 0.9])
    sel.feedback([0], [0.5])
    p = sel.estimates()
    assert abs(p[1] - 0.5) < abs(p[0] - 0.5)
    assert sel.get_indices(1).tolist() == [1]


def test_learnability_sampling_follows_learnability_with_tau_one() -> None:
    sel = LearnabilitySelector(LearnabilityConfig(candidates=3.0, tau=1.0, prior_strength=1e-9), size=3, seed=2)
    sel.feedback([0, 1, 2], [0.5, 0.9, 0.99])
    learn = sel.estimates() * (1 - sel.estimates())
    counts = np.bincount(np.concatenate([sel.get_indices(1) for _ in range(6000)]), minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), learn / learn.sum(), atol=0.02)


# -- thompson_target (MoPPS) --------------------------------------------------------------------------------


def test_thompson_update_discounts_toward_the_prior() -> None:
    cfg = ThompsonTargetConfig(discount=0.5, alpha0=1.0, beta0=2.0, m=4)
    sel = ThompsonTargetSelector(cfg, size=3)
    sel.feedback([1], [0.75])
    assert (sel.alpha[1], sel.beta[1]) == (0.5 * 1 + 0.5 * 1 + 3.0, 0.5 * 2 + 0.5 * 2 + 1.0)
    sel.feedback([1], [0.0])
    assert sel.alpha[1] == pytest.approx(0.5 * 4 + 0.5 * 1 + 0.0)
    assert sel.beta[1] == pytest.approx(0.5 * 3 + 0.5 * 2 + 4.0)
    assert sel.alpha[0] == 1.0 and sel.beta[2] == 2.0  # unobserved tasks keep the prior


def test_thompson_serves_the_candidates_nearest_the_target() -> None:
    sel = ThompsonTargetSelector(ThompsonTargetConfig(candidates=10.0, discount=1.0, m=100_000, target=0.3),
                                 size=10, seed=0)
    sel.feedback(np.arange(10), np.linspace(0.0, 0.9, 10))  # sharp posteriors at 0.0, 0.1, ..., 0.9
    for _ in range(5):
        assert sorted(sel.get_indices(3).tolist()) == [2, 3, 4]


def test_thompson_draws_are_beta_distributed() -> None:
    sel = ThompsonTargetSelector(ThompsonTargetConfig(candidates=1.0, target=0.0, alpha0=2.0, beta0=5.0), size=1)
    draws = np.array([sel.get_indices(1, return_extra_info=True)[1]["sampled_rate"][0] for _ in range(4000)])
    assert draws.mean() == pytest.approx(2 / 7, abs=0.01)
    assert draws.var() == pytest.approx(2 * 5 / (49 * 8), abs=0.004)


# -- zero_variance_skip (GRESO) -----------------------------------------------------------------------------


def test_greso_streaks_count_consecutive_zero_variance_of_one_kind() -> None:
    sel = ZeroVarianceSkipSelector(ZeroVarianceSkipConfig(), size=2)
    for v, z, kind in [(1.0, 1, 1), (1.0, 2, 1), (0.0, 1, 2), (0.0, 2, 2), (0.5, 0, 0), (0.0, 1, 2)]:
        sel.feedback([0], [v])
        assert (sel.streak[0], sel.kind[0]) == (z, kind)


def test_greso_keep_probability_is_p_to_the_streak_with_a_floor() -> None:
    sel = ZeroVarianceSkipSelector(ZeroVarianceSkipConfig(p_easy=0.5, p_hard=0.8, adjust_step=0.0), size=3)
    sel.feedback([0, 1], [1.0, 0.0])
    sel.feedback([0, 1], [1.0, 0.0])
    np.testing.assert_allclose(sel.keep_probability(np.arange(3)), [0.25, 0.64, 1.0])
    for _ in range(20):
        sel.feedback([0], [1.0])
    assert sel.keep_probability(np.array([0]))[0] == 0.01


def test_greso_probabilities_move_toward_the_target_shares() -> None:
    cfg = ZeroVarianceSkipConfig(p_easy=0.5, p_hard=0.5, target_easy=0.1, target_hard=0.2, adjust_step=0.01)
    sel = ZeroVarianceSkipSelector(cfg, size=10)
    sel.feedback(np.arange(10), [1.0] * 5 + [0.5] * 5)  # easy share 0.5 > 0.1; hard share 0 < 0.2
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.49, 0.51))
    for _ in range(100):
        sel.feedback(np.arange(10), [0.5] * 10)
    assert (sel.p_easy, sel.p_hard) == (1.0, 1.0)  # clipped


def test_greso_skips_streaky_tasks_but_always_fills_the_batch() -> None:
    cfg = ZeroVarianceSkipConfig(candidates=2.0, p_easy=0.1, adjust_step=0.0)
    sel = ZeroVarianceSkipSelector(cfg, size=20, seed=3)
    for _ in range(3):
        sel.feedback(np.arange(10), [1.0] * 10)  # tasks 0-9: all correct three times → kept with p 0.01
    counts = np.zeros(20)
    for _ in range(500):
        idx = sel.get_indices(10)
        assert len(set(idx.tolist())) == 10
        counts[idx] += 1
    assert counts[:10].sum() < 0.35 * counts.sum()  # ≈ skipped unless needed to fill; uniform would be 0.5
    full = sel.get_indices(20)  # every candidate is needed: skipped ones fill the batch
    assert sorted(full.tolist()) == list(range(20))


# -- target_difficulty (AdaRFT) -----------------------------------------------------------------------------


def test_adarft_target_update_and_clip() -> None:
    d = np.linspace(0.0, 1.0, 11)
    cfg = TargetDifficultyConfig(feature_keys=("d",), eta=0.1, alpha=2.0, target_reward=0.5, initial_target=0.5)
    sel = TargetDifficultySelector(cfg, size=11, features={"d": d})
    sel.feedback([0, 1], [1.0, 1.0])
    assert sel.target == pytest.approx(0.5 + 0.1 * math.tanh(1.0))
    sel.feedback([0], [0.25])
    assert sel.target == pytest.approx(0.5 + 0.1 * math.tanh(1.0) + 0.1 * math.tanh(-0.5))
    for _ in range(50):
        sel.feedback([0], [1.0])
    assert sel.target == 1.0  # clipped to the hardest task


def test_adarft_lower_is_harder_moves_down_and_starts_easiest() -> None:
    rate = np.array([0.9, 0.1, 0.5])
    cfg = TargetDifficultyConfig(feature_keys=("r",), harder="lower", eta=0.1)
    sel = TargetDifficultySelector(cfg, size=3, features={"r": rate})
    assert sel.target == 0.9 and sel.get_indices(1).tolist() == [0]
    sel.feedback([0], [1.0])
    assert sel.target == pytest.approx(0.9 - 0.1 * math.tanh(1.0))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-5, 5), min_size=1, max_size=40), target=st.floats(-6, 6),
       data=st.data())
def test_adarft_serves_exactly_the_nearest_tasks(values: list[float], target: float, data: st.DataObject) -> None:
    d = np.asarray(values)
    b = data.draw(st.integers(1, len(values)))
    sel = TargetDifficultySelector(TargetDifficultyConfig(feature_keys=("d",), initial_target=target), size=len(d),
                                   features={"d": d})
    got = sel.get_indices(b)
    t = float(np.clip(target, d.min(), d.max()))
    dist = np.abs(d - t)
    assert len(set(got.tolist())) == b
    assert np.sort(dist[got]).tolist() == np.sort(dist)[:b].tolist()  # the b smallest distances (ties: any)


def test_adarft_pool_draws_from_the_nearest_pool() -> None:
    d = np.arange(100, dtype=np.float64)
    sel = TargetDifficultySelector(TargetDifficultyConfig(feature_keys=("d",), initial_target=50.0, pool=3.0), size=100,
                                   features={"d": d}, seed=0)
    seen = set()
    for _ in range(50):
        seen |= set(sel.get_indices(4).tolist())
    assert seen <= set(range(44, 57)) and len(seen) > 4  # the 12 nearest (ties at ±6 either way)


# -- prioritized_replay (PLR) -------------------------------------------------------------------------------


def test_plr_score_is_mean_abs_grpo_advantage_of_the_shrunk_rate() -> None:
    sel = PrioritizedReplaySelector(PrioritizedReplayConfig(prior_strength=0.0), size=4)
    np.testing.assert_allclose(sel.score(np.array([0.0, 0.5, 1.0, 0.25])), [0.0, 1.0, 0.0, 2 * math.sqrt(0.1875)])
    # mean |A| of a binary group with rate p, advantages (r − p)/std: check against a direct computation
    r = np.array([1, 0, 0, 0], dtype=float)
    adv = (r - r.mean()) / r.std()
    assert np.abs(adv).mean() == pytest.approx(sel.score(np.array([0.25]))[0])
    shrunk = PrioritizedReplaySelector(PrioritizedReplayConfig(prior_strength=8.0, m=8), size=4)
    shrunk.feedback([0], [0.5])  # pool = 0.5
    assert shrunk.score(np.array([1.0]))[0] == pytest.approx(2 * math.sqrt(0.75 * 0.25))


def test_plr_replay_distribution_mixes_rank_and_staleness() -> None:
    cfg = PrioritizedReplayConfig(beta=0.5, staleness=0.25, prior_strength=0.0, replay_prob=0.0)
    sel = PrioritizedReplaySelector(cfg, size=10)
    sel.feedback([3, 7, 5], [0.5, 0.1, 0.0])  # scores 1.0, 0.6, 0.0 → ranks 1, 2, 3
    sel.clock = 4
    sel.buf_last[:] = [0, 2, 3]
    p_score = np.array([1.0, 1 / 4, 1 / 9])
    p_stale = np.array([4.0, 2.0, 1.0])
    expected = 0.75 * p_score / p_score.sum() + 0.25 * p_stale / p_stale.sum()
    np.testing.assert_allclose(sel.replay_distribution(), expected)
    assert sel.buf_index.tolist() == [3, 7, 5]


def test_plr_replay_and_unseen_draws() -> None:
    sel = PrioritizedReplaySelector(PrioritizedReplayConfig(replay_prob=1.0), size=10, seed=0)
    first = sel.get_indices(4)  # nothing seen yet: all unseen
    assert sel.count == 0 and len(set(first.tolist())) == 4
    sel.feedback(first, [0.5, 0.5, 0.5, 0.5])
    again = sel.get_indices(4)
    assert sorted(again.tolist()) == sorted(first.tolist())  # replay_prob 1: all four replayed
    sel2 = PrioritizedReplaySelector(PrioritizedReplayConfig(replay_prob=0.0), size=10, seed=0)
    sel2.feedback(np.arange(8), [0.5] * 8)
    assert set(sel2.get_indices(2).tolist()) == {8, 9}  # replay_prob 0: the two unseen tasks


def test_plr_fills_with_replays_when_unseen_tasks_run_out() -> None:
    sel = PrioritizedReplaySelector(PrioritizedReplayConfig(replay_prob=0.0), size=5, seed=0)
    sel.feedback(np.arange(4), [0.5] * 4)
    batch = sel.get_indices(3)
    assert 4 in batch.tolist() and len(set(batch.tolist())) == 3


def test_plr_bounded_buffer_evicts_the_lowest_score() -> None:
    sel = PrioritizedReplaySelector(PrioritizedReplayConfig(buffer_size=2, prior_strength=0.0), size=10)
    sel.feedback([0, 1], [0.5, 0.1])
    sel.feedback([2], [0.0])  # score 0 does not beat the minimum (0.6): not admitted
    assert sorted(sel.buf_index.tolist()) == [0, 1]
    sel.feedback([3], [0.4])  # score 0.98 > 0.6: replaces task 1, which is unseen again
    assert sorted(sel.buf_index.tolist()) == [0, 3] and sel.slot[1] == -1 and sel.slot[3] >= 0
    state = sel.state_dict()
    fresh = PrioritizedReplaySelector(PrioritizedReplayConfig(buffer_size=2, prior_strength=0.0), size=10)
    fresh.load_state_dict(state)
    assert fresh.slot.tolist() == sel.slot.tolist()


def test_plr_refuses_a_buffer_with_foreign_indices() -> None:
    sel = PrioritizedReplaySelector(PrioritizedReplayConfig(), size=10)
    sel.feedback([9], [0.5])
    with pytest.raises(ValueError, match="out-of-range"):
        PrioritizedReplaySelector(PrioritizedReplayConfig(), size=5).load_state_dict(sel.state_dict())
