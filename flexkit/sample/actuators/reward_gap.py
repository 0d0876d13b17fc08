"""``reward_gap`` (mix): shift the taskset mix toward the tasksets the model is worst at.

After DataFlex-RL's reward-gap mixer (softmax of (max reward − domain
reward)/T with a floor). For ``K`` tasksets with window-mean score ``r_d``::

    p_d = floor / K + (1 − floor) · softmax_d((max_e r_e − r_d) / temperature)

so the lowest-scoring taskset gets the largest share and none gets less than ``floor / K``.

Statistics: the configured scorer's per-sample scores (use ``reward`` for the reward-gap rule) are summed per
``taskset_id`` each step; the mixer keeps ``(sum, count)`` per taskset for each of the last ``window``
**steps** (a step ``s`` is dropped once the current step reaches ``s + window``; several calls for one step
add up), and ``r_d = Σ sums / Σ counts`` over the window — a mean over samples, not a mean of step means.
Domain scores (``{taskset_id: value}``) count as one sample per taskset and step. DataFlex-RL feeds every
mixer per-domain means and counts its window in responses; flexkit uses the configured scorer and counts
steps, so the window covers the same span of training whatever the batch size.

A taskset with no sample in the window gets the mean of the others' ``r_d`` (neither favoured nor starved);
with no data at all the mix is uniform. The number of tasksets comes from :meth:`RewardGapMixer.bind` (the
pipeline calls it); unbound, it is one more than the largest taskset id seen. Proportions are keyed by
taskset id. The window is the statistics every windowed mixer shares
(:class:`~flexkit.sample.actuators.taskset_mixer.WindowMixer`); it is all of the state.
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
class RewardGapConfig:
    """Parameters of the ``reward_gap`` mixer."""

    window: int = field(default=10, ge=1, doc="Number of most recent training steps whose statistics count.")
    temperature: float = field(
        default=0.1, gt=0, doc="Softmax temperature over reward gaps: small values chase the worst taskset."
    )
    floor: float = field(
        default=0.1, ge=0, le=1, doc="Share spread uniformly over all tasksets, so none starves (floor/K each)."
    )


class RewardGapMixer(WindowMixer):
    """Taskset proportions from per-taskset score gaps over a window of steps (see the module docstring)."""

    Config = RewardGapConfig

    def taskset_scores(self) -> np.ndarray:
        """Window-mean score per taskset id (NaN for tasksets without data in the window)."""
        return self.recent.means(self.num_tasksets)

    def current_proportions(self) -> dict[int, float]:
        """The mix from the current window, keyed by taskset id (uniform without data)."""
        k = self.num_tasksets
        if k == 0:
            raise SampleError("the mixer has seen no taskset yet (and was not bound)")
        r = self.taskset_scores()
        seen = ~np.isnan(r)
        if not seen.any():
            return {i: 1.0 / k for i in range(k)}
        r = np.where(seen, r, r[seen].mean())
        p = with_floor(softmax((r.max() - r) / self.config.temperature), self.config.floor)
        return {i: float(v) for i, v in enumerate(p)}

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """Record this step's per-taskset statistics, drop steps outside the window, return the new mix."""
        self.observe(scores, batch, step)
        return Mix(self.current_proportions())
