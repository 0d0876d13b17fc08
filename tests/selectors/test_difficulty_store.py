"""difficulty_based's two stores of α̃, β̃ — dense arrays (up to ``tuning.DENSE_STORE_MAX`` tasks) and the sparse
store of recently observed tasks (above) — give the same selections and posteriors, bit for bit, through folds
and resumes, and a checkpoint of either loads into the other."""

from __future__ import annotations

import numpy as np
import pytest

import flexkit
from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._store import DenseTaskStore, TaskStore

CASES = [
    ("tau1", 4000, {"tau": 1.0}, None),
    ("tau0", 4000, {"tau": 0.0, "target_reward": 0.5}, None),
    ("tau0.01", 2000, {"tau": 0.01, "target_reward": 0.5}, None),
    ("tau0.5-folds", 2000, {"tau": 0.5}, 0.3),
    ("sample", 1500, {"tau": 0.3, "do_sample": True}, None),
    ("adaptive-folds", 3000, {"tau": 0.0, "adaptive_rho": True, "lamb": 0.5}, 1e-4),
]


def _features(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    f0 = rng.random(n) * 0.6
    return {"f0": f0, "f1": np.minimum(f0 + rng.random(n) * 0.4, 1.0)}


def _build(n: int, params: dict, fold_below: float | None, sparse: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tuning, "DENSE_STORE_MAX", 0 if sparse else 1 << 24)
    sel = flexkit.make_selector("difficulty_based", size=n, seed=1, features=_features(n), **params)
    if fold_below is not None:
        sel.fold_below = fold_below
    assert isinstance(sel.beliefs.store, TaskStore) and isinstance(sel.beliefs.store, DenseTaskStore) is not sparse
    return sel


def _play(sel, steps: int, start: int = 0) -> list[list[int]]:
    values = np.random.default_rng(3).random((start + steps, 48))
    out = []
    for i in range(start, start + steps):
        idx = np.asarray(sel.get_indices(48))
        out.append(idx.tolist())
        sel.feedback(idx, values[i])
    return out


@pytest.mark.parametrize(("name", "n", "params", "fold_below"), CASES, ids=[c[0] for c in CASES])
def test_dense_and_sparse_stores_agree_bit_for_bit(name: str, n: int, params: dict, fold_below: float | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dense = _build(n, params, fold_below, False, monkeypatch)
    sparse = _build(n, params, fold_below, True, monkeypatch)
    assert _play(dense, 40) == _play(sparse, 40)
    for a, b in zip(dense.posterior(), sparse.posterior(), strict=True):
        assert np.array_equal(a, b)
    assert (dense.num_folds, dense.capability) == (sparse.num_folds, sparse.capability)
    if fold_below is not None:
        assert dense.num_folds > 0
    assert sparse.beliefs.store.count < n  # only recently observed tasks are stored


@pytest.mark.parametrize(("name", "n", "params", "fold_below"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize(("save_sparse", "load_sparse"), [(False, True), (True, False)])
def test_a_checkpoint_of_either_store_resumes_in_the_other(name: str, n: int, params: dict,
                                                           fold_below: float | None, save_sparse: bool,
                                                           load_sparse: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _play(_build(n, params, fold_below, False, monkeypatch), 30)
    saver = _build(n, params, fold_below, save_sparse, monkeypatch)
    _play(saver, 15)
    state = saver.state_dict()
    loader = _build(n, params, fold_below, load_sparse, monkeypatch)
    loader.load_state_dict(state)
    assert _play(loader, 15, start=15) == expected[15:]


@pytest.mark.parametrize("load_sparse", [False, True])
def test_a_checkpoint_in_the_earlier_dense_format_resumes_in_either_store(load_sparse: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints written before the sparse store held every task's α̃, β̃ and no ``task_ids``."""
    n, params = 2000, {"tau": 0.5}
    expected = _play(_build(n, params, 0.3, False, monkeypatch), 30)
    saver = _build(n, params, 0.3, False, monkeypatch)
    _play(saver, 15)
    state = saver.state_dict()
    for key in ("task_ids", "num_tasks", "untouched"):
        state.pop(key)
    state["alpha_tilde"], state["beta_tilde"] = saver.beliefs.stored_dense()
    loader = _build(n, params, 0.3, load_sparse, monkeypatch)
    loader.load_state_dict(state)
    assert _play(loader, 15, start=15) == expected[15:]
