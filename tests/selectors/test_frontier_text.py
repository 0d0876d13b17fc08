"""``frontier`` with ``text_key``: a pass-rate model over hashed prompt n-grams makes the groups of a pool with no
label. The model must learn the level from the prompts alone (synthetic feedback, no training), its automatic
groups must separate the levels, and its state must resume exactly."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexkit
from flexkit.errors import ConfigError, StateMismatchError, TasksetError
from flexkit.selectors._base import columns_of
from flexkit.selectors._prompt_model import (
    FEATURE_CACHE_BYTES,
    HashedFeatures,
    PromptPassModel,
    PromptTexts,
    reference_sample,
)
from flexkit.selectors.frontier import FrontierConfig, FrontierSelector

#: True pass rate of each level (1-6) in the synthetic feedback: easy levels solved, hard ones out of reach.
LEVEL_PASS = np.array([0.95, 0.7, 0.4, 0.15, 0.05, 0.01])


def addition_pool(size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded addition prompts of levels 1-6 (the arithmetic storage's ``label = "none"`` format) and each
    one's level."""
    rng = np.random.default_rng(seed)
    levels = rng.permutation(np.arange(size) % 6 + 1)
    high = 10 ** levels
    low = np.where(levels > 1, 10 ** (levels - 1), 0)
    a = low + (rng.random(size) * (high - low)).astype(np.int64)
    b = (rng.random(size) * high).astype(np.int64)
    return np.array([f"{x:06d}+{y:06d}=" for x, y in zip(a.tolist(), b.tolist(), strict=True)]), levels


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (ties ranked by their mean rank)."""

    def ranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=r)
        return np.asarray(sums[inverse] / counts[inverse])

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def text_selector(size: int = 6000, seed: int = 0, **params: Any) -> tuple[FrontierSelector, np.ndarray]:
    prompts, levels = addition_pool(size)
    sel = flexkit.make_selector("frontier", size=size, seed=seed, features={"prompt": prompts},
                                text_key="prompt", **{"bins": 6, "discount": 0.95, "retain": 0.0, **params})
    assert isinstance(sel, FrontierSelector)
    return sel, levels


def train(sel: FrontierSelector, levels: np.ndarray, steps: int, seed: int = 1) -> None:
    """Select and feed back each task's sampled pass rate (8 answers at its level's true pass rate)."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = sel.get_indices(64)
        assert isinstance(idx, np.ndarray)
        sel.feedback(idx, rng.binomial(8, LEVEL_PASS[levels[idx] - 1]) / 8)


def test_the_model_ranks_the_levels_from_the_prompts_alone() -> None:
    sel, levels = text_selector()
    train(sel, levels, 80)
    predicted = sel.predicted_pass_rates()
    assert predicted is not None
    assert spearman(predicted, LEVEL_PASS[levels - 1]) > 0.8
    means = [float(predicted[levels == level].mean()) for level in range(1, 7)]
    assert means == sorted(means, reverse=True), means  # easier levels predicted easier, in order


def test_the_automatic_groups_separate_the_levels() -> None:
    sel, levels = text_selector()
    train(sel, levels, 80)
    groups = sel.group_of(np.arange(len(levels)))
    top = sel.config.bins - 1
    assert (groups[levels == 1] == top).mean() > 0.8  # most of level 1 in the top group (highest predicted rate)
    assert (groups[levels == 6] == top).mean() < 0.02
    assert (groups[levels == 6] <= 1).mean() > 0.8  # and level 6 in the two lowest
    sizes = np.bincount(groups, minlength=top + 1)
    assert sizes.min() > 0.5 * len(levels) / (top + 1)  # quantile groups: about equal sizes


def test_draws_move_to_the_frontier() -> None:
    """Fed back by level, the selection draws the informative middle levels more than the solved and hopeless
    ones, as frontier by the level column does."""
    sel, levels = text_selector()
    train(sel, levels, 80)
    drawn = np.concatenate([np.asarray(sel.get_indices(64)) for _ in range(30)])
    share = np.bincount(levels[drawn], minlength=7)[1:] / len(drawn)
    assert share[2] + share[3] > 2 * (share[0] + share[5]), share


def test_before_any_feedback_every_task_is_alike() -> None:
    sel, _ = text_selector(size=600)
    predicted = sel.predicted_pass_rates()
    assert predicted is not None and np.allclose(predicted, 0.5)
    assert len(np.unique(sel.group_of(np.arange(600)))) == 1


