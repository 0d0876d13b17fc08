"""The addition family (``operation = "add"``): operands by level, token encoding, carries.

A task of level ``L`` adds an ``L``-digit number ``a`` and a number ``b`` below ``base**L``. Every problem is
written with the same number of digit slots ``D`` (the largest level), least significant digit first, so the
model computes each answer digit from the two digits in the same slot plus a carry (reversed-digit addition,
the format small transformers learn well)::

    a = 47, b = 5, D = 4   ->   prompt  7 4 0 0 + 5 0 0 0 =     answer  2 5 0 0 0

The answer always has ``D + 1`` digits and the reward is exact match. A level-``L`` problem needs the slots up
to ``L`` right; slots beyond the level only ever hold zeros. A model warm-started mostly on short problems is
reliable on the low slots and weak on the high ones, so hard levels become learnable only after the medium ones
have trained the slots below them — the regime where task selection matters.

The token ids ``PLUS`` and ``EQUALS`` follow the digits; the multiplication family
(:mod:`flexkit_toyrl.multiplication`) reuses ``EQUALS`` and adds its operator token after them.
"""

from __future__ import annotations

import numpy as np

#: Token ids: digits are ``0 .. base-1``; then these.
PLUS, EQUALS = 10, 11
#: Vocabulary size of the addition family (digits of base ≤ 10, ``+``, ``=``).
VOCAB_SIZE = 12


def digits(values: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width) digits of ``values``, least significant first."""
    values = np.asarray(values, dtype=np.int64)
    powers = base ** np.arange(width, dtype=np.int64)
    return (values[:, None] // powers[None, :]) % base


def encode_operator_prompts(a: np.ndarray, b: np.ndarray, width: int, base: int, operator: int) -> np.ndarray:
    """(N, 2·width + 2) prompt tokens ``a-digits <operator> b-digits =`` (both operands in ``width`` slots)."""
    n = len(a)
    between = np.full((n, 1), operator, dtype=np.int64)
    equals = np.full((n, 1), EQUALS, dtype=np.int64)
    return np.concatenate([digits(a, width, base), between, digits(b, width, base), equals], axis=1)


def encode_prompts(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, 2·width + 2) prompt tokens ``a-digits + b-digits =``."""
    return encode_operator_prompts(a, b, width, base, PLUS)


def encode_answers(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width + 1) answer tokens: the digits of ``a + b``, least significant first."""
    return digits(np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64), width + 1, base)


def draw_problems(levels: np.ndarray, base: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Operands at ``levels``: ``a`` has exactly ``L`` digits (any digit for ``L = 1``), ``b < base**L``."""
    levels = np.asarray(levels, dtype=np.int64)
    high = base ** levels
    low = np.where(levels > 1, base ** (levels - 1), 0)
    a = low + np.floor(rng.random(len(levels)) * (high - low)).astype(np.int64)
    b = np.floor(rng.random(len(levels)) * high).astype(np.int64)
    return a, b


def problem_ranges(level: int, base: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The operands :func:`draw_problems` draws at ``level``: ``((a_low, a_high), (b_low, b_high))``, upper bounds
    excluded (every pair in them is one problem of the level)."""
    high = base ** level
    return (base ** (level - 1) if level > 1 else 0, high), (0, high)


def carries(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """Number of carries in each addition (a second difficulty signal within a level)."""
    da, db = digits(a, width, base), digits(b, width, base)
    count = np.zeros(len(da), dtype=np.int64)
    carry = np.zeros(len(da), dtype=np.int64)
    for slot in range(width):
        carry = (da[:, slot] + db[:, slot] + carry) >= base
        count += carry
    return count
