"""Procedurally generated addition tasks with graded difficulty, and their token encoding.

A task of level ``L`` adds an ``L``-digit number ``a`` and a number ``b`` below ``base**L``. Every problem is
written with the same number of digit slots ``D`` (the largest level), least significant digit first, so the
model computes each answer digit from the two digits in the same slot plus a carry (reversed-digit addition,
the format small transformers learn well)::

    a = 47, b = 5, D = 4   ->   prompt  7 4 0 0 + 5 0 0 0 =     answer  2 5 0 0 0

The answer always has ``D + 1`` digits and the reward is exact match. A level-``L`` problem needs the slots up
to ``L`` right; slots beyond the level only ever hold zeros. A model warm-started mostly on short problems is
reliable on the low slots and weak on the high ones, so hard levels become learnable only after the medium ones
have trained the slots below them — the regime where task selection matters.

Nothing is downloaded: the ``arithmetic`` storage generates its rows from its own seed.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit import InMemoryTaskset, field

#: Token ids: digits are ``0 .. base-1``; then these.
PLUS, EQUALS = 10, 11
#: Vocabulary size (digits of base ≤ 10, ``+``, ``=``).
VOCAB_SIZE = 12


def digits(values: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, width) digits of ``values``, least significant first."""
    values = np.asarray(values, dtype=np.int64)
    powers = base ** np.arange(width, dtype=np.int64)
    return (values[:, None] // powers[None, :]) % base


def encode_prompts(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """(N, 2·width + 2) prompt tokens ``a-digits + b-digits =``."""
    n = len(a)
    plus = np.full((n, 1), PLUS, dtype=np.int64)
    equals = np.full((n, 1), EQUALS, dtype=np.int64)
    return np.concatenate([digits(a, width, base), plus, digits(b, width, base), equals], axis=1)


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


def carries(a: np.ndarray, b: np.ndarray, width: int, base: int) -> np.ndarray:
    """Number of carries in each addition (a second difficulty signal within a level)."""
    da, db = digits(a, width, base), digits(b, width, base)
    count = np.zeros(len(da), dtype=np.int64)
    carry = np.zeros(len(da), dtype=np.int64)
    for slot in range(width):
        carry = (da[:, slot] + db[:, slot] + carry) >= base
        count += carry
    return count


def level_prior(levels: np.ndarray, per_digit: float) -> np.ndarray:
    """Pass rate of a reference learner that gets each of a level's answer digits right with ``per_digit``."""
    return per_digit ** (np.asarray(levels, dtype=np.float64) + 1.0)


@attrs.frozen(kw_only=True)
class ArithmeticTasksConfig:
    """Parameters of the ``arithmetic`` storage: generated addition problems."""

    size: int = field(default=20000, ge=1, doc="Number of problems.")
    levels: tuple[int, ...] = field(
        default=(1, 2, 3, 4), min_items=1, doc="Difficulty levels (digits of the first operand), spread evenly."
    )
    base: int = field(default=10, ge=2, le=10, doc="Number base of the digits.")
    seed: int = field(default=0, ge=0, doc="Seed of the generated problems (independent of the pipeline seed).")
    weak_per_digit: float = field(
        default=0.6, gt=0, le=1, doc="Per-digit accuracy of the weak reference learner behind weak_pass_rate."
    )
    strong_per_digit: float = field(
        default=0.95, gt=0, le=1, doc="Per-digit accuracy of the strong reference learner behind strong_pass_rate."
    )

    def __attrs_post_init__(self) -> None:
        bad = [level for level in self.levels if not 1 <= level <= 9]
        if bad:
            raise ValueError(f"levels must be between 1 and 9, got {bad}")


def make_arithmetic_taskset(config: ArithmeticTasksConfig, *, name: str, **_context: Any) -> InMemoryTaskset:
    """Generate the problems: ``id``, ``level``, ``a``, ``b``, ``carries`` and two reference pass rates.

    ``weak_pass_rate`` / ``strong_pass_rate`` are the pass rates of two idealised reference learners
    (``per_digit ** (level + 1)``): offline difficulty priors of the kind Trinity-RFT's ``difficulty_based`` reads,
    known before training (a real setup measures them with reference models).
    """
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(11,)))
    levels = np.asarray(config.levels, dtype=np.int64)[np.arange(config.size) % len(config.levels)]
    a, b = draw_problems(levels, config.base, rng)
    width = int(max(config.levels))
    n_carries = carries(a, b, width, config.base)
    weak = level_prior(levels, config.weak_per_digit)
    strong = level_prior(levels, config.strong_per_digit)
    columns = {
        "id": np.arange(config.size, dtype=np.float64),
        "level": levels.astype(np.float64),
        "carries": n_carries.astype(np.float64),
        "difficulty": levels + n_carries / (width + 1.0),
        "weak_pass_rate": weak,
        "strong_pass_rate": strong,
    }
    rows = [
        {"id": i, "level": int(levels[i]), "a": int(a[i]), "b": int(b[i]), "carries": int(n_carries[i]),
         "difficulty": float(columns["difficulty"][i]), "weak_pass_rate": float(weak[i]),
         "strong_pass_rate": float(strong[i])}
        for i in range(config.size)
    ]
    return InMemoryTaskset(name, rows=rows, columns=columns)
