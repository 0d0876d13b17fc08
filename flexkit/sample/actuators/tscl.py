"""``tscl`` (mix): favour the tasksets whose reward changes fastest, up or down.

Teacher–Student Curriculum Learning (Matiisen et al., arXiv 1707.00183): a teacher gives the student the
subtasks on which it makes the fastest progress — the largest slope of the learning curve — and, to counter
forgetting, also those where the score falls: it samples by the **absolute** slope. Its *Window* algorithm
estimates the slope by linear regression over each task's recent scores; flexkit regresses every score of
taskset ``d`` in the last ``window`` training steps on its step (least squares over samples: each step's mean
weighted by its sample count ``c_s``)::

    β_d = Σ_s c_s (s − s̄)(r_s − r̄) / Σ_s c_s (s − s̄)²         (steps s of the window with samples of d)
    p_d = floor / K + (1 − floor) · softmax_d(|β_d| / τ)

``β`` is in score units per training step (with the ``reward`` scorer and a 0/1 reward: pass rate per step), so
``τ`` is in those units too. ``signed = true`` uses ``max(β, 0)`` (only improving tasksets; DataFlex-RL's
option). A taskset with fewer than two steps of samples in the window has ``β = 0``. The statistics are the
window every windowed mixer shares (:class:`~flexkit.sample.actuators.taskset_mixer.WindowMixer`), which is
all of the state. O(B + K·window) per call.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import SampleError
from flexkit.sample._actuator import Mix
from flexkit.sample._batch import RolloutBatch
from flexkit.sample.actuators.taskset_mixer import WindowMixer, softmax, with_floor


@attrs.frozen(kw_only=True)
class TsclConfig:
    """Parameters of the ``tscl`` mixer."""

    window: int = field(default=10, ge=2, doc="Training steps whose scores the learning-curve slope is fitted on.")
    temperature: float = field(
        default=0.002, gt=0, doc="τ: softmax temperature over |slope|, in score units per step."
    )
    floor: float = field(default=0.0, ge=0, le=1, doc="Share spread uniformly over all tasksets (floor/K each).")
    signed: bool = field(default=False, doc="Use max(slope, 0) instead of |slope| (only improving tasksets).")


def slopes(steps: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Count-weighted least-squares slope of each column's step means against ``steps`` (0 if undetermined).

    ``steps`` (S,), ``sums`` and ``counts`` (S, K): the same slope as regressing every sample on its step.
    """
    c = counts
    n = c.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        s_bar = (c * steps[:, None]).sum(axis=0) / n
        r_bar = sums.sum(axis=0) / n
        ds = steps[:, None] - s_bar
        means = np.where(c > 0, sums / np.where(c > 0, c, 1.0), 0.0)
        num = (c * ds * (means - r_bar)).sum(axis=0)
        den = (c * ds * ds).sum(axis=0)
        beta = num / den
    return np.where((n > 0) & (den > 0) & np.isfinite(beta), beta, 0.0)


class TsclMixer(WindowMixer):
    """TSCL's window teacher over tasksets (module docstring)."""

    Config = TsclConfig

    def progress(self) -> np.ndarray:
        """``|β_d|`` (or ``max(β_d, 0)`` when ``signed``) per taskset id."""
        beta = slopes(*self.recent.series(self.num_tasksets))
        progress: np.ndarray = np.maximum(beta, 0.0) if self.config.signed else np.abs(beta)
        return progress

    def current_proportions(self) -> dict[int, float]:
        """``floor/K + (1 − floor)·softmax(progress/τ)`` keyed by taskset id."""
        if self.num_tasksets == 0:
            raise SampleError("the mixer has seen no taskset yet (and was not bound)")
        soft = softmax(self.progress() / self.config.temperature)
        return {i: float(v) for i, v in enumerate(with_floor(soft, self.config.floor))}

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """Record this call's per-taskset scores, then the mix by learning progress."""
        self.observe(scores, batch, step)
        return Mix(self.current_proportions())
