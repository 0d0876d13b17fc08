"""The difficulty_based selector: its lazy O(batch) update against a straightforward reference implementation,
selection behaviour, sampling distribution, validation and failure atomicity (the fast paths and samplers:
test_difficulty_fast_paths.py; the greedy index: test_difficulty_index.py)."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.errors import FeedbackError
from flexkit.selectors import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors import difficulty_based as db
from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._transform import Transform
from tests.selectors.difficulty_support import make, random_features


class EagerReference:
    """The update of Trinity-RFT's difficulty_based selector written the obvious way: every feedback
    rewrites every task's α and β. flexkit's deviations are included: c_est clipped to [0, 1], the c update
    skipped when the batch's reference features agree within 1e-6 (no epsilon in the denominator), c = 0.5
    before the first estimate."""

    def __init__(self, f0: np.ndarray, f1: np.ndarray, *, m: int, lamb: float, rho: float, adaptive_rho: bool) -> None:
        self.f0, self.f1 = np.asarray(f0, dtype=float), np.asarray(f1, dtype=float)
        self.m, self.lamb, self.rho, self.adaptive_rho = m, lamb, rho, adaptive_rho
        self.alpha = np.ones(self.f0.size)
        self.beta = np.ones(self.f0.size)
        self.c: float | None = None

    def update(self, idx: np.ndarray, v: np.ndarray) -> None:
        f0, f1, m, lamb = self.f0, self.f1, self.m, self.lamb
        den = f1[idx].mean() - f0[idx].mean()
        if abs(den) >= 1e-6:
            c_est = float(np.clip((v.mean() - f0[idx].mean()) / den, 0.0, 1.0))
            self.c = c_est if self.c is None else 0.9 * self.c + 0.1 * c_est
        c = 0.5 if self.c is None else self.c
        p_tilde = np.clip(f0 + c * (f1 - f0), 0.0, 1.0)
        if self.adaptive_rho and np.mean(np.abs(p_tilde[idx] - v)) >= 0.25:
            self.rho /= 2
        rho = self.rho
        s = np.zeros_like(f0)
        f = np.zeros_like(f0)
        s[idx] = v * m
        f[idx] = (1 - v) * m
        p_tilde[idx] = v
        self.alpha = (1 - lamb) * self.alpha + lamb + (1 - rho) * s + rho * p_tilde * m
        self.beta = (1 - lamb) * self.beta + lamb + (1 - rho) * f + rho * (1 - p_tilde) * m


# -- the lazy update equals the reference ----------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 64),
    lamb=st.one_of(st.sampled_from([0.0, 0.5, 0.99]), st.floats(0.0, 0.99)),
    rho=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)),
    adaptive_rho=st.booleans(),
    steps=st.integers(1, 25),
    fold_below=st.sampled_from([1e-30, 0.3]),
    chunk=st.sampled_from([3, 7, tuning.CHUNK]),
    target=st.floats(0.0, 1.0),
)
def test_lazy_posterior_equals_eager_reference(
    n: int,
    seed: int,
    m: int,
    lamb: float,
    rho: float,
    adaptive_rho: bool,
    steps: int,
    fold_below: float,
    chunk: int,
    target: float,
) -> None:
    rng = np.random.default_rng(seed)
    f0, f1 = random_features(rng, n)
    cfg = DifficultyBasedConfig(m=m, lamb=lamb, rho=rho, adaptive_rho=adaptive_rho, tau=0.0, target_reward=target)
    sel = DifficultyBasedSelector(cfg, size=n, seed=seed, features={"f0": f0, "f1": f1})
    sel.fold_below = fold_below  # 0.3 folds every few steps, exercising the fold path
    ref = EagerReference(f0, f1, m=m, lamb=lamb, rho=rho, adaptive_rho=adaptive_rho)
    with mock.patch.object(tuning, "CHUNK", chunk):
        for _ in range(steps):
            idx = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
            v = rng.random(idx.size)
            v[rng.random(idx.size) < 0.3] = rng.choice([0.0, 0.5, 1.0])
            sel.feedback(idx, v)
            ref.update(idx, v)
            alpha, beta = sel.posterior()
            np.testing.assert_allclose(alpha, ref.alpha, rtol=1e-9, atol=0)
            np.testing.assert_allclose(beta, ref.beta, rtol=1e-9, atol=0)
            assert (ref.c is None) == (sel.capability is None)
            if ref.c is not None:
                assert sel.capability == pytest.approx(ref.c, abs=1e-12)
            assert sel.rho == ref.rho
            a_idx, b_idx = sel.posterior(idx)
            assert a_idx.tolist() == alpha[idx].tolist() and b_idx.tolist() == beta[idx].tolist()
        # greedy selection takes k tasks whose reference scores are the k best
        k = int(rng.integers(1, n + 1))
        chosen = sel.get_indices(k)
        assert len(set(chosen.tolist())) == k
        ref_score = -np.abs(target - ref.alpha / (ref.alpha + ref.beta))
        np.testing.assert_allclose(np.sort(ref_score[chosen]), np.sort(ref_score)[-k:], rtol=0, atol=1e-9)


def test_fold_keeps_the_posterior_and_resets_the_transform() -> None:
    n = 30
    rng = np.random.default_rng(4)
    f0, f1 = random_features(rng, n)
    cfg = DifficultyBasedConfig(lamb=0.95, rho=0.4, m=8)
    sel = DifficultyBasedSelector(cfg, size=n, features={"f0": f0, "f1": f1})
    ref = EagerReference(f0, f1, m=8, lamb=0.95, rho=0.4, adaptive_rho=False)
    for _ in range(60):  # 0.05**60 < 1e-30: folds twice
        idx = rng.choice(n, size=5, replace=False)
        v = rng.random(5)
        sel.feedback(idx, v)
        ref.update(idx, v)
    assert sel.num_folds == 2
    np.testing.assert_allclose(np.stack(sel.posterior()), np.stack([ref.alpha, ref.beta]), rtol=1e-9)


def test_the_transform_maps_stored_values_to_the_posterior_and_saves_under_its_keys() -> None:
    """α = a·α̃ + b + p·f0 + q·f1 and β = a·β̃ + b_β − p·f0 − q·f1 with the transform's named fields, saved under the
    keys a, b, b_beta, p, q; a fold leaves the identity and the same posterior; a scale ≤ 0 is refused on load."""
    sel = make(40, seed=0, lamb=0.3)
    rng = np.random.default_rng(2)
    for _ in range(5):
        sel.feedback(rng.choice(40, size=8, replace=False), rng.random(8))
    t = sel.beliefs.transform
    alpha_t, beta_t = sel.beliefs.stored_dense()
    f0, f1 = sel.feature_pair.f0, sel.feature_pair.f1
    alpha, beta = sel.posterior()
    np.testing.assert_allclose(alpha, t.scale * alpha_t + t.alpha_shift + t.f0_slope * f0 + t.f1_slope * f1, rtol=1e-12)
    np.testing.assert_allclose(beta, t.scale * beta_t + t.beta_shift - t.f0_slope * f0 - t.f1_slope * f1, rtol=1e-12)
    assert t.scale < 1.0 and sel.state_dict()["transform"] == {
        "a": t.scale, "b": t.alpha_shift, "b_beta": t.beta_shift, "p": t.f0_slope, "q": t.f1_slope}
    sel._fold()
    assert sel.beliefs.transform == Transform() and sel.num_folds == 1
    np.testing.assert_allclose(np.stack(sel.posterior()), np.stack([alpha, beta]), rtol=1e-12)
    state = sel.state_dict()
    state["transform"] = {**state["transform"], "a": 0.0}
    with pytest.raises(ValueError, match="scale must be positive"):
        make(40).load_state_dict(state)


# -- cost: feedback touches only the batch ---------------------------------------------------------


def test_feedback_rewrites_only_the_batch_rows() -> None:
    n = 1000
    sel = make(n, lamb=0.2, rho=0.3)
    rng = np.random.default_rng(0)
    for _ in range(50):
        before_a, before_b = sel.beliefs.stored_dense()
        idx = rng.choice(n, size=16, replace=False)
        sel.feedback(idx, rng.random(16))
        untouched = np.ones(n, dtype=bool)
        untouched[idx] = False
        after_a, after_b = sel.beliefs.stored_dense()
        assert np.array_equal(after_a[untouched], before_a[untouched])
        assert np.array_equal(after_b[untouched], before_b[untouched])
        assert not np.array_equal(after_a[idx], before_a[idx])
    assert sel.num_folds == 0
    # ... and yet every task's posterior moved toward its interpolated prior
    alpha, beta = sel.posterior()
    assert not np.allclose(alpha, 1.0) and (alpha >= 1.0).all() and (beta >= 1.0).all()


# -- selection behaviour ---------------------------------------------------------------------------


def test_tasks_near_the_target_are_preferred() -> None:
    n = 30
    f0, f1 = np.full(n, 0.1), np.full(n, 0.3)
    cfg = DifficultyBasedConfig(target_reward=0.5, tau=0.0)
    sel = DifficultyBasedSelector(cfg, size=n, features={"f0": f0, "f1": f1})
    half, zero, one = [3, 8, 14, 20, 27], [0, 1, 2, 4, 5], [6, 7, 9, 10, 11]
    for _ in range(5):
        sel.feedback(half + zero + one, [0.5] * 5 + [0.0] * 5 + [1.0] * 5)
    idx, info = sel.get_indices(5, return_extra_info=True)
    assert sorted(idx.tolist()) == half
    np.testing.assert_allclose(info["predicted"], 0.5)
    # with a small temperature the sampler agrees almost always
    hot = DifficultyBasedSelector(
        DifficultyBasedConfig(target_reward=0.5, tau=0.01), size=n, seed=3, features={"f0": f0, "f1": f1}
    )
    hot.load_state_dict({**sel.state_dict(), "rng": hot.rng.bit_generator.state})
    assert sorted(hot.get_indices(5).tolist()) == half


def test_greedy_ties_go_to_the_smaller_index_and_the_batch_is_sorted_by_score() -> None:
    sel = make(10, tau=0.0)
    assert sel.get_indices(4).tolist() == [0, 1, 2, 3]  # every task starts at Beta(1, 1)
    sel = make(10, tau=0.0, target_reward=1.0, rho=0.0, lamb=0.5, m=1)
    sel.feedback([2, 5, 7], [1.0, 0.8, 0.0])
    idx, info = sel.get_indices(4, return_extra_info=True)
    assert idx.tolist() == [2, 5, 0, 1]
    assert (np.diff(info["scores"]) <= 0).all()


@pytest.mark.parametrize("chunk", [2, 5, tuning.CHUNK])
def test_smallest_k_matches_a_full_sort(chunk: int) -> None:
    rng = np.random.default_rng(0)
    with mock.patch.object(tuning, "CHUNK", chunk):
        for _ in range(200):
            n = int(rng.integers(1, 30))
            ties = rng.choice([1.0, 0.5, 0.0, 0.25, np.inf], size=n)
            values = ties if rng.random() < 0.5 else rng.random(n)
            k = int(rng.integers(1, n + 1))
            expected = np.lexsort((np.arange(n), values))[:k]
            assert db.smallest_k(values, k).tolist() == expected.tolist()


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def test_sampling_follows_softmax_without_replacement() -> None:
    tau = 0.2
    sel = make(4, seed=42, tau=tau, target_reward=1.0, rho=0.0, lamb=0.5, m=1)
    sel.feedback([0, 1, 2], [1.0, 0.6, 0.0])  # p̂ = 2/3, 1.6/3, 1/3, 1/2
    alpha, beta = sel.posterior()
    w = softmax(-np.abs(1.0 - alpha / (alpha + beta)) / tau)
    draws = 6000
    firsts = np.zeros(4)
    pairs = np.zeros(4)
    for _ in range(draws):
        idx = sel.get_indices(2)
        assert idx[0] != idx[1]
        firsts[idx[0]] += 1
        pairs[idx] += 1
    np.testing.assert_allclose(firsts / draws, w, atol=0.025)
    # inclusion probability of i in a sample of 2 drawn one by one without replacement
    incl = np.array([w[i] + sum(w[j] * w[i] / (1 - w[j]) for j in range(4) if j != i) for i in range(4)])
    np.testing.assert_allclose(pairs / draws, incl, atol=0.03)


def test_thompson_sampling_draws_around_the_posterior() -> None:
    sel = make(50, seed=1, do_sample=True, tau=0.0, target_reward=0.5)
    for _ in range(3):
        sel.feedback(np.arange(50), np.linspace(0, 1, 50))
    _, info = sel.get_indices(5, return_extra_info=True)
    mean = info["alpha"] / (info["alpha"] + info["beta"])
    assert not np.allclose(info["predicted"], mean)
    assert ((info["predicted"] > 0) & (info["predicted"] < 1)).all()
    np.testing.assert_allclose(info["scores"], -np.abs(0.5 - info["predicted"]))
    other = make(50, seed=1, do_sample=True, tau=0.0, target_reward=0.5)
    assert other.get_indices(5).tolist() != make(50, seed=2, do_sample=True, tau=0.0).get_indices(5).tolist()


def test_extra_info_describes_the_chosen_tasks() -> None:
    sel = make(20, seed=0, target_reward=0.7)
    sel.feedback([1, 2, 3], [0.2, 0.7, 1.0])
    idx, info = sel.get_indices(6, return_extra_info=True)
    alpha, beta = sel.posterior(idx)
    np.testing.assert_array_equal(info["alpha"], alpha)
    np.testing.assert_array_equal(info["beta"], beta)
    np.testing.assert_allclose(info["predicted"], alpha / (alpha + beta))
    np.testing.assert_allclose(info["scores"], -np.abs(0.7 - info["predicted"]))
    assert info["capability"] == sel.capability and info["rho"] == sel.rho
    assert sel.num_selected == 6 and sel.num_feedback == 1


def test_spawned_seeds_give_different_streams() -> None:
    s0, s1 = np.random.SeedSequence(0).spawn(2)
    a, b = make(200, seed=s0), make(200, seed=s1)
    a2 = make(200, seed=np.random.SeedSequence(0).spawn(2)[0])
    stream = [a.get_indices(8).tolist() for _ in range(5)]
    assert stream != [b.get_indices(8).tolist() for _ in range(5)]
    assert stream == [a2.get_indices(8).tolist() for _ in range(5)]


# -- the capability coefficient and adaptive rho ---------------------------------------------------


def test_capability_is_guarded_clipped_and_averaged() -> None:
    f0 = np.array([0.2, 0.2, 0.1, 0.3])
    f1 = np.array([0.2, 0.2, 0.5, 0.7])
    sel = DifficultyBasedSelector(DifficultyBasedConfig(), size=4, features={"f0": f0, "f1": f1})
    sel.feedback([0, 1], [0.9, 0.9])  # the reference models agree: no estimate (the reference would give 7e5)
    assert sel.capability is None
    sel.feedback([2, 3], [0.45, 0.55])  # c_est = (0.5 − 0.2) / (0.6 − 0.2) = 0.75
    assert sel.capability == pytest.approx(0.75)
    sel.feedback([2, 3], [1.0, 1.0])  # c_est = 2 → clipped to 1
    assert sel.capability == pytest.approx(0.9 * 0.75 + 0.1 * 1.0)
    sel.feedback([2], [0.0])  # c_est = −0.25 → clipped to 0
    assert sel.capability == pytest.approx(0.9 * (0.9 * 0.75 + 0.1) + 0.0)


def test_adaptive_rho_halves_rho_when_the_prior_misses() -> None:
    f0, f1 = np.full(6, 0.1), np.full(6, 0.2)
    cfg = DifficultyBasedConfig(adaptive_rho=True, rho=0.4)
    sel = DifficultyBasedSelector(cfg, size=6, features={"f0": f0, "f1": f1})
    sel.feedback([0, 1], [0.15, 0.15])  # c = 0.5, prior 0.15: no miss
    assert sel.rho == 0.4
    sel.feedback([2, 3], [0.9, 1.0])  # prior ≤ 0.2 vs ~0.95: miss
    assert sel.rho == 0.2
    fixed = DifficultyBasedSelector(DifficultyBasedConfig(rho=0.4), size=6, features={"f0": f0, "f1": f1})
    fixed.feedback([2, 3], [0.9, 1.0])
    assert fixed.rho == 0.4


# -- validation and atomicity ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"f0": np.zeros(4)}, "'f1' is missing"),
        ({"f0": np.zeros(4), "f1": np.zeros(5)}, "'f1' has 5 values for 4 tasks"),
        ({"f0": np.array([0.1, np.nan, 0, 0]), "f1": np.zeros(4)}, "'f0' contains NaN"),
        (
            {"f0": np.array([0.1, 1.5, 0, 0]), "f1": np.zeros(4)},
            r"'f0' must hold pass rates in \[0, 1\], got 1.5",
        ),
        ({"f0": np.zeros(4), "f1": np.array([0, -0.1, 0, 0])}, r"'f1' must hold .* got -0.1"),
    ],
)
def test_bad_features_are_rejected(features: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DifficultyBasedSelector(DifficultyBasedConfig(), size=4, features=features)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"feature_keys": ("a", "b", "c")}, "exactly 2"),
        ({"feature_keys": ("a",)}, "at least 2"),
        ({"lamb": 1.0}, "< 1"),
        ({"lamb": -0.1}, ">= 0"),
        ({"rho": 1.5}, "<= 1"),
        ({"m": 0}, ">= 1"),
        ({"tau": -1.0}, ">= 0"),
        ({"target_reward": 1.2}, "<= 1"),
        ({"tau": float("nan")}, "finite"),
    ],
)
def test_config_bounds(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DifficultyBasedConfig(**kwargs)


def test_reference_defaults() -> None:
    cfg = DifficultyBasedConfig()
    assert cfg.feature_keys == ("f0", "f1") and (cfg.m, cfg.lamb, cfg.rho) == (16, 0.2, 0.2)
    assert (cfg.adaptive_rho, cfg.target_reward, cfg.tau, cfg.do_sample) == (False, 1.0, 1.0, False)


def assert_states_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize(
    ("indices", "values", "kwargs"),
    [
        ([0, 1], [0.5, float("nan")], {}),
        ([0, 1], [0.5], {}),
        ([0, 0], [0.5, 0.5], {}),
        ([0, 99], [0.5, 0.5], {}),
        ([0, 1], [0.5, 1.5], {"out_of_range": "error"}),
    ],
)
def test_rejected_feedback_changes_nothing(indices: list, values: list, kwargs: dict) -> None:
    sel = make(10, seed=0)
    sel.feedback([2, 3], [0.1, 0.9])
    before = sel.state_dict()
    with pytest.raises(FeedbackError):
        sel.feedback(indices, values, **kwargs)
    assert_states_equal(before, sel.state_dict())


def test_feedback_values_outside_the_unit_interval_are_clipped_by_default() -> None:
    a, b = make(5), make(5)
    a.feedback([0, 1], [-3.0, 7.0])
    b.feedback([0, 1], [0.0, 1.0])
    assert_states_equal(a.state_dict(), b.state_dict())


def test_many_tasks_across_chunks() -> None:
    n = 3 * tuning.CHUNK + 17
    sel = make(n, seed=0, tau=0.5)
    rng = np.random.default_rng(1)
    for _ in range(3):
        idx = sel.get_indices(256)
        assert np.unique(idx).size == 256 and idx.max() < n
        sel.feedback(idx, rng.random(256))
    greedy = make(n, seed=0, tau=0.0)
    greedy.load_state_dict(sel.state_dict())
    idx = greedy.get_indices(64)
    alpha, beta = greedy.posterior()
    score = -np.abs(1.0 - alpha / (alpha + beta))
    assert idx.tolist() == np.lexsort((np.arange(n), -score))[:64].tolist()


def test_posterior_indices_and_full_agree_bitwise() -> None:
    sel = make(25, seed=0)
    for idx in itertools.combinations(range(25), 5):
        sel.feedback(list(idx), np.linspace(0, 1, 5))
        if sel.num_feedback > 40:
            break
    alpha, beta = sel.posterior()
    a_i, b_i = sel.posterior(np.arange(25))
    assert alpha.tolist() == a_i.tolist() and beta.tolist() == b_i.tolist()


# -- the caller's feature arrays -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8])
@pytest.mark.parametrize("tau", [0.0, 0.5])
def test_regression_writing_into_the_callers_arrays_afterwards_changes_nothing(dtype: type, tau: float) -> None:
    """make_selector kept views of the caller's arrays: writing into them later changed the selections and
    slipped a NaN or a value outside [0, 1] past the construction checks. The selector keeps its own copy."""
    import flexkit

    rng = np.random.default_rng(3)
    n = 400
    base0 = (rng.random(n) < 0.3) if dtype is np.int8 else rng.random(n) * 0.5
    base1 = np.maximum(base0, rng.random(n) < 0.7) if dtype is np.int8 else np.minimum(base0 + rng.random(n) * 0.5, 1.0)

    def play(sel: flexkit.Selector) -> list[list[int]]:
        picks, feedback = [], np.random.default_rng(9)
        for _ in range(6):
            idx = sel.get_indices(32)
            picks.append(idx.tolist())
            sel.feedback(idx, feedback.random(len(idx)))
        return picks

    expected = play(flexkit.make_selector("difficulty_based", size=n, seed=1, tau=tau,
                                          features={"f0": base0.astype(dtype), "f1": base1.astype(dtype)}))
    f0, f1 = base0.astype(dtype), base1.astype(dtype)
    sel = flexkit.make_selector("difficulty_based", size=n, seed=1, tau=tau, features={"f0": f0, "f1": f1})
    assert f0.flags.writeable  # the caller's array is left as it was
    f0[:] = 1 if dtype is np.int8 else np.nan  # a NaN the checks refuse (for floats), or every task solved
    f1[: n // 2] = 0
    assert not np.shares_memory(sel.feature_pair.f0, f0) and not np.shares_memory(sel.feature_pair.f1, f1)
    assert sel.feature_pair.f0.dtype == dtype and not sel.feature_pair.f0.flags.writeable
    assert play(sel) == expected


def test_regression_a_read_only_view_of_a_writable_array_is_copied_too() -> None:
    import flexkit

    f0, f1 = np.full(100, 0.2), np.full(100, 0.8)
    view0, view1 = f0.view(), f1.view()
    view0.setflags(write=False)
    view1.setflags(write=False)
    sel = flexkit.make_selector("difficulty_based", size=100, features={"f0": view0, "f1": view1})
    f0[:] = 5.0  # through the writable owner
    assert sel.feature_pair.f0.max() == 0.2
