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
taskset id. The whole window is in :meth:`~RewardGapMixer.state_dict`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.sample.actuator import Mix
from flexkit.sample.actuators.taskset_mixer import TasksetMixer
from flexkit.sample.batch import RolloutBatch, SampleError


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


class RewardGapMixer(TasksetMixer):
    """Taskset proportions from per-taskset score gaps over a window of steps (see the module docstring)."""

    name = "reward_gap"

    def __init__(self, config: RewardGapConfig | None = None) -> None:
        super().__init__(config if config is not None else RewardGapConfig())
        self._window: deque[tuple[int, np.ndarray, np.ndarray]] = deque()
        self._last_step: int | None = None

    # -- statistics -------------------------------------------------------------------------------------

    def _record(self, step: int, sums: np.ndarray, counts: np.ndarray) -> None:
        if self._window and self._window[-1][0] == step:
            _, old_sums, old_counts = self._window.pop()
            sums, counts = _pad(old_sums, len(sums)) + sums, _pad(old_counts, len(counts)) + counts
        self._window.append((step, sums, counts))
        self._last_step = step
        while self._window and self._window[0][0] <= step - self.config.window:
            self._window.popleft()

    def taskset_scores(self) -> np.ndarray:
        """Window-mean score per taskset id (NaN for tasksets without data in the window)."""
        k = self.num_tasksets
        sums, counts = np.zeros(k), np.zeros(k)
        for _, s, c in self._window:
            sums += _pad(s, k)
            counts += _pad(c, k)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.where(counts > 0, counts, 1.0), np.nan)

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
        logits = (r.max() - r) / self.config.temperature
        soft = np.exp(logits - logits.max())
        soft /= soft.sum()
        floor = self.config.floor
        p = floor / k + (1.0 - floor) * soft
        return {i: float(v) for i, v in enumerate(p)}

    # -- actuator ---------------------------------------------------------------------------------------

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """Record this step's per-taskset statistics, drop steps outside the window, return the new mix."""
        step = int(step)
        if self._last_step is not None and step < self._last_step:
            raise SampleError(f"steps must not go backwards: got step {step} after step {self._last_step}")
        sums, counts = self.stats(scores, batch)
        self._record(step, sums, counts)
        return Mix(self.current_proportions())

    def state_dict(self) -> dict[str, Any]:
        """The window (plain lists), the number of tasksets and the last step."""
        return {
            "num_tasksets": self.num_tasksets,
            "last_step": self._last_step,
            "window": [{"step": s, "sums": sums.tolist(), "counts": counts.tolist()}
                       for s, sums, counts in self._window],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        k = int(state["num_tasksets"])
        if self._bound is not None and k > self._bound:
            raise ValueError(f"saved state has {k} tasksets but the pipeline has {self._bound}")
        window = deque()
        for entry in state["window"]:
            sums = np.asarray(entry["sums"], dtype=np.float64)
            counts = np.asarray(entry["counts"], dtype=np.float64)
            if sums.shape != counts.shape or sums.ndim != 1 or len(sums) > k:
                raise ValueError("saved mixer window has inconsistent shapes")
            if not (np.isfinite(sums).all() and np.isfinite(counts).all() and (counts >= 0).all()):
                raise ValueError("saved mixer window holds invalid values")
            window.append((int(entry["step"]), sums, counts))
        last = state["last_step"]
        self._num_tasksets = max(k, self._bound or 0)
        self._window = window
        self._last_step = None if last is None else int(last)


def _pad(a: np.ndarray, k: int) -> np.ndarray:
    return a if len(a) >= k else np.concatenate([a, np.zeros(k - len(a))])
