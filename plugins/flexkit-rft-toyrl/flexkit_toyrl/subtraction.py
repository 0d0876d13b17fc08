"""The subtraction family (``operation = "sub"``): ``a − b`` with borrows, written in the base's complement.

A task of level ``L`` subtracts a number ``b`` below ``base**L`` from an ``L``-digit number ``a`` (any digit for
``L = 1``): the operands of the addition family at the same level. Prompt and answer are written least significant
digit first in ``D`` digit slots (the largest level), and the answer has ``D + 1`` digits: the difference modulo
``base**(D + 1)``, so a negative difference is written in the base's complement::

    a = 47, b = 5,  D = 4   ->   prompt  7 4 0 0 − 5 0 0 0 =     answer  2 4 0 0 0
    a = 4,  b = 7,  D = 4   ->   prompt  4 0 0 0 − 7 0 0 0 =     answer  7 9 9 9 9

Answer digit ``i`` is ``(a_i − b_i − borrow_i) mod base``. Unlike addition's carry, which stops at the slot above
the level, a borrow out of the level's top slot runs through every higher slot (about half the problems of each
level are negative), so the model must carry one bit from the level's top slot to the end of the answer: a family
with its own difficulty structure (levels, the number of ``carries`` — here borrows — and the sign) on the same
digit slots and the same tiny model. The reward is exact match.
"""

from __future__ import annotations

import numpy as np

from flexkit_toyrl.addition import VOCAB_SIZE as ADDITION_VOCAB_SIZE
from flexkit_toyrl.addition import digits, draw_problems, encode_operator_prompts, problem_ranges

#: Token id of ``−`` (after the addition family's tokens, which keep their ids).
MINUS = ADDITION_VOCAB_SIZE
#: Vocabulary size of the subtraction family (digits of base ≤ 10, ``+``, ``=``, ``−``).
VOCAB_SIZE = ADDITION_VOCAB_SIZE + 1

#: Operands at each level: those of the addition family (``a`` has ``L`` digits, ``b < base**L``).
draw_sub_problems = draw_problems
#: The operands :func:`draw_sub_problems` draws at a level: those of the addition family.
sub_problem_ranges = problem_ranges


def encode_sub_prompts(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, 2·width + 2) prompt tokens ``a-digits − b-digits =``."""
    return encode_operator_prompts(a, b, width, base, MINUS)


def encode_sub_answers(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width + 1) answer tokens: the digits of ``(a − b) mod base**(width + 1)``, least significant first."""
    modulus = base ** (width + 1)
    difference = np.mod(np.asarray(a, dtype=np.int64) - np.asarray(b, dtype=np.int64), modulus)
    return digits(difference, width + 1, base)


def sub_borrows(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """Number of the operands' digit slots that borrow from the next one (a difficulty signal within a level):
    the slots up to the longer operand's top digit, so a negative difference's borrow counts once, not once for
    every higher slot it runs through."""
    da, db = digits(a, width, base), digits(b, width, base)
    length = ((da != 0) | (db != 0)).cumsum(axis=1).argmax(axis=1) + 1  # slots up to the last non-zero digit
    count = np.zeros(len(da), dtype=np.int64)
    borrow = np.zeros(len(da), dtype=np.int64)
    for slot in range(width):
        borrow = (da[:, slot] - db[:, slot] - borrow) < 0
        count += borrow & (slot < length)
    return count
