"""Helpers shared by the difficulty_based tests: selectors over random features and the float64 greedy reference."""

from __future__ import annotations

import numpy as np

from flexkit.selectors import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors import difficulty_based as db


def make(n: int, seed: int = 0, **kwargs: object) -> DifficultyBasedSelector:
    """A selector over ``n`` tasks with random reference features f0 <= f1."""
    rng = np.random.default_rng(1000 + n)
    f0 = rng.random(n) * 0.6
    f1 = np.minimum(f0 + rng.random(n) * 0.4, 1.0)
    return DifficultyBasedSelector(DifficultyBasedConfig(**kwargs), size=n, seed=seed, features={"f0": f0, "f1": f1})


def random_features(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Features in [0, 1] with exact 0/1 values and rows where both reference models agree."""
    f0 = rng.random(n)
    f1 = rng.random(n)
    f0[rng.random(n) < 0.15] = 0.0
    f1[rng.random(n) < 0.15] = 1.0
    same = rng.random(n) < 0.2
    f1[same] = f0[same]
    return f0, f1


def exact_greedy(sel: DifficultyBasedSelector, k: int) -> list[int]:
    """The float64 reference of greedy selection: ``smallest_k`` over the float64 pass."""
    cost, _ = sel.costs.exact_costs(with_noise=False, do_sample=False)
    return db.smallest_k(cost, k).tolist()
