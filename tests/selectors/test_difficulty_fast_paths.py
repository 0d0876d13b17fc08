"""difficulty_based's fast paths: the float32 filter gives exactly the float64 results, and each of the three
samplers (rejection, envelope, Gumbel window) draws from softmax without replacement and resumes exactly."""

from __future__ import annotations

import contextlib
import itertools
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.selectors import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.difficulty_based import tuning
from tests.selectors.difficulty_support import exact_greedy, make, random_features

# -- the fast paths: float32 filter, exact float64 results, and the three samplers -----------------------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    m=st.sampled_from([1, 16, 1000]),
    lamb=st.sampled_from([0.0, 0.2, 0.9, 0.999]),
    target=st.sampled_from([0.0, 0.5, 1.0, 0.37]),
    coarse=st.booleans(),
    chunk=st.sampled_from([3, 7, 64, tuning.CHUNK]),
    parallel=st.booleans(),
    fold_below=st.sampled_from([1e-30, 0.3]),
)
def test_greedy_fast_path_equals_the_float64_top_k(
    n: int,
    seed: int,
    m: int,
    lamb: float,
    target: float,
    coarse: bool,
    chunk: int,
    parallel: bool,
    fold_below: float,
) -> None:
    """The float32 pass only filters: the chosen indices and their order are exactly the float64 top-k's, ties
    (coarse features and values make many) included, whatever the chunking or the split across threads."""
    rng = np.random.default_rng(seed)
    f0, f1 = random_features(rng, n)
    if coarse:
        f0, f1 = np.round(f0, 1), np.round(f1, 1)
    cfg = DifficultyBasedConfig(m=m, lamb=lamb, rho=0.3, target_reward=target, tau=0.0)
    sel = DifficultyBasedSelector(cfg, size=n, seed=seed, features={"f0": f0, "f1": f1})
    sel.fold_below = fold_below
    patches = [mock.patch.object(tuning, "CHUNK", chunk)]
    if parallel:
        patches += [mock.patch.object(tuning, "THREADS", 2), mock.patch.object(tuning, "PARALLEL_MIN", 0)]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        for _ in range(6):
            k = int(rng.integers(1, n + 1))
            assert sel.costs.fast_coefficients() is not None
            expected = exact_greedy(sel, k)
            assert sel.get_indices(k).tolist() == expected
            v = rng.random(k)
            sel.feedback(expected, np.round(v * 2) / 2 if coarse else v)


def test_float32_cost_stays_within_the_margin() -> None:
    """The error bound the filter rests on, under extreme parameters (the margin has a wide safety factor)."""
    rng = np.random.default_rng(3)
    worst = 0.0
    for m, lamb, fold_below in [(1, 0.0, 1e-30), (100_000, 0.999999, 1e-300), (16, 0.2, 1e-30), (1000, 1e-4, 1e-30)]:
        f0, f1 = random_features(rng, 200)
        cfg = DifficultyBasedConfig(m=m, lamb=lamb, rho=0.2, target_reward=float(rng.random()), tau=0.0)
        sel = DifficultyBasedSelector(cfg, size=200, features={"f0": f0, "f1": f1})
        sel.fold_below = fold_below
        for step in range(300):
            idx = rng.choice(200, size=int(rng.integers(1, 200)), replace=False)
            sel.feedback(idx, np.round(rng.random(idx.size)) if step % 2 else rng.random(idx.size))
            coef = sel.costs.fast_coefficients()
            if coef is None:
                continue
            cost32 = np.empty(200, dtype=np.float32)
            sel.costs.cost32_all(cost32, coef)
            worst = max(worst, float(np.abs(cost32 - sel.costs.cost64(np.arange(200))).max()))
    assert worst <= tuning.COST32_MARGIN / 4


def test_mirrors_equal_a_fresh_rebuild() -> None:
    sel = make(500, seed=0, lamb=0.9)
    sel.fold_below = 0.3
    rng = np.random.default_rng(0)
    for _ in range(40):
        idx = sel.get_indices(int(rng.integers(1, 100)))
        sel.feedback(idx, rng.random(idx.size))
    assert sel.num_folds > 0
    offsets, totals = sel.mirrors.offsets.copy(), sel.mirrors.totals.copy()
    sel.mirrors.refresh()
    assert np.array_equal(offsets, sel.mirrors.offsets) and np.array_equal(totals, sel.mirrors.totals)


def test_untrusted_or_overflowing_float32_falls_back_to_float64() -> None:
    sel = make(300, seed=0, tau=0.0, target_reward=0.4)
    rng = np.random.default_rng(1)
    for _ in range(5):
        sel.feedback(rng.choice(300, size=50, replace=False), rng.random(50))
    expected = sel.get_indices(40).tolist()
    with mock.patch.object(tuning, "FLOAT32_LIMIT", 1.0):
        assert sel.costs.fast_coefficients() is None
        assert sel.get_indices(40).tolist() == expected
    state = sel.state_dict()
    state["beta_tilde"] = state["beta_tilde"].copy()
    state["beta_tilde"][7] = -1e6  # β ≤ 0: not a state this class produces
    other = make(300, seed=0, tau=0.0, target_reward=0.4)
    other.load_state_dict(state)
    assert other.costs.fast_coefficients() is None
    assert other.get_indices(40).tolist() == exact_greedy(other, 40)
    sel.load_state_dict(sel.state_dict())
    assert sel.costs.fast_coefficients() is not None  # a genuine state stays on the fast path


def ordered_sample_probabilities(w: np.ndarray, k: int) -> dict[tuple[int, ...], float]:
    """Probability of each ordered k-tuple when drawing without replacement proportionally to ``w``."""
    probs = {}
    for tup in itertools.permutations(range(w.size), k):
        p, rest = 1.0, w.sum()
        for i in tup:
            p *= w[i] / rest
            rest -= w[i]
        probs[tup] = p
    return probs


