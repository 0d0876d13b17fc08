"""difficulty_based resumes from checkpoints written by an earlier version of its code.

``tests/selectors/data/difficulty_based/<case>/`` holds, per case, a checkpoint
(:func:`flexkit.pipeline._checkpoint.save_state`)
written by the code of commit ``dc57cc5`` (before the selector was rebuilt from named parts): the selector's state
after a few steps, its feature columns, and in ``meta`` the configuration, the tuning patches in force and the
batches that commit's selector went on to pick after resuming. Loading the state into today's selector must give
the same batches, bit for bit. The cases cover every selection path: rejection sampling (``tau = 1``), the
envelope and Gumbel-window samplers (small ``tau``), Thompson draws, the float32 greedy pass and the greedy index
over the sparse store, with folds in the saved state.

The fixtures were made by ``python -m tests.selectors.test_difficulty_saved_checkpoints --write`` on that commit;
never rewrite them with newer code (they would then prove nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.selectors import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.difficulty_based import tuning

DATA = Path(__file__).parent / "data" / "difficulty_based"

#: name: (tasks, config, tuning patches, fold_below, batch size, steps before saving, steps after resuming)
CASES: dict[str, tuple[int, dict[str, Any], dict[str, int], float, int, int, int]] = {
    "rejection": (400, {"tau": 1.0}, {}, 1e-30, 32, 20, 10),
    "envelope": (400, {"tau": 0.05, "target_reward": 0.5, "lamb": 0.5}, {}, 1e-3, 24, 20, 10),
    "thompson": (300, {"tau": 0.3, "do_sample": True, "adaptive_rho": True, "lamb": 0.5}, {}, 1e-3, 16, 20, 10),
    "greedy-pass": (500, {"tau": 0.0, "target_reward": 0.7, "m": 4, "rho": 0.5}, {}, 1e-30, 40, 20, 10),
    "greedy-index": (
        2000, {"tau": 0.0, "target_reward": 0.5, "lamb": 0.9},
        {"INDEX_MIN": 0, "INDEX_BUDGET": 1, "DENSE_STORE_MAX": 0}, 1e-30, 64, 40, 12,
    ),
}


@contextlib.contextmanager
def _patched(patches: dict[str, int]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name, value in patches.items():
            stack.enter_context(mock.patch.object(tuning, name, value))
        yield


def _features(name: str, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))
    f0 = np.round(rng.random(n) * 0.6, 3)
    return {"f0": f0, "f1": np.minimum(f0 + np.round(rng.random(n) * 0.4, 3), 1.0)}


def _build(config: dict[str, Any], features: dict[str, np.ndarray], fold_below: float) -> DifficultyBasedSelector:
    n = features["f0"].size
    sel = DifficultyBasedSelector(DifficultyBasedConfig(**config), size=n, seed=5, features=features)
    sel.fold_below = fold_below
    return sel


def _play(sel: DifficultyBasedSelector, k: int, steps: int, seed: int) -> list[list[int]]:
    """``steps`` selections of ``k`` tasks, each fed back values drawn from ``seed``'s stream."""
    values = np.random.default_rng(seed)
    batches = []
    for _ in range(steps):
        idx = np.asarray(sel.get_indices(k))
        batches.append(idx.tolist())
        sel.feedback(idx, np.round(values.random(k), 2))
    return batches


def write(root: Path = DATA) -> None:
    """Write every case's checkpoint and the batches picked after it (run on the commit named above only)."""
    for name, (n, config, patches, fold_below, k, before, after) in CASES.items():
        features = _features(name, n)
        with _patched(patches):
            sel = _build(config, features, fold_below)
            _play(sel, k, before, seed=1)
            state = sel.state_dict()
            expected = _play(sel, k, after, seed=2)
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        meta = {"config": config, "patches": patches, "fold_below": fold_below, "k": k, "expected": expected,
                "num_folds": sel.num_folds, "capability": sel.capability, "rho": sel.rho}
        save_state(folder, {"selector": state, "features": features}, meta=meta)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_checkpoint_of_the_earlier_code_resumes_with_the_same_batches(name: str) -> None:
    state, meta = load_state(DATA / name)
    with _patched(meta["patches"]):
        sel = _build(meta["config"], state["features"], meta["fold_below"])
        sel.load_state_dict(state["selector"])
        assert _play(sel, meta["k"], len(meta["expected"]), seed=2) == meta["expected"]
    assert (sel.num_folds, sel.capability, sel.rho) == (meta["num_folds"], meta["capability"], meta["rho"])


def test_the_saved_states_hold_folds_and_both_store_formats_keys() -> None:
    """The fixtures exercise what they claim: folds before saving, the sparse-format keys, the index's model."""
    folds = 0
    for name in CASES:
        state, _meta = load_state(DATA / name)
        saved = state["selector"]
        assert {"task_ids", "alpha_tilde", "beta_tilde", "untouched", "transform", "model", "rng"} <= set(saved)
        folds += saved["num_folds"] > 0
    assert folds >= 3


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="write the difficulty_based checkpoint fixtures")
    parser.add_argument("--write", action="store_true", help="(re)write them: only on the commit they belong to")
    if parser.parse_args().write:
        write()
