"""The ``toyrl`` trainer's held-out problems: a **test** split that judges a run, a **validation** split that steers it.

``evaluate`` answers the test split: what ``flexkit compare``, the results, targets and plots read. ``validate``
answers the validation split: the only evaluation ``flexkit run`` hands the selectors (a ``frontier`` guard,
``guard_metric = "val_accuracy/{}"``). No problem is in both, so a guard never steers on the exam. Both are the same
for every run: they depend on the trainer's ``operation``, ``base``, ``max_digits``, ``eval_levels``,
``eval_tasks_per_level`` and ``val_tasks_per_level``, never on a seed.

* **Test**: ``eval_tasks_per_level`` problems per level, drawn with replacement from the stream of
  :data:`EVAL_SPAWN_KEY`, as before the split existed.
* **Validation**: per level, up to ``val_tasks_per_level`` distinct problems the test split does not hold, in the
  order of the stream of :data:`VAL_SPAWN_KEY`.
* A level whose problems the test draws nearly exhaust (fewer than :data:`SPLIT_SHARE` of them left; level 1, with
  100 additions or 80 multiplications in base 10, from about 100 draws on) is **split** instead: that share of its
  problems (at least one; at most ``val_tasks_per_level``) goes to validation, and each test draw that lands on one
  of them is drawn again among the rest (stream of :data:`REDRAW_SPAWN_KEY`). Only such a level's test problems
  differ from those of flexkit before the split, in those draws.
"""

from __future__ import annotations

import attrs
import numpy as np

from flexkit_toyrl.families import TaskFamily

__all__ = ["ENUMERATE_LIMIT", "EVAL_SPAWN_KEY", "REDRAW_SPAWN_KEY", "SPLIT_SHARE", "VAL_SPAWN_KEY", "HeldOut",
           "Problems", "held_out_splits"]

#: Spawn key of the test problems (independent of every seed, so all runs share them).
EVAL_SPAWN_KEY = (12,)
#: Spawn key of the validation problems (independent of every seed, and of the test problems' stream).
VAL_SPAWN_KEY = (15,)
#: Spawn key of the test draws taken again on a split level.
REDRAW_SPAWN_KEY = (*EVAL_SPAWN_KEY, 1)
#: A level with fewer problems than this share left by the test draws gives this share of them to validation.
SPLIT_SHARE = 0.2
#: Levels with at most this many problems (or four per test draw and validation problem) are listed whole; larger
#: ones are sampled.
ENUMERATE_LIMIT = 100_000


@attrs.frozen(eq=False)
class Problems:
    """Held-out problems: the level, ``a`` and ``b`` of each (three int64 arrays of one length)."""

    levels: np.ndarray
    a: np.ndarray
    b: np.ndarray


@attrs.frozen(eq=False)
class HeldOut:
    """The two held-out splits (no problem in both)."""

    test: Problems
    validation: Problems


def _rng(key: tuple[int, ...]) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(0, spawn_key=key))


def held_out_splits(family: TaskFamily, levels: tuple[int, ...], test_per_level: int, val_per_level: int,
                    width: int, base: int) -> HeldOut:
    """The test and validation problems at ``levels`` (module docstring); ``width`` is the trainer's
    ``max_digits`` (problems are told apart by ``a * b_limit + b``)."""
    test_levels = np.repeat(np.asarray(levels, dtype=np.int64), test_per_level)
    a, b = family.draw(test_levels, base, _rng(EVAL_SPAWN_KEY))
    span = family.b_limit(width, base)
    val_rng, redraw_rng = _rng(VAL_SPAWN_KEY), _rng(REDRAW_SPAWN_KEY)
    parts: list[tuple[int, np.ndarray]] = []
    for level in dict.fromkeys(int(x) for x in levels):
        where = np.flatnonzero(test_levels == level)
        test_keys = a[where] * span + b[where]
        used = np.unique(test_keys)
        size = family.level_size(level, base)
        if size > max(ENUMERATE_LIMIT, 4 * (len(used) + val_per_level)):
            parts.append((level, _sampled(family, level, base, span, used, val_per_level, val_rng)))
            continue
        (a_low, a_high), (b_low, b_high) = family.ranges(level, base)
        every = (np.arange(a_low, a_high, dtype=np.int64)[:, None] * span
                 + np.arange(b_low, b_high, dtype=np.int64)[None, :]).reshape(-1)
        free = np.setdiff1d(every, used)
        share = max(1, int(size * SPLIT_SHARE))
        if len(free) >= share:
            chosen = free[val_rng.choice(len(free), size=min(val_per_level, len(free)), replace=False)]
        else:  # the test draws nearly exhaust the level: split it
            chosen = every[val_rng.choice(len(every), size=min(val_per_level, share), replace=False)]
            clash = where[np.isin(test_keys, chosen)]
            rest = np.setdiff1d(every, chosen)
            again = rest[redraw_rng.integers(len(rest), size=len(clash))]
            a[clash], b[clash] = again // span, again % span
        parts.append((level, chosen))
    val_levels = np.concatenate([np.full(len(keys), level, dtype=np.int64) for level, keys in parts])
    val_keys = np.concatenate([keys for _level, keys in parts]).astype(np.int64)
    return HeldOut(Problems(test_levels, a, b), Problems(val_levels, val_keys // span, val_keys % span))


def _sampled(family: TaskFamily, level: int, base: int, span: int, used: np.ndarray, count: int,
             rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct problems of a large ``level`` (keys), none of them in ``used``, drawn as ``family`` draws
    (at least half of the draws are new: the level has over four problems per test draw and problem wanted)."""
    seen = set(used.tolist())
    chosen: list[int] = []
    while len(chosen) < count:
        a, b = family.draw(np.full(2 * count, level, dtype=np.int64), base, rng)
        for key in (a * span + b).tolist():
            if key not in seen:
                seen.add(key)
                chosen.append(key)
                if len(chosen) == count:
                    break
    return np.asarray(chosen, dtype=np.int64)
