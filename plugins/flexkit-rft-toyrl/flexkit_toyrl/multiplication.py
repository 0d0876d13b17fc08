"""The multiplication family (``operation = "mul"``): an ``L``-digit number times a one-digit multiplier.

A task of level ``L`` multiplies an ``L``-digit number ``a`` (any digit for ``L = 1``) by a multiplier ``b`` drawn
uniformly from ``2 .. base-1`` (×0 and ×1 would be trivial at every level). Like addition it is written least
significant digit first in ``D`` digit slots (the largest level), with a single multiplier token::

    a = 47, b = 6, D = 4   ->   prompt  7 4 0 0 × 6 =     answer  2 8 2 0 0

The answer has ``D + 1`` digits (``a·b < base**(D+1)``) and the reward is exact match. Answer digit ``i`` is
``(a_i·b + c_i) mod base`` with a carry ``c_i`` up to ``base − 2`` (addition's is 0 or 1), so every slot needs the
multiplication table and a wide carry: a family with its own difficulty structure — levels (digits of ``a``),
the ``multiplier``, and the number of ``carries`` — on the same digit slots and the same tiny model.
"""

from __future__ import annotations

import numpy as np

from flexkit_toyrl.addition import EQUALS, digits
from flexkit_toyrl.addition import VOCAB_SIZE as ADDITION_VOCAB_SIZE

#: Token id of ``×`` (after the addition family's tokens, which keep their ids).
TIMES = ADDITION_VOCAB_SIZE
#: Vocabulary size of the multiplication family (digits of base ≤ 10, ``+``, ``=``, ``×``).
VOCAB_SIZE = ADDITION_VOCAB_SIZE + 1
#: The smallest multiplier drawn.
MIN_MULTIPLIER = 2


def encode_mul_prompts(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width + 3) prompt tokens ``a-digits × b =`` (``b`` one digit)."""
    n = len(a)
    times = np.full((n, 1), TIMES, dtype=np.int64)
    equals = np.full((n, 1), EQUALS, dtype=np.int64)
    return np.concatenate([digits(a, width, base), times, digits(b, 1, base), equals], axis=1)


def encode_mul_answers(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width + 1) answer tokens: the digits of ``a · b``, least significant first."""
    return digits(np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64), width + 1, base)


def draw_mul_problems(levels: np.ndarray, base: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Operands at ``levels``: ``a`` has exactly ``L`` digits (any digit for ``L = 1``), ``b`` in ``2 .. base-1``."""
    if base <= MIN_MULTIPLIER:
        raise ValueError(f"multiplication needs base >= {MIN_MULTIPLIER + 1}, got {base}")
    levels = np.asarray(levels, dtype=np.int64)
    high = base ** levels
    low = np.where(levels > 1, base ** (levels - 1), 0)
    a = low + np.floor(rng.random(len(levels)) * (high - low)).astype(np.int64)
    b = MIN_MULTIPLIER + np.floor(rng.random(len(levels)) * (base - MIN_MULTIPLIER)).astype(np.int64)
    return a, b


def mul_problem_ranges(level: int, base: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The operands :func:`draw_mul_problems` draws at ``level``: ``((a_low, a_high), (b_low, b_high))``, upper
    bounds excluded (every pair in them is one problem of the level)."""
    return (base ** (level - 1) if level > 1 else 0, base ** level), (MIN_MULTIPLIER, base)


def mul_carries(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """Number of digit slots of ``a · b`` that pass a non-zero carry on (a difficulty signal within a level)."""
    da = digits(a, width, base)
    b = np.asarray(b, dtype=np.int64)
    count = np.zeros(len(da), dtype=np.int64)
    carry = np.zeros(len(da), dtype=np.int64)
    for slot in range(width):
        carry = (da[:, slot] * b + carry) // base
        count += carry > 0
    return count
