"""The ``arithmetic`` storage: procedurally generated problems of one task family, with graded difficulty.

``operation = "add"`` (the default) generates additions (:mod:`flexkit_toyrl.addition`), ``"mul"`` multiplications
by a one-digit number (:mod:`flexkit_toyrl.multiplication`), ``"sub"`` subtractions with borrows
(:mod:`flexkit_toyrl.subtraction`); all are written as reversed digits in ``D`` digit
slots, ``D`` the largest level. ``noisy_labels = true`` adds difficulty columns that are only partly right, for
selectors that must pool evidence without a clean level: ``noisy_level`` and ``answer_digits``. ``label = "none"``
makes a pool with no difficulty label at all (a zero-padded ``prompt`` text instead, rows shuffled), ``"source"``
one whose only label is a ``source`` loosely tied to difficulty.

Nothing is downloaded: the storage generates its rows from its own seed. The addition names of earlier versions
(``encode_prompts``, ``draw_problems``, ``carries``, ...) are re-exported here.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
import numpy as np

from flexkit import InMemoryTaskset, field
from flexkit_toyrl.addition import (
    EQUALS,
    PLUS,
    VOCAB_SIZE,
    carries,
    digits,
    draw_problems,
    encode_answers,
    encode_prompts,
)
from flexkit_toyrl.families import FAMILIES, Operation

__all__ = ["EQUALS", "PLUS", "VOCAB_SIZE", "ArithmeticTasksConfig", "carries", "digit_counts", "digits",
           "draw_problems", "encode_answers", "encode_prompts", "level_prior", "make_arithmetic_taskset",
           "noisy_levels", "prompt_texts", "source_labels", "text_pool_width", "validation_prompts"]

#: Spawn key of the generated operands (with the storage's ``seed``).
PROBLEM_SPAWN_KEY = (11,)
#: Spawn key of the label noise (with the storage's ``seed``): the operands do not depend on it.
NOISE_SPAWN_KEY = (14,)
#: Spawn key of the row order of a pool without a level label (with the storage's ``seed``).
ORDER_SPAWN_KEY = (16,)
#: Spawn key of the ``source`` labels and of the shuffle of their names (with the storage's ``seed``).
SOURCE_SPAWN_KEY = (17,)
#: The names of ``label = "source"``'s sources (which source gets which mix of levels is shuffled per seed).
SOURCE_NAMES = ("source-a", "source-b", "source-c", "source-d")
#: How strongly a source's mix of levels leans toward easy or hard ones (``label = "source"``): source ``s`` of a
#: level-``L`` task is drawn with probability ∝ ``exp(SOURCE_TILT · c_s · z_L)``, ``c_s`` in −1.5 .. 1.5 and
#: ``z_L`` the level's place in −1 .. 1; at 1.0 the mutual information between source and level over six levels
#: is about 0.20 nats, against 0.70 for a label that is the true level 70% of the time.
SOURCE_TILT = 1.0
#: The operator of each family in a ``prompt`` text.
OPERATORS = {"add": "+", "mul": "*", "sub": "-"}

Label = Literal["level", "none", "source"]


def level_prior(levels: np.ndarray, per_digit: float) -> np.ndarray:
    """Pass rate of a reference learner that gets each of a level's answer digits right with ``per_digit``."""
    return per_digit ** (np.asarray(levels, dtype=np.float64) + 1.0)


def noisy_levels(levels: np.ndarray, choices: tuple[int, ...], accuracy: float,
                 rng: np.random.Generator) -> np.ndarray:
    """``levels`` relabelled: each kept with probability ``accuracy``, otherwise replaced by one of the other
    ``choices`` drawn uniformly (unchanged when there is no other)."""
    levels = np.asarray(levels, dtype=np.int64)
    distinct = np.unique(np.asarray(choices, dtype=np.int64))
    if len(distinct) < 2:
        return levels.copy()
    position = np.searchsorted(distinct, levels)
    wrong = rng.random(len(levels)) >= accuracy
    shift = rng.integers(1, len(distinct), size=len(levels))
    return distinct[np.where(wrong, (position + shift) % len(distinct), position)]


def digit_counts(values: np.ndarray, base: int) -> np.ndarray:
    """Number of digits of each value (``0`` has one)."""
    values = np.asarray(values, dtype=np.int64)
    count = np.ones(len(values), dtype=np.int64)
    power = base
    while (values >= power).any():
        count += values >= power
        power *= base
    return count


