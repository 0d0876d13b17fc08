"""difficulty_based's greedy index (``tau = 0``): the feature grid, the dirty groups and the exact top-k without a
pass over every task, through folds and resumes."""

from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.selectors import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.difficulty_based import _index_structures as gi
from flexkit.selectors.difficulty_based import tuning
from tests.selectors.difficulty_support import exact_greedy, make, random_features

# -- the greedy index: feature grid, dirty groups, exact top-k without a pass ---------------------------------


@contextlib.contextmanager
def index_on(**overrides: object):
    """The greedy index for every size (it is off below tuning.INDEX_MIN) and whatever budget; other knobs patched."""
    settings_ = {"INDEX_MIN": 0, "INDEX_BUDGET": 1.0, **overrides}
    with contextlib.ExitStack() as stack:
        for name, value in settings_.items():
            stack.enter_context(mock.patch.object(tuning, name, value))
        yield


def count_index_uses(sel: DifficultyBasedSelector) -> list[bool]:
    """Record, per greedy selection, whether the index answered (True) or gave way to the pass (False)."""
    uses: list[bool] = []
    original = sel.greedy_index.select

    def spy(k: int) -> np.ndarray | None:
        chosen = original(k)
        uses.append(chosen is not None)
        return chosen

    sel.greedy_index.select = spy  # type: ignore[method-assign]
    return uses


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
    m=st.sampled_from([1, 16, 1000]),
    lamb=st.sampled_from([0.0, 0.2, 0.9, 0.999]),
    rho=st.sampled_from([0.0, 0.3, 1.0]),
    target=st.sampled_from([0.0, 0.5, 1.0, 0.37]),
    coarse=st.booleans(),
    fold_below=st.sampled_from([1e-30, 0.3]),
    release=st.sampled_from([2.0**-40, 2.0**-12, 2.0**-12, 0.5]),
    dirty_max=st.sampled_from([0, 8, 1 << 15, 1 << 15]),
    budget=st.sampled_from([0.05, 1.0, 1.0]),
)
def test_indexed_greedy_equals_the_float64_top_k(
    n: int,
    seed: int,
    m: int,
    lamb: float,
    rho: float,
    target: float,
    coarse: bool,
    fold_below: float,
    release: float,
    dirty_max: int,
    budget: float,
) -> None:
    """The index only finds candidates: the batch is exactly the float64 top-k (ties, coarse features, folds,
    groups released early or late, and hand-overs to the pass included)."""
    rng = np.random.default_rng(seed)
    f0, f1 = random_features(rng, n)
    if coarse:
        f0, f1 = np.round(f0, 1), np.round(f1, 1)
    cfg = DifficultyBasedConfig(m=m, lamb=lamb, rho=rho, target_reward=target, tau=0.0)
    sel = DifficultyBasedSelector(cfg, size=n, seed=seed, features={"f0": f0, "f1": f1})
    sel.fold_below = fold_below
    with index_on(RELEASE_EPS=release, DIRTY_MAX=dirty_max, DIRTY_FRACTION=0.0, INDEX_BUDGET=budget):
        for _ in range(8):
            k = int(rng.integers(1, n + 1))
            expected = exact_greedy(sel, k)
            assert sel.get_indices(k).tolist() == expected
            observed = expected if rng.random() < 0.7 else rng.choice(n, size=k, replace=False).tolist()
            v = rng.random(k)
            sel.feedback(observed, np.round(v * 2) / 2 if coarse else v)


@pytest.mark.parametrize(("target", "c"), [(1.0, 0.0), (0.5, 1.0), (0.3, 0.5)])
def test_the_index_answers_without_a_pass(target: float, c: float) -> None:
    """A large taskset: after the first feedback every greedy batch comes from the index (no float32 pass),
    equal to the float64 top-k; grids keyed by either feature serve (c moves the prior's direction)."""
    n = 60_000
    rng = np.random.default_rng(4)
    f0 = rng.random(n) * 0.6
    f1 = np.minimum(f0 + rng.random(n) * 0.4, 1.0)
    sel = DifficultyBasedSelector(
        DifficultyBasedConfig(tau=0.0, target_reward=target), size=n, features={"f0": f0, "f1": f1}
    )
    sel.capability = c
    uses = count_index_uses(sel)
    with index_on(INDEX_BUDGET=0.125):
        for step in range(25):
            k = int(rng.integers(1, 300))
            expected = exact_greedy(sel, k)
            if step:
                with mock.patch.object(sel.costs, "greedy_fast", side_effect=AssertionError("full pass")):
                    assert sel.get_indices(k).tolist() == expected
            else:  # before any feedback every task ties: the pass answers
                assert sel.get_indices(k).tolist() == expected
            v = np.clip(f0[expected] + c * (f1[expected] - f0[expected]) + rng.normal(0, 0.2, k), 0, 1)
            sel.feedback(expected, v)
    assert uses[0] is False and all(uses[1:])
    assert sel.greedy_index.groups is not None and sel.greedy_index.groups.held < n // 8


