"""The model of a never-observed task that ``difficulty_based``'s greedy index (:mod:`._index`) rests on.

A task not observed since the last fold has stored values that are functions of its features alone:
``α̃ = m0 + mp·f0 + mq·f1`` and ``α̃ + β̃ = ms``. The four numbers are saved (key ``model``) and a fold maps them
like every task's values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from flexkit.errors import StateMismatchError
from flexkit.selectors.difficulty_based._transform import Transform


class TaskModel(NamedTuple):
    """A never-observed task's stored values as functions of its features: ``α̃ = alpha_base + alpha_f0·f0 +
    alpha_f1·f1`` and ``α̃ + β̃ = total`` (``m0``, ``mp``, ``mq``, ``ms`` in the module docstring and the saved
    state)."""

    alpha_base: float
    alpha_f0: float
    alpha_f1: float
    total: float

    def folded(self, transform: Transform) -> TaskModel:
        """The model after ``transform`` is folded into the stored values."""
        a = transform.scale
        return TaskModel(a * self.alpha_base + transform.alpha_shift, a * self.alpha_f0 + transform.f0_slope,
                         a * self.alpha_f1 + transform.f1_slope,
                         a * self.total + transform.alpha_shift + transform.beta_shift)

    def state(self) -> dict[str, float]:
        """The saved form, keys ``m0``, ``mp``, ``mq``, ``ms``."""
        return dict(zip(MODEL_KEYS, self, strict=True))

    @classmethod
    def from_state(cls, saved: Mapping[str, Any] | None) -> TaskModel:
        """The model of a saved :meth:`state` (a fresh one for None: older checkpoints; ``ValueError`` for
        non-finite values)."""
        if saved is None:
            return FRESH_MODEL
        model = cls(*(float(saved[key]) for key in MODEL_KEYS))
        if not all(math.isfinite(v) for v in model):
            raise StateMismatchError(f"saved model holds non-finite values: {tuple(model)!r}")
        return model


#: The keys of a saved :class:`TaskModel`.
MODEL_KEYS = ("m0", "mp", "mq", "ms")
#: The model of a fresh selector: α̃ = 1, α̃ + β̃ = 2.
FRESH_MODEL = TaskModel(1.0, 0.0, 0.0, 2.0)
