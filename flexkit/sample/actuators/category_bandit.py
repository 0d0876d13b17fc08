"""``category_bandit`` (mix): a bandit over tasksets valued by TD(0) on mean |advantage|, Boltzmann mix.

After SEC, "Self-Evolving Curriculum for LLM Reasoning" (Chen et al., arXiv 2505.14970): curriculum selection
as a non-stationary multi-armed bandit whose arms are problem categories (here: tasksets). The reward of an arm
at a step is the mean absolute advantage of its samples in the batch, a proxy of the learning gain; its value
follows a TD(0) update and the next batches are drawn by a Boltzmann distribution::

    Q_c ← Q_c + α · (r_c − Q_c)      (only for tasksets with samples in this batch)
    p_c = floor / K + (1 − floor) · softmax_c(Q_c / τ)

Pair it with the ``advantage_magnitude`` scorer (``timing = "post_advantage"``). ``Q`` starts at 0 (uniform
mix). ``floor`` (default 0, as in the paper) reserves a share for every taskset. O(B) per call. State: ``Q``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from flexkit.config import field
from flexkit.sample._actuator import Mix
from flexkit.sample._batch import RolloutBatch
from flexkit.sample.actuators.taskset_mixer import BanditMixer, softmax


@attrs.frozen(kw_only=True)
class CategoryBanditConfig:
    """Parameters of the ``category_bandit`` mixer."""

    learning_rate: float = field(default=0.5, gt=0, le=1, doc="α: TD(0) step toward each step's reward.")
    temperature: float = field(default=0.2, gt=0, doc="τ: Boltzmann temperature over the values Q.")
    floor: float = field(default=0.0, ge=0, le=1, doc="Share spread uniformly over all tasksets (floor/K each).")


class CategoryBandit(BanditMixer):
    """SEC's TD(0) bandit over tasksets with Boltzmann proportions (module docstring)."""

    Config = CategoryBanditConfig

    def current_proportions(self) -> dict[int, float]:
        """``floor/K + (1 − floor)·softmax(Q/τ)`` keyed by taskset id."""
        k = self.num_tasksets
        p = self.config.floor / k + (1.0 - self.config.floor) * softmax(self.values / self.config.temperature)
        return {i: float(v) for i, v in enumerate(p)}

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """TD(0) update of the tasksets present in this batch, then the Boltzmann mix."""
        sums, counts = self.stats(scores, batch)
        present = counts > 0
        reward = sums[present] / counts[present]
        self.values[present] += self.config.learning_rate * (reward - self.values[present])
        return Mix(self.current_proportions())

    def state_dict(self) -> dict[str, Any]:
        """The values ``Q`` per taskset id."""
        return {"q": self.values.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if state:
            self.values = self.load_values(state["q"])
