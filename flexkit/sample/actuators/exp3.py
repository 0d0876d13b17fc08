"""``exp3`` (mix): EXP3 over tasksets with importance-weighted reward estimates and decaying exploration.

After Online Data Mixing (Albalak et al., arXiv 2312.02406), which treats data groups as the arms of an EXP3
bandit rewarded by the training loss on each group. With ``K`` tasksets and update count ``t ≥ 1``::

    ε_t  = min(1/K, sqrt(ln K / (K·t)))
    π_t  = (1 − K·ε_t) · softmax(ε_{t−1} · R̂) + ε_t
    R̂_i ← γ · R̂_i + (1 − γ) · x_i,    x_i = (n_i / (n · π_i)) · R_i

where ``R_i`` is the mean score of taskset ``i``'s ``n_i`` samples among the ``n`` of this call and ``π`` the
policy that produced the batch. ODM draws one group per step and uses ``R_i / π_i``; a flexkit batch mixes
tasksets, so the importance weight uses the taskset's share of the batch, ``n_i / n`` (whose expectation is
``π_i``): ``x_i`` has the same expectation and less variance. Only tasksets present in the batch update
(``R̂`` of the others is kept), as in ODM. With ``estimate = "sum"`` the estimate accumulates
(``R̂_i ← R̂_i + x_i``, textbook EXP3): the ODM moving average keeps ``R̂`` at the reward's scale, so with a
decaying ``ε`` its mix stays close to uniform unless ``reward_scale`` is large. The reward is the configured
scorer's (ODM uses the loss; with GRPO, ``advantage_magnitude`` or 1 − ``reward`` are stand-ins).
O(B) per call. State: ``R̂``, ``t``, ``π``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import StateMismatchError
from flexkit.sample._actuator import Mix
from flexkit.sample._batch import RolloutBatch
from flexkit.sample.actuators.taskset_mixer import BanditMixer, softmax


@attrs.frozen(kw_only=True)
class Exp3Config:
    """Parameters of the ``exp3`` mixer."""

    smoothing: float = field(default=0.9, ge=0, lt=1, doc="γ: weight kept by the reward estimate at each update.")
    estimate: str = field(
        default="ema", choices=("ema", "sum"),
        doc='"ema": R̂ is a moving average of x (ODM); "sum": R̂ accumulates x (textbook EXP3, sharper over time).',
    )
    reward_scale: float = field(
        default=1.0, gt=0, doc="Multiplies the scores before they enter the estimate (sets the softmax's scale)."
    )


def exploration(k: int, t: int) -> float:
    """``ε_t = min(1/K, sqrt(ln K / (K·t)))`` (0 for a single taskset; ``1/K`` before the first update)."""
    if k <= 1:
        return 0.0
    if t <= 0:
        return 1.0 / k
    return min(1.0 / k, math.sqrt(math.log(k) / (k * t)))


class Exp3Mixer(BanditMixer):
    """ODM's EXP3 mix over tasksets (module docstring)."""

    Config = Exp3Config

    def __init__(self, config: Exp3Config | None = None) -> None:
        super().__init__(config)
        self.t = 0
        self.policy = np.zeros(0)

    def policy_at(self, t: int) -> np.ndarray:
        """``π_t`` from the current estimates."""
        k = self.num_tasksets
        eps, eps_prev = exploration(k, t), exploration(k, t - 1)
        return (1.0 - k * eps) * softmax(eps_prev * self.values) + eps

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """Importance-weighted update of the present tasksets' estimates, then the next policy."""
        sums, counts = self.stats(scores, batch)
        k = self.num_tasksets
        if len(self.policy) != k:
            self.policy = self.policy_at(self.t)
        present = counts > 0
        total = counts.sum()
        if total > 0:
            mean = sums[present] / counts[present] * self.config.reward_scale
            x = counts[present] / (total * self.policy[present]) * mean
            if self.config.estimate == "sum":
                self.values[present] += x
            else:
                g = self.config.smoothing
                self.values[present] = g * self.values[present] + (1.0 - g) * x
        self.t += 1
        self.policy = self.policy_at(self.t)
        return Mix({i: float(v) for i, v in enumerate(self.policy)})

    def state_dict(self) -> dict[str, Any]:
        """Estimates ``R̂``, update count ``t`` and the current policy."""
        return {"estimates": self.values.tolist(), "t": self.t, "policy": self.policy.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if not state:
            return
        values = self.load_values(state["estimates"])
        policy = np.array(state["policy"], dtype=np.float64).reshape(-1)
        t = int(state["t"])
        if t < 0 or len(policy) > len(values) or not np.isfinite(policy).all() or (policy < 0).any():
            raise StateMismatchError("saved exp3 state is inconsistent")
        self.values, self.t = values, t
        self.policy = policy if len(policy) == len(values) else self.policy_at(t)