def test_resume_is_exact_with_the_index() -> None:
    """The index is a cache: a resumed selector (which rebuilds it from the state) continues the same batches,
    also from a state saved before the model was part of it."""
    rng = np.random.default_rng(6)
    n = 3000
    f0, f1 = random_features(rng, n)

    def build() -> DifficultyBasedSelector:
        sel = DifficultyBasedSelector(
            DifficultyBasedConfig(tau=0.0, lamb=0.5, target_reward=0.8), size=n, features={"f0": f0, "f1": f1}
        )
        sel.fold_below = 1e-4  # folds every 14 steps
        return sel

    values = [rng.random(64) for _ in range(40)]
    with index_on():
        straight = build()
        expected = []
        for v in values:
            idx = straight.get_indices(64)
            expected.append(idx.tolist())
            straight.feedback(idx, v)
        assert straight.num_folds >= 2
        for drop_model in (False, True):
            sel, got = build(), []
            for i, v in enumerate(values):
                if i in (5, 17, 30):
                    state = sel.state_dict()
                    if drop_model:
                        del state["model"]
                    sel = build()
                    sel.load_state_dict(state)
                idx = sel.get_indices(64)
                got.append(idx.tolist())
                sel.feedback(idx, v)
            assert got == expected
            assert sel.state_dict()["model"] == straight.state_dict()["model"] or drop_model


def test_a_state_with_a_non_finite_model_is_refused() -> None:
    sel = make(10, seed=0)
    state = sel.state_dict()
    state["model"] = {**state["model"], "mp": float("nan")}
    with pytest.raises(ValueError, match="model"):
        make(10, seed=0).load_state_dict(state)


def test_the_model_follows_a_never_observed_task_through_folds() -> None:
    """m0 + mp·f0 + mq·f1 and ms are a never-observed task's α̃ and α̃ + β̃ (up to rounding), folds included."""
    sel = make(50, seed=0, lamb=0.5)
    sel.fold_below = 0.01
    rng = np.random.default_rng(0)
    for _ in range(30):
        sel.feedback(rng.choice(np.arange(10), size=5, replace=False), rng.random(5))
    assert sel.num_folds > 2
    m0, mp, mq, ms = sel.greedy_index.model
    rest = np.arange(10, 50)
    alpha_t, beta_t = sel.beliefs.stored_dense()
    f0, f1 = sel.feature_pair.f0, sel.feature_pair.f1
    np.testing.assert_allclose(alpha_t[rest], m0 + mp * f0[rest] + mq * f1[rest], rtol=1e-12)
    np.testing.assert_allclose(alpha_t[rest] + beta_t[rest], ms, rtol=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    bits=st.integers(1, 5),
    cx=st.floats(1e-3, 10.0),
    cy_ratio=st.floats(-1.0, 1.0),
    centre=st.floats(-1.0, 12.0),
    half=st.floats(0.0, 3.0),
)
def test_slab_grid_lists_every_point_of_a_slab(
    seed: int, n: int, bits: int, cx: float, cy_ratio: float, centre: float, half: float
) -> None:
    """Every point with lo ≤ cx·x + cy·y ≤ hi is listed (once); the others listed are near the slab."""
    rng = np.random.default_rng(seed)
    x, y = random_features(rng, n)
    grid = gi.SlabGrid(x, y, row_bits=bits, col_bits=bits)
    cy = cy_ratio * cx
    lo, hi = centre - half, centre + half
    listed = grid.points(grid.runs(cx, cy, lo, hi))
    assert np.unique(listed).size == listed.size
    assert gi.positions_to_read(grid.runs(cx, cy, lo, hi)) >= listed.size
    value = cx * x + cy * y
    inside = np.flatnonzero((value >= lo) & (value <= hi))
    assert set(inside.tolist()) <= set(listed.tolist())
    slack = abs(cy) / grid.rows + 2.0 * cx * 2.0**-grid.key_bits + 1e-9
    assert ((value[listed] >= lo - slack) & (value[listed] <= hi + slack)).all()