def test_text_that_says_nothing_predicts_nothing_for_unseen_tasks() -> None:
    """Random prompts with pass rates independent of their text: the model can remember the tasks it was fed (their
    own n-grams), but tells nothing about the tasks it never saw."""
    rng = np.random.default_rng(3)
    prompts = np.array(["".join(rng.choice(list("0123456789"), 12)) for _ in range(2000)])
    passes = (rng.random(2000) < 0.5).astype(float)
    sel = flexkit.make_selector("frontier", size=2000, seed=0, features={"prompt": prompts}, text_key="prompt",
                                bins=4)
    seen = np.zeros(2000, dtype=bool)
    for _ in range(15):
        idx = np.asarray(sel.get_indices(64))
        sel.feedback(idx, passes[idx])
        seen[idx] = True
    predicted = sel.predicted_pass_rates()
    assert predicted is not None
    assert abs(spearman(predicted[~seen], passes[~seen])) < 0.1


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(0, 6), bins=st.integers(2, 9),
       retain=st.sampled_from([0.0, 0.5]), prior=st.sampled_from([0.0, 4.0]))
def test_state_round_trip_gives_identical_next_selections(seed: int, steps: int, bins: int, retain: float,
                                                           prior: float) -> None:
    params = {"bins": bins, "retain": retain, "retain_above": 0.6, "group_prior": prior}
    sel, levels = text_selector(size=400, seed=seed, **params)
    train(sel, levels, steps, seed=seed)
    state = json.loads(json.dumps(sel.state_dict(), default=lambda a: a.tolist()))  # plain data only
    fresh, _ = text_selector(size=400, seed=seed + 1, **params)
    fresh.load_state_dict(state)
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(3):
        a, b = np.asarray(sel.get_indices(32)), np.asarray(fresh.get_indices(32))
        np.testing.assert_array_equal(a, b)
        values = rng_a.random(32)
        np.testing.assert_array_equal(values, rng_b.random(32))
        sel.feedback(a, values)
        fresh.feedback(b, values)
    np.testing.assert_array_equal(sel.predicted_pass_rates(), fresh.predicted_pass_rates())


def test_a_state_without_the_model_is_refused_and_changes_nothing() -> None:
    sel, levels = text_selector(size=400)
    train(sel, levels, 3)
    before = sel.state_dict()
    broken = {k: v for k, v in before.items() if k != "model"}
    with pytest.raises(StateMismatchError, match="pass-rate model"):
        sel.load_state_dict(broken)
    wrong = {**before, "model": {**before["model"], "precision": -before["model"]["precision"]}}
    with pytest.raises(StateMismatchError, match="precision"):
        sel.load_state_dict(wrong)
    np.testing.assert_array_equal(sel.state_dict()["model"]["mean"], before["model"]["mean"])