@attrs.frozen(kw_only=True)
class ArithmeticTasksConfig:
    """Parameters of the ``arithmetic`` storage: generated problems of one task family."""

    operation: Operation = field(
        default="add",
        doc='Task family: "add" (a + b, b below base**level), "mul" (a × b, b one digit in 2 .. base-1) or "sub" '
            "(a − b, b below base**level, a negative difference in the base's complement). The toyrl trainer's "
            "operation must be the same.",
    )
    size: int = field(default=20000, ge=1, le=10**8, doc="Number of problems (generated in memory: at most 10^8).")
    levels: tuple[int, ...] = field(
        default=(1, 2, 3, 4), min_items=1, doc="Difficulty levels (digits of the first operand), spread evenly."
    )
    base: int = field(default=10, ge=2, le=10, doc='Number base of the digits (at least 3 for "mul").')
    seed: int = field(default=0, ge=0, doc="Seed of the generated problems (independent of the pipeline seed).")
    weak_per_digit: float = field(
        default=0.6, gt=0, le=1, doc="Per-digit accuracy of the weak reference learner behind weak_pass_rate."
    )
    strong_per_digit: float = field(
        default=0.95, gt=0, le=1, doc="Per-digit accuracy of the strong reference learner behind strong_pass_rate."
    )
    noisy_labels: bool = field(
        default=False,
        doc="Add two partly wrong difficulty columns: noisy_level (the level with probability noisy_level_accuracy, "
            "otherwise another of levels drawn uniformly, from seed) and answer_digits (digits of the answer: the "
            "level or one more). The operands do not change.",
    )
    noisy_level_accuracy: float = field(
        default=0.7, ge=0, le=1, doc="Probability that noisy_level is the true level (with noisy_labels)."
    )
    label: Label = field(
        default="level",
        doc='"level": the columns above (level, carries, difficulty, reference pass rates). "none": a pool with no '
            "difficulty label: rows hold id, a, b and a prompt text with both operands zero-padded to the largest "
            'level ("000047+000005="; its length says nothing of the level), in a shuffled order. "source": the '
            "same, plus a source label (one of four names, each a different mix of levels, loosely tied to "
            "difficulty).",
    )

    def __attrs_post_init__(self) -> None:
        if self.noisy_labels and self.label != "level":
            raise ValueError(f'noisy_labels adds difficulty labels, and label = "{self.label}" is a pool without '
                             'them: set label = "level" or noisy_labels = false')
        bad = [level for level in self.levels if not 1 <= level <= 9]
        if bad:
            raise ValueError(f"levels must be between 1 and 9, got {bad}")
        family = FAMILIES[self.operation]
        if self.base < family.min_base:
            raise ValueError(f'operation = "{self.operation}" needs base >= {family.min_base}, got base = '
                             f"{self.base}: set base = {family.min_base} or more")


def make_arithmetic_taskset(config: ArithmeticTasksConfig, *, name: str, **_context: Any) -> InMemoryTaskset:
    """Generate the problems: ``id``, ``level``, ``a``, ``b``, ``carries``, ``difficulty`` and two reference pass
    rates (``carries`` counts the borrows of ``"sub"``); ``"mul"`` rows add ``operation`` and ``multiplier``,
    ``"sub"`` rows ``operation``; ``noisy_labels`` adds ``noisy_level`` and
    ``answer_digits``.

    ``weak_pass_rate`` / ``strong_pass_rate`` are the pass rates of two idealised reference learners
    (``per_digit ** (level + 1)``): offline difficulty priors of the kind Trinity-RFT's ``difficulty_based`` reads,
    known before training (a real setup measures them with reference models).
    """
    family = FAMILIES[config.operation]
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=PROBLEM_SPAWN_KEY))
    levels = np.asarray(config.levels, dtype=np.int64)[np.arange(config.size) % len(config.levels)]
    a, b = family.draw(levels, config.base, rng)
    width = int(max(config.levels))
    if config.label != "level":
        return _unlabelled_taskset(config, name, levels, a, b, width)
    n_carries = family.carries(a, b, width, config.base)
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
    extra: dict[str, np.ndarray] = {}
    if config.operation == "mul":
        extra["multiplier"] = b
    if config.noisy_labels:
        noise = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=NOISE_SPAWN_KEY))
        extra["noisy_level"] = noisy_levels(levels, config.levels, config.noisy_level_accuracy, noise)
        answer = family.answers(a, b, width, config.base)
        extra["answer_digits"] = digit_counts(answer @ (config.base ** np.arange(width + 1)), config.base)
    columns.update({key: values.astype(np.float64) for key, values in extra.items()})
    rows: list[dict[str, Any]] = [
        {"id": i, "level": int(levels[i]), "a": int(a[i]), "b": int(b[i]), "carries": int(n_carries[i]),
         "difficulty": float(columns["difficulty"][i]), "weak_pass_rate": float(weak[i]),
         "strong_pass_rate": float(strong[i])}
        for i in range(config.size)
    ]
    if config.operation != "add":
        for row in rows:
            row["operation"] = config.operation
    for key, values in extra.items():
        for row, value in zip(rows, values.tolist(), strict=True):
            row[key] = value
    return InMemoryTaskset(name, rows=rows, columns=columns)