@pytest.mark.parametrize(
    ("stage", "tau"),
    [("rejection", 0.5), ("envelope", 0.5), ("envelope", 0.05), ("window", 0.3), ("mixed", 0.05)],
)
def test_every_sampling_stage_draws_from_softmax_without_replacement(stage: str, tau: float) -> None:
    """Each stage alone, and the hand-overs between them, give the law of sequential draws ∝ exp(score/τ)."""
    n, k, draws = 8, 2, 4000
    rng = np.random.default_rng(5)
    f0 = rng.random(n) * 0.6
    f1 = np.minimum(f0 + rng.random(n) * 0.4, 1.0)
    cfg = DifficultyBasedConfig(tau=tau, lamb=0.5, m=1, rho=0.0)
    sel = DifficultyBasedSelector(cfg, size=n, seed=11, features={"f0": f0, "f1": f1})
    sel.feedback([0, 1, 2, 3], [1.0, 0.6, 0.0, 0.9])
    budgets = {
        "rejection": (10**6, 0),
        "envelope": (-(10**6), 10**6),
        "window": (-(10**6), -(10**6)),
        "mixed": (0, -126),
    }
    sel.sampler.rejection_budget, sel.sampler.envelope_budget = budgets[stage]
    alpha, beta = sel.posterior()
    w = np.exp(-np.abs(1.0 - alpha / (alpha + beta)) / tau)
    expected = ordered_sample_probabilities(w / w.sum(), k)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        tup = tuple(sel.get_indices(k).tolist())
        counts[tup] = counts.get(tup, 0) + 1
    assert set(counts) <= set(expected)
    for tup, p in expected.items():
        assert abs(counts.get(tup, 0) / draws - p) <= 4 * np.sqrt(p * (1 - p) / draws) + 1e-3, tup


def test_rejection_stage_alone_does_not_touch_all_tasks() -> None:
    """tau > 0 with most tasks near the target: the batch comes from the rejection stage, no full pass."""
    sel = make(200_000, seed=0, tau=1.0, target_reward=0.5)
    with mock.patch.object(sel.costs, "cost32_all", side_effect=AssertionError("full pass")):
        for _ in range(3):
            idx = sel.get_indices(256)
            assert np.unique(idx).size == 256
            sel.feedback(idx, np.full(256, 0.5))


@pytest.mark.parametrize("budgets", [(0, 64), (0, -126), (-(10**6), -(10**6))])
def test_resume_is_exact_across_the_sampling_stages(budgets: tuple[int, int]) -> None:
    def build() -> DifficultyBasedSelector:
        sel = make(64, seed=9, tau=0.05, target_reward=0.9)
        sel.rejection_budget, sel.envelope_budget = budgets
        return sel

    rng = np.random.default_rng(2)
    values = [rng.random(12) for _ in range(8)]
    straight = build()
    expected = []
    for v in values:
        idx = straight.get_indices(12)
        expected.append(idx.tolist())
        straight.feedback(idx, v)
    first = build()
    got = []
    for v in values[:4]:
        idx = first.get_indices(12)
        got.append(idx.tolist())
        first.feedback(idx, v)
    resumed = build()
    resumed.load_state_dict(first.state_dict())
    for v in values[4:]:
        idx = resumed.get_indices(12)
        got.append(idx.tolist())
        resumed.feedback(idx, v)
    assert got == expected


@pytest.mark.parametrize("tau", [5e-324, 1e-300, 1e-9, 1e-5, 1e300, 1.7e308])
def test_extreme_temperatures_draw_cleanly(tau: float) -> None:
    """No overflow warnings, a full batch of distinct tasks; a vanishing tau is greedy."""
    rng = np.random.default_rng(8)
    f0, f1 = rng.random(60) * 0.6, rng.random(60) * 0.4 + 0.6
    sel = DifficultyBasedSelector(
        DifficultyBasedConfig(tau=tau, target_reward=0.5), size=60, seed=1, features={"f0": f0, "f1": f1}
    )
    greedy = DifficultyBasedSelector(
        DifficultyBasedConfig(tau=0.0, target_reward=0.5), size=60, seed=1, features={"f0": f0, "f1": f1}
    )
    for s in (sel, greedy):  # every task then has its own cost (at Beta(1, 1) all tie, and ties are uniform)
        s.feedback([0, 1], [0.2, 0.9])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in (1, 10, 20, 60):
            idx, info = sel.get_indices(k, return_extra_info=True)
            assert np.unique(idx).size == k and np.isfinite(info["scores"]).all()
            if tau <= 1e-9:
                assert idx.tolist() == greedy.get_indices(k).tolist()
            values = rng.random(k)
            sel.feedback(idx, values)
            greedy.feedback(idx, values)


def test_regression_m_is_bounded_so_posteriors_keep_precision() -> None:
    """m >= 2**53 made Beta parameters lose all precision after one feedback (do_sample then raised
    ``ValueError: a <= 0``); m is now bounded by the config."""
    import flexkit

    with pytest.raises(flexkit.ConfigError, match=r"m: must be <= 1000000"):
        flexkit.make_selector("difficulty_based", size=4, m=2**53,
                              features={"f0": np.zeros(4), "f1": np.ones(4)})
    sel = flexkit.make_selector("difficulty_based", size=4, m=10**6, do_sample=True, tau=0.0,
                                features={"f0": np.zeros(4), "f1": np.ones(4)})
    sel.feedback([0, 1], [0.0, 1.0])
    assert len(sel.get_indices(2)) == 2