@pytest.mark.parametrize(("params", "message"), [
    ({"bins": 0}, "bins = 0 makes none"),
    ({"bins": 4, "feature_keys": ("level",)}, "set one of them"),
    ({"bins": 4, "retain": 1.0, "guard_metric": "val_accuracy/{}"}, "which no evaluation names"),
])
def test_configs_that_cannot_work_are_refused(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FrontierConfig(text_key="prompt", **params)


def test_a_whole_pool_guard_is_accepted() -> None:
    """Without a label a guard can still read one metric for the whole pool."""
    sel, levels = text_selector(size=600, retain=1.0, retain_above=0.5, guard_metric="val_accuracy")
    train(sel, levels, 20)
    sel.observe_evaluation({"val_accuracy": 0.5})
    sel.observe_evaluation({"val_accuracy": 0.3})  # a slide: the learnt groups get the floor
    assert (sel.floor_shares()[sel.learnt_groups()] == 1).all()


def test_a_missing_or_non_text_column_is_named() -> None:
    with pytest.raises(TasksetError, match="'prompt' is missing"):
        FrontierSelector(FrontierConfig(text_key="prompt", bins=4), size=3, features={"other": np.zeros(3)})
    with pytest.raises(TasksetError, match="must hold strings"):
        FrontierSelector(FrontierConfig(text_key="prompt", bins=4), size=2,
                         features={"prompt": np.array([1, 2], dtype=object)})


def test_the_pipeline_loads_the_text_column() -> None:
    assert columns_of(FrontierConfig(text_key="prompt", bins=4)) == ("prompt",)
    assert columns_of(FrontierConfig(feature_keys=("level",))) == ("level",)


def test_hashing_is_signed_bounded_and_deterministic() -> None:
    texts = PromptTexts(["ab", "abab", "", "zzzz"], "t", "prompt")
    features = HashedFeatures(texts, hash_bits=6, ngrams=3)
    rows, cols, vals = features.rows(np.arange(4))
    assert cols.max() == features.dim - 1 and cols.min() >= 0  # the bias is the last column
    assert (vals[cols == features.dim - 1] == 1).all() and (np.bincount(rows) >= 1).all()
    # the same prompt hashes the same wherever it is, and each row's keys are distinct
    again = HashedFeatures(PromptTexts(["zzzz", "ab"], "t", "prompt"), hash_bits=6, ngrams=3).rows(np.arange(2))
    same = [(c, v) for r, c, v in zip(*again, strict=True) if r == 1]
    assert same == [(c, v) for r, c, v in zip(rows, cols, vals, strict=True) if r == 0]
    for r in range(4):
        assert len(set(cols[rows == r].tolist())) == int((rows == r).sum())


def test_features_hashed_on_demand_equal_the_kept_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts, _ = addition_pool(300)
    kept = HashedFeatures(PromptTexts(prompts, "t", "p"), 8, 3)
    monkeypatch.setattr("flexkit.selectors._prompt_model.FEATURE_CACHE_BYTES", 0)
    on_demand = HashedFeatures(PromptTexts(prompts, "t", "p"), 8, 3)
    assert kept.cached and not on_demand.cached and FEATURE_CACHE_BYTES > 0
    idx = np.array([5, 0, 299, 17])
    for x, y in zip(kept.rows(idx), on_demand.rows(idx), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6)


def test_the_update_is_the_laplace_map_and_forgetting_widens_the_posterior() -> None:
    """One update's mean is the minimum of its objective (the gradient vanishes there), precision grows by the
    curvature, and the discount pulls the precision back toward the prior."""
    prompts, levels = addition_pool(200)
    model = PromptPassModel(HashedFeatures(PromptTexts(prompts, "t", "p"), 8, 2), prior_precision=1.0, discount=0.5)
    idx = np.arange(64)
    y = LEVEL_PASS[levels[idx] - 1]
    model.update(idx, y)
    rows, cols, vals = model.features.rows(idx)
    x = np.zeros((64, model.features.dim))
    np.add.at(x, (rows, cols), vals)
    p = 1.0 / (1.0 + np.exp(-(x @ model.mean)))
    grad = 1.0 * model.mean + x.T @ (p - y)  # prior N(0, 1): q (w − 0) + Xᵀ(σ − y)
    assert np.abs(grad).max() < 1e-6
    np.testing.assert_allclose(model.precision, 1.0 + (x * x).T @ (p * (1 - p)))
    before = model.precision.copy()
    model.update(np.array([], dtype=np.int64), np.array([]))
    np.testing.assert_allclose(model.precision, 1.0 + 0.5 * (before - 1.0))


def test_the_reference_sample_is_fixed() -> None:
    np.testing.assert_array_equal(reference_sample(50, 100), np.arange(50))
    a, b = reference_sample(10_000, 100), reference_sample(10_000, 100)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 100


def test_the_summary_holds_each_quantile_groups_predicted_against_observed_pass_rate() -> None:
    """How a user tells the prompt model works from a run's metrics: ``predicted/<group>`` rises from the lowest
    quantile to the highest and tracks the group's observed ``pass_rate/<group>``; a model replaced by a constant
    prediction gives one rate for every group."""
    sel, levels = text_selector()
    train(sel, levels, 80)
    summary = sel.summary()
    names = list(sel.groups.names)
    predicted = [summary[f"predicted/{name}"] for name in names]
    observed = [summary[f"pass_rate/{name}"] for name in names]
    assert predicted == sorted(predicted) and predicted[-1] - predicted[0] > 0.5, predicted
    assert spearman(np.array(predicted), np.array(observed)) > 0.8
    assert max(abs(p - o) for p, o in zip(predicted, observed, strict=True)) < 0.25
    flat, _ = text_selector(size=600)  # no feedback: every prediction 0.5, so one (the top) quantile holds them all
    assert [value for key, value in flat.summary().items() if key.startswith("predicted/")] == [0.5]
    by_column = flexkit.make_selector("frontier", size=6, seed=0, features={"level": np.arange(6)},
                                      feature_keys=["level"])
    assert not any(key.startswith("predicted/") for key in by_column.summary())
