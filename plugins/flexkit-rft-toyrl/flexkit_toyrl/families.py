"""The generated task families (``operation``): what the ``arithmetic`` storage and the ``toyrl`` trainer share.

A family draws operands by level, encodes prompts and answers (both ``D + 1`` answer digits for ``D`` digit slots),
counts carries, names the vocabulary its model needs and each level's operands (its problems, so that the trainer's
held-out splits are kept apart: :mod:`flexkit_toyrl.splits`). The storage and the trainer look the family up by the
same ``operation`` name, so the warm start, the rollouts, the reward and the held-out evaluations all use the
family of the taskset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs
import numpy as np

from flexkit_toyrl import addition, multiplication, subtraction

#: The ``operation`` values of the storage and the trainer.
Operation = Literal["add", "mul", "sub"]

Operands = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]
#: ``(level, base) -> ((a_low, a_high), (b_low, b_high))``: the operands a level's problems have.
Ranges = Callable[[int, int], tuple[tuple[int, int], tuple[int, int]]]


@attrs.frozen
class TaskFamily:
    """One generated family: its operand draw, token encoding, carry count and vocabulary."""

    name: str
    #: Vocabulary the model needs (digits, then the operator and ``=`` tokens).
    vocab_size: int
    #: ``(levels, base, rng) -> (a, b)``.
    draw: Callable[[np.ndarray, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]
    #: ``(a, b, width, base) ->`` prompt tokens.
    prompts: Operands
    #: ``(a, b, width, base) ->`` answer tokens (``width + 1`` digits).
    answers: Operands
    #: ``(a, b, width, base) ->`` carries per problem.
    carries: Operands
    #: Whether ``b`` is a single digit (else it has as many digit slots as ``a``).
    one_digit_b: bool
    #: Smallest base the family is defined for.
    min_base: int = 2
    #: The operands of a level's problems (what ``draw`` draws from, uniformly), to tell held-out splits apart.
    ranges: Ranges = attrs.field(kw_only=True)

    def level_size(self, level: int, base: int) -> int:
        """How many distinct problems ``level`` has."""
        (a_low, a_high), (b_low, b_high) = self.ranges(level, base)
        return (a_high - a_low) * (b_high - b_low)

    def prompt_len(self, width: int) -> int:
        """Prompt tokens of a problem with ``width`` digit slots."""
        return width + 3 if self.one_digit_b else 2 * width + 2

    def b_limit(self, width: int, base: int) -> int:
        """Exclusive upper bound of ``b`` with ``width`` digit slots."""
        return base if self.one_digit_b else base ** width


FAMILIES: dict[str, TaskFamily] = {
    "add": TaskFamily("add", addition.VOCAB_SIZE, addition.draw_problems, addition.encode_prompts,
                      addition.encode_answers, addition.carries, one_digit_b=False,
                      ranges=addition.problem_ranges),
    "mul": TaskFamily("mul", multiplication.VOCAB_SIZE, multiplication.draw_mul_problems,
                      multiplication.encode_mul_prompts, multiplication.encode_mul_answers,
                      multiplication.mul_carries, one_digit_b=True, min_base=multiplication.MIN_MULTIPLIER + 1,
                      ranges=multiplication.mul_problem_ranges),
    "sub": TaskFamily("sub", subtraction.VOCAB_SIZE, subtraction.draw_sub_problems, subtraction.encode_sub_prompts,
                      subtraction.encode_sub_answers, subtraction.sub_borrows, one_digit_b=False,
                      ranges=subtraction.sub_problem_ranges),
}
