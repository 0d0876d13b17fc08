"""``dump_ucb`` (mix): a UCB bandit over tasksets valued by their recent mean |advantage|.

DUMP (Wang et al., "DUMP: Automated Distribution-Level Curriculum Learning for RL-based LLM Post-training",
arXiv 2504.09710): the expected absolute advantage of a data distribution measures how much the policy can
still learn from it (near 0 for distributions it has mastered and for those it cannot solve yet). Each
distribution (here: taskset) is an arm of an upper-confidence-bound bandit, valued by the mean |advantage| of
its recent samples plus an exploration bonus for arms sampled little, and the next batches are drawn from a
softmax over the bounds::

    UCB_d = L̂_d + c · sqrt(2 · ln N / n_d),       N = Σ_d n_d
    p_d   = floor / K + (1 − floor) · softmax_d(UCB_d / τ)

``L̂_d`` is the mean score of taskset ``d``'s samples in the last ``window`` training steps (the window every
windowed mixer shares, :class:`~flexkit.sample.actuators.taskset_mixer.WindowMixer`; DUMP's window holds a
taskset's last samples instead), ``n_d`` the number of its samples scored since the start. Pair it with the
``advantage_magnitude`` scorer (``timing = "post_advantage"``). With ``c > 0`` a taskset never sampled
(``n_d = 0``) has an infinite bound: such tasksets share the non-floor mix until each has been sampled, as in
UCB1 (``c = 0``: pure exploitation, no bonus at all). A taskset with no sample in the window is valued at the
mean of the others' ``L̂`` (neither favoured nor starved; its bonus still grows). Domain scores
(``{taskset_id: value}``) count as one sample per taskset. O(B + K·window) per call. State: the window and
``n``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import SampleError, StateMismatchError
from flexkit.sample._actuator import Mix
from flexkit.sample._batch import RolloutBatch
from flexkit.sample.actuators.taskset_mixer import WindowMixer, pad, softmax, with_floor


@attrs.frozen(kw_only=True)
class DumpUcbConfig:
    """Parameters of the ``dump_ucb`` mixer."""

    window: int = field(default=10, ge=1, doc="Training steps whose samples make each taskset's mean |advantage|.")
    exploration: float = field(default=1.0, ge=0, doc="c: weight of the UCB bonus sqrt(2 ln N / n_d).")
    temperature: float = field(default=0.1, gt=0, doc="τ: softmax temperature over the upper confidence bounds.")
    floor: float = field(default=0.0, ge=0, le=1, doc="Share spread uniformly over all tasksets (floor/K each).")


class DumpUcbMixer(WindowMixer):
    """DUMP's UCB mix over tasksets (module docstring)."""

    Config = DumpUcbConfig

    def __init__(self, config: DumpUcbConfig | None = None) -> None:
        super().__init__(config)
        self.visits = np.zeros(0)

    def upper_bounds(self) -> np.ndarray:
        """``UCB_d`` per taskset id (``inf`` for tasksets never sampled, when ``exploration > 0``)."""
        k = self.num_tasksets
        n = pad(self.visits, k)
        value = self.recent.means(k)
        seen = ~np.isnan(value)
        value = np.where(seen, value, value[seen].mean() if seen.any() else 0.0)
        c = self.config.exploration
        visited = n > 0
        bonus = np.zeros(k)
        bonus[visited] = c * np.sqrt(2.0 * np.log(max(n.sum(), 1.0)) / n[visited])
        ucb = value + bonus
        if c > 0:
            ucb[~visited] = np.inf
        return ucb

    def current_proportions(self) -> dict[int, float]:
        """``floor/K + (1 − floor)·softmax(UCB/τ)``; never-sampled tasksets first (uniform without data)."""
        k = self.num_tasksets
        if k == 0:
            raise SampleError("the mixer has seen no taskset yet (and was not bound)")
        ucb = self.upper_bounds()
        unseen = np.isinf(ucb)
        if unseen.all():
            soft = np.full(k, 1.0 / k)
        elif unseen.any():
            soft = unseen / unseen.sum()
        else:
            soft = softmax(ucb / self.config.temperature)
        return {i: float(v) for i, v in enumerate(with_floor(soft, self.config.floor))}

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """Record this call's per-taskset |advantage| and counts, then the UCB mix."""
        _, counts = self.observe(scores, batch, step)
        self.visits = pad(self.visits, len(counts)) + counts
        return Mix(self.current_proportions())

    def state_dict(self) -> dict[str, Any]:
        """The window, the number of tasksets, the last step and the sample counts ``n``."""
        return {**super().state_dict(), "visits": self.visits.tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        visits = np.asarray(state["visits"], dtype=np.float64).reshape(-1)
        if len(visits) > self.check_num_tasksets(state) or not np.isfinite(visits).all() or (visits < 0).any():
            raise StateMismatchError("saved dump_ucb visit counts are inconsistent")
        super().load_state_dict(state)
        self.visits = visits
