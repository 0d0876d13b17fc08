"""difficulty_based at scale: the caller's feature arrays are kept without a copy whatever their dtype, float32 (or
integer) features pick exactly what float64 features of the same values pick in every regime (dense or sparse
store, float32 mirrors or not, either greedy-index layout), and the compact layout of the greedy index (above
``tuning.INDEX_DENSE_MAX`` tasks) lists every task of a slab and gives the exact top-k."""

from __future__ import annotations

import contextlib
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexkit
from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._compact_grid import CompactGrid
from flexkit.selectors.difficulty_based._index_structures import DirtyGroups, positions_to_read
from flexkit.selectors.difficulty_based._store import DenseTaskStore

#: The settings of a 10^8-task selector, at any size: sparse store, no float32 mirrors, compact greedy index.
HUGE = {"DENSE_STORE_MAX": 0, "MIRROR_MAX": 0, "FEATURE_MIRROR_MAX": 0, "INDEX_DENSE_MAX": 0}
REGIMES = {"small": {}, "huge": HUGE}
CONFIGS = {
    "greedy-index": ({"tau": 0.0, "target_reward": 0.5}, {"INDEX_MIN": 0, "INDEX_BUDGET": 1.0}),
    "greedy-pass": ({"tau": 0.0, "target_reward": 0.7, "lamb": 0.5}, {"INDEX_MIN": 1 << 40}),
    "tau1": ({"tau": 1.0}, {}),
    "tau0.5-adaptive": ({"tau": 0.5, "adaptive_rho": True, "target_reward": 0.5}, {}),
    "tau0.01": ({"tau": 0.01, "target_reward": 0.5}, {}),
    "tau1e-6": ({"tau": 1e-6, "target_reward": 0.4}, {}),
    "do_sample": ({"tau": 0.0, "do_sample": True, "m": 4}, {}),
}


@contextlib.contextmanager
def patched(**overrides: object):
    with contextlib.ExitStack() as stack:
        for name, value in overrides.items():
            stack.enter_context(mock.patch.object(tuning, name, value))
        yield


def grid_features(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """f0 ≤ f1 on a grid of 1/1024 (exact in float32; many ties), some pairs equal."""
    rng = np.random.default_rng(seed)
    f0 = np.floor(rng.random(n) * 0.6 * 1024) / 1024
    f1 = np.minimum(f0 + np.floor(rng.random(n) * 0.4 * 1024) / 1024, 1.0)
    same = rng.random(n) < 0.1
    f1[same] = f0[same]
    return f0, f1


def play(f0: np.ndarray, f1: np.ndarray, params: dict, steps: int = 30, batch: int = 48) -> tuple[list, tuple]:
    """The batches of ``steps`` select + feedback rounds and the final posterior of every task."""
    sel = flexkit.make_selector("difficulty_based", size=f0.size, seed=3, features={"f0": f0, "f1": f1}, **params)
    sel.fold_below = 1e-6  # folds within the run
    rng = np.random.default_rng(5)
    picks = []
    for step in range(steps):
        idx = sel.get_indices(batch)
        picks.append(idx.tolist())
        values = rng.random(batch) if step % 2 else rng.integers(0, 5, batch) / 4
        sel.feedback(idx, values)
    return picks, sel.posterior()


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_float32_and_float64_features_pick_the_same_tasks_in_every_regime(config: str) -> None:
    """Float32 features of the same values as float64 ones: the same batches and posteriors, bit for bit, with the
    dense store and float32 mirrors (small tasksets) and with the sparse store, no mirrors and the compact index (the
    10^8-task regime); all four runs agree."""
    params, knobs = CONFIGS[config]
    f0, f1 = grid_features(3000)
    runs = {}
    for regime, overrides in REGIMES.items():
        with patched(**knobs, **overrides):
            for dtype in (np.float64, np.float32):
                runs[regime, dtype] = play(f0.astype(dtype), f1.astype(dtype), params)
    first_picks, (first_alpha, first_beta) = runs["small", np.float64]
    for picks, (alpha, beta) in runs.values():
        assert picks == first_picks
        assert np.array_equal(alpha, first_alpha) and np.array_equal(beta, first_beta)


@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.bool_, np.float16])
def test_integer_bool_and_half_features_pick_what_float64_features_pick(dtype: type, regime: str) -> None:
    """0/1 features (integers, bools) and float16 ones are read as they are and pick what float64 copies pick."""
    rng = np.random.default_rng(1)
    f0 = (rng.random(2000) < 0.3).astype(np.float64)
    f1 = np.maximum(f0, rng.random(2000) < 0.6)
    if dtype is np.float16:
        f0, f1 = grid_features(2000, seed=2)
    params = {"tau": 0.0, "target_reward": 0.5}
    with patched(INDEX_MIN=0, **REGIMES[regime]):
        picks, (alpha, beta) = play(f0.astype(dtype), f1.astype(dtype), params, steps=12)
        expected, (alpha64, beta64) = play(f0, f1, params, steps=12)
    assert picks == expected and np.array_equal(alpha, alpha64) and np.array_equal(beta, beta64)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8])
