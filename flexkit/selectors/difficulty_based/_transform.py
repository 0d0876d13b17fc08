"""The global affine map of ``difficulty_based``: every task's true ``α``, ``β`` from its stored ``α̃``, ``β̃``.

Feedback moves every task not in the batch by the same affine map, so instead of rewriting N rows the selector
keeps one map for all (:class:`Transform`) and stores ``α̃``, ``β̃`` (:mod:`._store`) such that

    α = scale·α̃ + alpha_shift + f0_slope·f0 + f1_slope·f1,    β = scale·β̃ + beta_shift − f0_slope·f0 − f1_slope·f1.

The module docstring of :mod:`.model` writes the five numbers ``a``, ``b``, ``b_β``, ``p``, ``q``, and a saved state
keeps them under those keys (``"a"``, ``"b"``, ``"b_beta"``, ``"p"``, ``"q"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flexkit.errors import StateMismatchError

#: The keys of a saved transform, in the order of :class:`Transform`'s fields.
STATE_KEYS = ("a", "b", "b_beta", "p", "q")


@dataclass(slots=True)
class Transform:
    """The map from stored to true Beta parameters (see the module docstring); starts as the identity."""

    #: ``a``: the factor of ``α̃`` and ``β̃``.
    scale: float = 1.0
    #: ``b``: the constant added to ``α``.
    alpha_shift: float = 0.0
    #: ``b_β``: the constant added to ``β``.
    beta_shift: float = 0.0
    #: ``p``: moved from ``β`` to ``α`` per unit of ``f0``.
    f0_slope: float = 0.0
    #: ``q``: moved from ``β`` to ``α`` per unit of ``f1``.
    f1_slope: float = 0.0

    @property
    def total_shift(self) -> float:
        """``s = b + b_β``: the constant of ``α + β = scale·(α̃ + β̃) + s``."""
        return self.alpha_shift + self.beta_shift

    def reset(self) -> None:
        """Become the identity again (after a fold moved the map into the stored values)."""
        self.scale, self.alpha_shift, self.beta_shift, self.f0_slope, self.f1_slope = 1.0, 0.0, 0.0, 0.0, 0.0

    def forget(self, lamb: float, rho: float, m: int, capability: float) -> None:
        """Apply one feedback's update of a task not in the batch: ``α ← (1−λ)α + λ + ρm((1−c)f0 + c·f1)``,
        ``β ← (1−λ)β + λ + ρm(1 − (1−c)f0 − c·f1)`` with ``c`` = ``capability``."""
        keep = 1.0 - lamb
        self.scale *= keep
        self.alpha_shift = keep * self.alpha_shift + lamb
        self.beta_shift = keep * self.beta_shift + lamb + rho * m
        self.f0_slope = keep * self.f0_slope + rho * m * (1.0 - capability)
        self.f1_slope = keep * self.f1_slope + rho * m * capability

    def copy(self) -> Transform:
        """An independent copy."""
        return Transform(self.scale, self.alpha_shift, self.beta_shift, self.f0_slope, self.f1_slope)

    def state(self) -> dict[str, float]:
        """The saved form: ``{"a": scale, "b": alpha_shift, "b_beta": beta_shift, "p": f0_slope, "q": f1_slope}``."""
        values = (self.scale, self.alpha_shift, self.beta_shift, self.f0_slope, self.f1_slope)
        return dict(zip(STATE_KEYS, values, strict=True))

    @classmethod
    def from_state(cls, saved: Mapping[str, Any]) -> Transform:
        """The transform of a saved :meth:`state` (``ValueError`` unless its scale is positive)."""
        values = [float(saved[key]) for key in STATE_KEYS]
        if not values[0] > 0:
            raise StateMismatchError(f"saved transform scale must be positive, got {values[0]!r}")
        return cls(*values)
