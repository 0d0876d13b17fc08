"""How many tasks each taskset contributes: to one epoch's order (sizes or weights) and to one batch (a mix).

Pure functions of counts and proportions, used by :class:`flexkit.TasksetScheduler` to plan batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def epoch_counts(sizes: Sequence[int], weights: Sequence[float] | None) -> np.ndarray:
    """How many entries of one epoch's order belong to each taskset.

    Without weights: each taskset's size. With weights: the epoch keeps the total ``sum(sizes)`` and splits it
    in proportion to the weights, rounding by largest remainder (so counts sum exactly to the total).
    """
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    if weights is None:
        return sizes_arr
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(over="ignore"):
        if not np.isfinite(w.sum()):  # finite weights near the float maximum overflow the sum: scale them down
            w = w / w.max()
    total = int(sizes_arr.sum())
    exact = w / w.sum() * total
    counts: np.ndarray = np.floor(exact).astype(np.int64)
    remainder = total - int(counts.sum())
    if remainder:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:remainder]] += 1
    return counts


def mix_counts(
    proportions: Sequence[float], batch_size: int, sizes: Sequence[int], rng: np.random.Generator
) -> np.ndarray:
    """Split ``batch_size`` by ``proportions``: floors first, then the remainder to the largest fractional
    parts (ties broken by ``rng``); no taskset gets more than its size (the excess goes to the others)."""
    p = np.asarray(proportions, dtype=np.float64)
    cap = np.asarray(sizes, dtype=np.int64)
    exact = p / p.sum() * batch_size
    counts: np.ndarray = np.minimum(np.floor(exact).astype(np.int64), cap)
    while counts.sum() < batch_size:
        room = counts < cap
        if not room.any():
            raise ValueError(f"batch_size {batch_size} exceeds the tasks of all tasksets")
        frac = np.where(room, exact - counts, -np.inf)
        frac = np.where(room & (frac <= 0), 0.0, frac) + rng.uniform(0, 1e-9, size=len(p))
        counts[int(np.argmax(np.where(room, frac, -np.inf)))] += 1
    return counts