def test_the_selector_keeps_read_only_arrays_without_a_copy(dtype: type) -> None:
    """make_selector and the selector keep arrays nobody can write (views on them, no copy), whatever the
    dtype; writable ones are copied in their dtype (tests/selectors/test_difficulty_based.py)."""
    f0 = np.zeros(500, dtype=dtype)
    f1 = np.ones(500, dtype=dtype)
    f0.setflags(write=False)
    f1.setflags(write=False)
    sel = flexkit.make_selector("difficulty_based", size=500, features={"f0": f0, "f1": f1})
    pair = sel.feature_pair
    assert np.shares_memory(pair.f0, f0) and np.shares_memory(pair.f1, f1)
    assert pair.f0.dtype == dtype and not pair.f0.flags.writeable
    if dtype is not np.float64:  # float32-exact values: the float32 pass reads them as they are, too
        assert np.shares_memory(pair.f0_fast, f0)
    other = flexkit.make_selector("offline_easy2hard", size=500, features={"f0": f0})
    assert other.features["f0"].dtype == np.float64  # other selectors still get float64 columns, as before


def _construction_peak(n: int, dtype: type) -> int:
    f0, f1 = grid_features(n)
    f0, f1 = f0.astype(dtype), f1.astype(dtype)
    f0.setflags(write=False)  # read-only: the selector keeps them without a copy
    f1.setflags(write=False)
    with patched(**HUGE):
        tracemalloc.start()
        try:
            sel = flexkit.make_selector("difficulty_based", size=n, features={"f0": f0, "f1": f1}, tau=0.0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert isinstance(sel, flexkit.Selector) and not isinstance(sel.beliefs.store, DenseTaskStore)
    return peak


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_construction_makes_no_full_size_float64_copy(dtype: type) -> None:
    """In the 10^8-task regime construction allocates the store's 4-byte slots and chunk buffers only: far below
    the 8 bytes per task of a float64 copy of one feature column."""
    n = 1 << 20
    assert _construction_peak(n, dtype) < 5 * n


def test_greedy_steps_allocate_nothing_of_the_taskset_size() -> None:
    """Greedy steps through the compact index (after the warm-up that builds it) allocate far less than a byte per
    task (what they read grows with the batch, the recently observed tasks and a slab), for independent and for
    strongly correlated features."""
    n = 1 << 22
    f0, f1 = grid_features(n)
    for second in (f1, np.minimum(f0 + 0.2, 1.0)):
        with patched(**HUGE, INDEX_MIN=0):
            sel = flexkit.make_selector("difficulty_based", size=n, seed=0, tau=0.0,
                                        features={"f0": f0.astype(np.float32), "f1": second.astype(np.float32)})
            rng = np.random.default_rng(0)
            uses = []
            original = sel.greedy_index.select

            def spy(k: int, original=original, uses=uses) -> np.ndarray | None:
                chosen = original(k)
                uses.append(chosen is not None)
                return chosen

            sel.greedy_index.select = spy  # type: ignore[method-assign]
            for _ in range(3):
                sel.feedback(sel.get_indices(256), rng.random(256))
            tracemalloc.start()
            try:
                for _ in range(5):
                    sel.feedback(sel.get_indices(256), rng.random(256))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert all(uses[1:]), uses  # the index answered every step after the first
        assert peak < n // 2, peak  # a full-size array is n bytes at least (a bool mask), float32 4n


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    bits=st.integers(1, 5),
    cx=st.floats(1e-3, 10.0),
    cy_ratio=st.floats(-8.0, 8.0),
    centre=st.floats(-1.0, 12.0),
    half=st.floats(0.0, 3.0),
    band=st.sampled_from([1, 7, 1 << 22]),
    shape=st.sampled_from(["random", "coarse", "correlated"]),
    search_min=st.sampled_from([0, 3, 64]),
)
def test_compact_grid_lists_every_point_of_a_slab(
    seed: int, n: int, bits: int, cx: float, cy_ratio: float, centre: float, half: float, band: int, shape: str,
    search_min: int,
) -> None:
    """Every point with lo ≤ cx·x + cy·y ≤ hi is listed once; the others listed are near the slab (whatever the
    bands the grid was sorted in, and whether buckets are narrowed by binary search or filtered)."""
    rng = np.random.default_rng(seed)
    x, y = rng.random(n), rng.random(n)
    if shape == "coarse":
        x, y = np.round(x, 1), np.round(y, 1)
    elif shape == "correlated":
        y = np.minimum(x + 0.2, 1.0)
    with mock.patch("flexkit.selectors.difficulty_based._compact_grid._BAND_POINTS", band):
        grid = CompactGrid(x.astype(np.float32), y, row_bits=bits, col_bits=max(bits - 1, 1))
    search = mock.patch("flexkit.selectors.difficulty_based._compact_grid._SEARCH_MIN", search_min)
    assert np.array_equal(np.sort(grid.packed & np.uint32((1 << grid.id_bits) - 1)), np.arange(n))
    x = x.astype(np.float32).astype(np.float64)
    cy = cy_ratio * cx
    lo, hi = centre - half, centre + half
    with search:
        runs = grid.runs(cx, cy, lo, hi)
    listed = grid.points(runs)
    assert np.unique(listed).size == listed.size and positions_to_read(runs) >= listed.size
    value = cx * x + cy * y
    inside = np.flatnonzero((value >= lo) & (value <= hi))
    assert set(inside.tolist()) <= set(listed.tolist())
    slack = abs(cy) / grid.rows + 2.0 * cx * 2.0**-grid.q_bits + 1e-9
    assert ((value[listed] >= lo - slack) & (value[listed] <= hi + slack)).all()


def test_compact_dirty_groups_track_the_newest_group_of_each_task() -> None:
    """The compact dirty groups (a bit per task) hold the same tasks and rows as the stamped ones."""
    dense, compact = DirtyGroups(40, 1), DirtyGroups(40, 1, compact=True)
    rng = np.random.default_rng(0)
    for i in range(300):
        idx = rng.choice(40, size=int(rng.integers(1, 6)), replace=False)
        limit, max_held = float(rng.integers(0, i + 2)), int(rng.integers(4, 30))
        for groups in (dense, compact):
            groups.add(idx, 1.0 + i, (idx * 10.0 + i,))
            groups.release(limit=limit, max_held=max_held)
        everyone = np.arange(40)
        assert np.array_equal(dense.regular(everyone), compact.regular(everyone))
        (d_idx, d_mine, (d_rows,)), (c_idx, c_mine, (c_rows,)) = dense.held_rows(), compact.held_rows()
        assert np.array_equal(d_idx, c_idx) and np.array_equal(d_mine, c_mine) and np.array_equal(d_rows, c_rows)
        assert dense.bound == compact.bound