def prompt_texts(a: np.ndarray, b: np.ndarray, operation: str, width: int, base: int) -> list[str]:
    """Each problem as text, most significant digit first, both operands zero-padded to a fixed width (``a`` to
    ``width`` digits; ``b`` to ``width``, or to one digit for ``"mul"``): ``"000047+000005="``. Every prompt of a
    pool has the same length, so the length says nothing of the level."""
    b_width = 1 if FAMILIES[operation].one_digit_b else width
    symbols = np.array(list("0123456789"))
    a_text = ["".join(row) for row in symbols[digits(a, width, base)[:, ::-1]].tolist()]
    b_text = ["".join(row) for row in symbols[digits(b, b_width, base)[:, ::-1]].tolist()]
    operator = OPERATORS[operation]
    return [f"{x}{operator}{y}=" for x, y in zip(a_text, b_text, strict=True)]


def text_pool_width(pipeline: Any) -> int | None:
    """The operand width of the ``prompt`` texts of ``pipeline``'s ``arithmetic`` tasksets that hold one (``label``
    ``"none"`` or ``"source"``: operands zero-padded to the pool's largest level); ``None`` when none holds one, or
    when their widths differ (then no one text format is the pools')."""
    widths = {int(max(ts.storage.config.levels)) for ts in pipeline.config.tasksets
              if ts.storage.type == "arithmetic" and ts.storage.config.label != "level"}
    return widths.pop() if len(widths) == 1 else None


def validation_prompts(levels: np.ndarray, a: np.ndarray, b: np.ndarray, operation: str, width: int,
                       base: int) -> tuple[np.ndarray, list[str]]:
    """Which held-out problems a pool of prompts ``width`` digits wide could hold (level at most ``width``: a
    wider operand does not fit its format), and those problems' prompts as the pool writes them
    (:func:`prompt_texts`)."""
    fits: np.ndarray = np.asarray(levels) <= width
    return fits, prompt_texts(np.asarray(a)[fits], np.asarray(b)[fits], operation, width, base)


def source_labels(levels: np.ndarray, choices: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """One of :data:`SOURCE_NAMES` per task, drawn from its level's mix (:data:`SOURCE_TILT`); which name has
    which mix is shuffled by ``rng``, so the names' order says nothing of difficulty."""
    distinct = np.unique(np.asarray(choices, dtype=np.int64))
    place = (np.linspace(-1.0, 1.0, len(distinct)) if len(distinct) > 1 else np.zeros(1))[
        np.searchsorted(distinct, levels)]
    lean = np.linspace(-1.5, 1.5, len(SOURCE_NAMES))
    weights = np.exp(SOURCE_TILT * place[:, None] * lean[None, :])
    cumulative = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    drawn = np.minimum((rng.random(len(levels))[:, None] > cumulative).sum(axis=1), len(SOURCE_NAMES) - 1)
    names: np.ndarray = np.asarray(SOURCE_NAMES)[rng.permutation(len(SOURCE_NAMES))]
    labels: np.ndarray = names[drawn]
    return labels


def _unlabelled_taskset(config: ArithmeticTasksConfig, name: str, levels: np.ndarray, a: np.ndarray, b: np.ndarray,
                        width: int) -> InMemoryTaskset:
    """``label = "none"`` or ``"source"``: the same problems as ``"level"`` (same seed), in an order shuffled from
    the seed (the row order of ``"level"`` cycles through the levels), with ``id``, ``a``, ``b`` and ``prompt``
    (``"mul"``: ``multiplier``; not ``"add"``: ``operation``), and with ``"source"`` a ``source`` label. No column
    a selector can read tells the level, but the operands and the prompt themselves."""
    order = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=ORDER_SPAWN_KEY)).permutation(
        config.size)
    levels, a, b = levels[order], a[order], b[order]
    prompts = prompt_texts(a, b, config.operation, width, config.base)
    columns: dict[str, np.ndarray] = {"id": np.arange(config.size, dtype=np.float64)}
    if config.operation == "mul":
        columns["multiplier"] = b.astype(np.float64)
    rows: list[dict[str, Any]] = [{"id": i, "a": int(a[i]), "b": int(b[i]), "prompt": prompts[i]}
                                  for i in range(config.size)]
    if config.label == "source":
        source_rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=SOURCE_SPAWN_KEY))
        for row, source in zip(rows, source_labels(levels, config.levels, source_rng).tolist(), strict=True):
            row["source"] = source
    for row in rows:
        if config.operation != "add":
            row["operation"] = config.operation
        if config.operation == "mul":
            row["multiplier"] = row["b"]
    return InMemoryTaskset(name, rows=rows, columns=columns)
