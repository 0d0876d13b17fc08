"""TaskTable: learnability and thompson_target choose the same tasks whether their per-task values are dense
arrays or a sparse table of the tasks with feedback (the layout above 2^24 tasks), and resume across layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexkit.selectors._task_table as task_table
from flexkit.pipeline._pipeline import make_selector
from flexkit.selectors._task_table import TaskTable

SELECTORS = [
    ("learnability", {"candidates": 4.0, "tau": 0.5, "decay": 0.9}),
    ("learnability", {"candidates": 2.0, "tau": 0.0, "feature_keys": ["level"]}),
    ("thompson_target", {"candidates": 4.0, "discount": 0.5, "m": 8}),
]
SIZE = 500


def _build(name: str, params: dict, sparse: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(task_table, "DENSE_MAX", 10 if sparse else 1 << 24)
    features = {"level": np.arange(SIZE) % 4} if params.get("feature_keys") else None
    return make_selector(name, size=SIZE, seed=3, features=features, **params)


def _play(selector: object, steps: int, start: int = 0) -> list[list[int]]:
    picks = []
    for step in range(start, start + steps):
        idx = selector.get_indices(16)
        picks.append(idx.tolist())
        selector.feedback(idx, ((idx * 7 + step) % 9) / 8.0)
    return picks


@pytest.mark.parametrize(("name", "params"), SELECTORS)
def test_sparse_and_dense_layouts_pick_the_same_tasks(name: str, params: dict,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dense = _build(name, params, False, monkeypatch)
    sparse = _build(name, params, True, monkeypatch)
    assert not dense.table.sparse and sparse.table.sparse
    assert _play(dense, 30) == _play(sparse, 30)
    assert sparse.table.stored() < SIZE  # only tasks with feedback hold memory
    for attr in ("estimates", "posterior_mean"):
        if hasattr(dense, attr):
            assert np.array_equal(getattr(dense, attr)(), getattr(sparse, attr)())


@pytest.mark.parametrize(("name", "params"), SELECTORS)
@pytest.mark.parametrize(("save_sparse", "load_sparse"), [(False, True), (True, False), (True, True)])
def test_a_state_resumes_exactly_in_either_layout(name: str, params: dict, save_sparse: bool, load_sparse: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _build(name, params, False, monkeypatch)
    expected = _play(reference, 20)
    saver = _build(name, params, save_sparse, monkeypatch)
    _play(saver, 10)
    state = saver.state_dict()
    assert ("task_ids" in state) is save_sparse
    loader = _build(name, params, load_sparse, monkeypatch)
    loader.load_state_dict(state)
    assert _play(loader, 10, start=10) == expected[10:]


def test_bad_sparse_states_are_refused_and_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    sel = _build("thompson_target", {}, True, monkeypatch)
    _play(sel, 3)
    good = sel.state_dict()
    for edit, message in [
        ({"task_ids": good["task_ids"][::-1]}, "sorted, distinct"),
        ({"task_ids": np.append(good["task_ids"][:-1], SIZE)}, r"ids in 0 \.\. 499"),
        ({"alpha": good["alpha"][:-1]}, "differ in length"),
        ({"beta": np.where(np.arange(len(good["beta"])) == 0, 0.0, good["beta"])}, "must be > 0"),
        ({"alpha": np.full(len(good["alpha"]), np.nan)}, "NaN"),
    ]:
        with pytest.raises(ValueError, match=message):
            sel.load_state_dict({**good, **edit})
    assert repr(sel.state_dict()) == repr(good)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 99), min_size=1, max_size=8, unique=True), max_size=12))
def test_table_get_and_set_match_dense_arrays(updates: list[list[int]]) -> None:
    table = TaskTable(100, (1.5, 2.5), ("a", "b"))
    table.sparse = True  # the sparse layout at a small size
    table._slots, table._a, table._b = {}, np.empty(0), np.empty(0)
    a, b = np.full(100, 1.5), np.full(100, 2.5)
    for k, ids in enumerate(updates):
        idx = np.asarray(ids)
        got_a, got_b = table.get(idx)
        assert np.array_equal(got_a, a[idx]) and np.array_equal(got_b, b[idx])
        table.set(idx, got_a * 0.5 + k, got_b + 1.0)
        a[idx], b[idx] = a[idx] * 0.5 + k, b[idx] + 1.0
    dense_a, dense_b = table.dense()
    assert np.array_equal(dense_a, a) and np.array_equal(dense_b, b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([1.0, 2.0, 3.5, -1.0, 7.0, 1e6]), min_size=1, max_size=60),
       st.integers(1, 7))
def test_group_ids_of_a_long_column_read_in_chunks_are_np_uniques(values: list[float], chunk: int) -> None:
    from flexkit.selectors import _grouping
    from flexkit.selectors._grouping import TaskGroups

    column = np.asarray(values)
    uniques, inverse = np.unique(column, return_inverse=True)
    original = _grouping.GROUP_CHUNK
    try:
        _grouping.GROUP_CHUNK = chunk
        groups = TaskGroups.from_features({"x": column}, ["x"], len(column))
    finally:
        _grouping.GROUP_CHUNK = original
    assert groups.count == len(uniques) and groups.group.tolist() == inverse.tolist()