def test_dirty_groups_track_the_newest_group_of_each_task() -> None:
    groups = gi.DirtyGroups(20, 1)
    groups.add(np.array([1, 2, 3]), 5.0, (np.array([10.0, 20.0, 30.0]),))
    groups.add(np.array([3, 4]), 9.0, (np.array([31.0, 40.0]),))
    idx, mine, (rows,) = groups.held_rows()
    assert idx[mine].tolist() == [1, 2, 3, 4] and rows[mine].tolist() == [10.0, 20.0, 31.0, 40.0]
    groups.release(limit=6.0, max_held=100)  # the first group only: task 3 stays dirty (second group)
    assert groups.bound == 5.0 and groups.held == 2
    assert np.flatnonzero(groups.stamp >= 0).tolist() == [3, 4]
    for i in range(300):  # many groups: the buffers grow and move, the held rows stay right
        groups.add(np.array([5 + i % 10]), 1.0 + i, (np.array([float(i)]),))
        groups.release(limit=0.0, max_held=12)
    idx, mine, (rows,) = groups.held_rows()
    assert groups.held == 12 and groups.bound == 288.0  # groups 0..287 released
    assert sorted(zip(idx[mine].tolist(), rows[mine].tolist(), strict=True)) == sorted(
        (5 + i % 10, float(i)) for i in range(290, 300)
    )


@pytest.mark.parametrize(("lamb", "fold_below"), [(0.5, 0.01), (0.9, 1e-30), (0.2, 0.3)])
def test_residual_bounds_hold_through_feedback_and_folds(lamb: float, fold_below: float) -> None:
    """The invariant the index rests on: every regular task's residual is within the regular bound, every dirty
    task's within its group's; folds rescale the bounds in place (no pass over all tasks)."""
    rng = np.random.default_rng(2)
    n = 400
    f0, f1 = random_features(rng, n)
    sel = DifficultyBasedSelector(
        DifficultyBasedConfig(tau=0.0, lamb=lamb, target_reward=0.7), size=n, features={"f0": f0, "f1": f1}
    )
    sel.fold_below = fold_below
    rebuild = mock.patch.object(sel.greedy_index, "rebuild_groups", wraps=sel.greedy_index.rebuild_groups)
    with index_on(RELEASE_EPS=2.0**-20), rebuild as rebuilt:
        for _ in range(60):
            idx = sel.get_indices(int(rng.integers(1, 60)))
            sel.feedback(idx, rng.random(idx.size))
            groups = sel.greedy_index.groups
            assert groups is not None
            m0, mp, mq, ms = sel.greedy_index.model
            alpha_t, beta_t = sel.beliefs.stored_dense()
            residual = np.abs(alpha_t - (m0 + mp * f0 + mq * f1)) + np.abs(alpha_t + beta_t - ms)
            regular = groups.stamp < 0
            assert (residual[regular] <= groups.bound).all()
            for group in groups.groups:
                assert (residual[groups.tasks(group)] <= group.bound).all()
    assert sel.num_folds >= 2 and rebuilt.call_count == 1


def test_regression_the_index_answers_when_the_nearest_tasks_are_all_dirty() -> None:
    """Small batches right after large ones: the slab near the target held only dirty tasks, its runs looked
    too long to read, and the search bisected below them until it gave up (the pass answered instead)."""
    n = 60_000
    rng = np.random.default_rng(4)
    f0 = rng.random(n) * 0.6
    f1 = np.minimum(f0 + rng.random(n) * 0.4, 1.0)
    sel = DifficultyBasedSelector(
        DifficultyBasedConfig(tau=0.0, target_reward=0.3, lamb=0.6), size=n, features={"f0": f0, "f1": f1}
    )
    uses = count_index_uses(sel)
    with index_on(INDEX_BUDGET=0.125):
        for step in range(60):
            k = int(rng.integers(1, 10)) if step % 3 else int(rng.integers(100, 300))
            expected = exact_greedy(sel, k) if step % 10 == 0 else None
            idx = sel.get_indices(k)
            assert expected is None or idx.tolist() == expected
            sel.feedback(idx, rng.random(k))
    assert not uses[0] and all(uses[1:])
