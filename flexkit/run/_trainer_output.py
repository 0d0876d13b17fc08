"""Checks of what a trainer hands the runner: its metrics become ``metrics.jsonl`` records as plain numbers.

A trainer's ``rollout(...).metrics``, ``update(...)``, ``evaluate(...)`` and ``validate(...)`` return mappings of
metric names to numbers. :func:`trainer_metrics` converts numpy scalars and 0-d arrays or tensors to Python
numbers, and refuses with a :class:`~flexkit.errors.ComponentError` naming the trainer anything that is not a
number (a list, a string, a tensor of several values), a name that is not a string, and a name the runner writes itself
(:data:`RESERVED_KEYS`, every ``flexkit/`` name of :mod:`flexkit._metric_names`, and for rollout and update
metrics the ``sample/``, ``eval_accuracy`` and ``val_accuracy`` names of the sample stage and of the two
evaluations). The test and validation splits keep apart: ``evaluate`` (test) may not return a ``val_`` name, and
every name ``validate`` returns starts with ``val_``, so a validation number is never read as a test one. A trainer
metric named ``step`` would otherwise replace the record's step, and ``--resume`` would cut ``metrics.jsonl`` at the
wrong line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flexkit._metric_names import (
    LEGACY_NAMES,
    PREFIX,
    STEP,
    TRAINER_EVAL_ACCURACY,
    TRAINER_VAL_ACCURACY,
    TRAINER_VAL_PREFIX,
)
from flexkit._state_problems import NOT_A_NUMBER, plain_number
from flexkit.errors import ComponentError
from flexkit.plugins._contract import TrainerLike, describe_component

__all__ = ["RESERVED_KEYS", "RESERVED_PREFIXES", "trainer_metrics"]

#: Keys no trainer metric may carry: the record's ``step``, and the names records had before
#: :mod:`flexkit._metric_names` (readers of older run folders still interpret them).
RESERVED_KEYS: frozenset[str] = frozenset({STEP, *LEGACY_NAMES})
#: Name prefixes that only the sample stage (``sample/``), ``evaluate`` (``eval_accuracy``) and ``validate``
#: (``val_accuracy``) write.
RESERVED_PREFIXES: tuple[str, ...] = ("sample/", TRAINER_EVAL_ACCURACY, TRAINER_VAL_ACCURACY)
#: The two evaluations, each with its own names (:func:`trainer_metrics`).
_EVALUATIONS = ("evaluate", "validate")


def _who(trainer: TrainerLike) -> str:
    return describe_component(trainer, "trainer")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def trainer_metrics(trainer: TrainerLike, metrics: Any, source: str) -> dict[str, Any]:
    """``metrics`` returned by ``trainer``'s ``source`` (``"rollout"``, ``"update"``, ``"evaluate"`` or
    ``"validate"``) as a dict of Python numbers; raises :class:`~flexkit.errors.ComponentError` naming the trainer
    when one is not a number or its name is not a string or is reserved (:data:`RESERVED_KEYS`; for rollout and
    update metrics also :data:`RESERVED_PREFIXES`), or is the other split's (``evaluate``: a ``val_`` name;
    ``validate``: a name without it)."""
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, Mapping):
        raise ComponentError(f"{_who(trainer)}: {source} must return a mapping of metric names to numbers, got "
                             f"{type(metrics).__name__}")
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise ComponentError(f"{_who(trainer)}: {source} returned a metric named {_short(key)}; metric names "
                                 "must be strings")
        if key in RESERVED_KEYS or key.startswith(PREFIX) or (source not in _EVALUATIONS
                                                               and key.startswith(RESERVED_PREFIXES)):
            raise ComponentError(f"{_who(trainer)}: {source} returned a metric named {key!r}, a name the runner "
                                 f"writes itself in metrics.jsonl; rename it (e.g. 'trainer/{key}')")
        if source == "evaluate" and key.startswith(TRAINER_VAL_PREFIX):
            raise ComponentError(f"{_who(trainer)}: evaluate (the test split) returned a metric named {key!r}; "
                                 "'val_' names are the validation split's: return them from validate (with "
                                 "supports_validation = True), or rename it")
        if source == "validate" and not key.startswith(TRAINER_VAL_PREFIX):
            fix = TRAINER_VAL_PREFIX + key.removeprefix("eval_")
            raise ComponentError(f"{_who(trainer)}: validate (the validation split) returned a metric named {key!r}; "
                                 f"its names start with 'val_' (e.g. {fix!r}) so that no validation number is read "
                                 "as a test one")
        number = plain_number(value)
        if number is NOT_A_NUMBER:
            raise ComponentError(f"{_who(trainer)}: {source} returned {type(value).__name__} {_short(value)} as "
                                 f"metric {key!r}; metrics must be numbers (int, float, a numpy scalar, or a 0-d "
                                 "numpy array or torch, jax or cupy tensor)")
        out[key] = number
    return out
