"""``prioritized_replay``: replay seen tasks by score rank and staleness, or draw unseen ones.

After Prioritized Level Replay (Jiang, Grefenstette & Rocktäschel, arXiv 2010.03934). Seen tasks sit in a
replay buffer with a score ``S_i`` from their last visit and the step ``C_i`` they were last served. Each
batch slot replays a seen task with probability ``replay_prob`` (else an unseen task is drawn uniformly);
replayed tasks are drawn without replacement from::

    P(i) = (1 − ρ) · P_S(i) + ρ · P_C(i),   P_S(i) ∝ (1 / rank(S_i))^(1/β),   P_C(i) ∝ c − C_i

(``rank`` 1 = highest score, ``c`` = the current step). PLR scores a level by its mean |advantage|; for a
group of binary rewards with success rate ``p`` and group-normalised advantages that mean is exactly
``2·sqrt(p(1 − p))``, which flexkit computes from the feedback value. Against the selection-bias trap the
observed rate is first shrunk toward the pooled pass rate ``p̄`` (an EMA of every feedback batch's mean):
``p̃ = (m·v + κ·p̄) / (m + κ)``, so one lucky group of ``m`` rollouts does not top the ranking.

The buffer holds at most ``buffer_size`` tasks (as in Robust PLR's level buffer): a new task enters when there
is room or when its score beats the lowest in the buffer, which then leaves (and counts as unseen again). Cost
per step: O(buffer_size · log buffer_size) for the ranks plus O(B) for unseen draws, independent of the
taskset size. State: the buffer (index, score, last step), the step counter, ``p̄`` and the RNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector
from flexkit.selectors._estimates import PooledRate, gumbel_top_k


@attrs.frozen(kw_only=True)
class PrioritizedReplayConfig:
    """Parameters of the ``prioritized_replay`` selector."""

    replay_prob: float = field(default=0.5, ge=0, le=1, doc="Probability that a batch slot replays a seen task.")
    beta: float = field(default=0.1, gt=0, doc="β: temperature of the rank prioritisation (small: sharper).")
    staleness: float = field(default=0.1, ge=0, le=1, doc="ρ: weight of the staleness distribution in the mix.")
    buffer_size: int = field(default=4096, ge=1, le=10_000_000, doc="Most seen tasks kept in the replay buffer.")
    prior_strength: float = field(
        default=2.0, ge=0, doc="κ: pseudo-rollouts of the pooled pass rate mixed into each observed rate."
    )
    m: int = field(default=8, ge=1, le=1_000_000, doc="Rollouts behind one feedback value.")
    pool_rate: float = field(default=0.1, gt=0, le=1, doc="EMA weight of each feedback batch's mean in p̄.")


class PrioritizedReplaySelector(Selector):
    """PLR's rank + staleness replay over a bounded buffer of seen tasks (module docstring)."""

    Config = PrioritizedReplayConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    @property
    def _slot_dtype(self) -> type[np.signedinteger]:
        """int32 slots (4 bytes per task) unless the buffer could hold 2^31 tasks."""
        return np.int32 if self.capacity < 2**31 else np.int64

    def _init_state(self) -> None:
        self.capacity = min(self.config.buffer_size, self.size)
        self._index = np.zeros(self.capacity, dtype=np.int64)  # preallocated; the first `count` are in use
        self._score = np.zeros(self.capacity)
        self._last = np.zeros(self.capacity, dtype=np.int64)
        self.count = 0
        self.slot = np.full(self.size, -1, dtype=self._slot_dtype)  # slot of each task in the buffer, -1: unseen
        self.clock = 0
        self.pool = PooledRate(self.config.pool_rate)

    @property
    def buf_index(self) -> np.ndarray:
        """Task index per buffer slot."""
        return self._index[: self.count]

    @property
    def buf_score(self) -> np.ndarray:
        """Score per buffer slot."""
        return self._score[: self.count]

    @property
    def buf_last(self) -> np.ndarray:
        """Step each buffer slot was last served (or entered)."""
        return self._last[: self.count]

    # -- scores -----------------------------------------------------------------------------------------

    def score(self, values: np.ndarray) -> np.ndarray:
        """``2·sqrt(p̃(1 − p̃))`` with ``p̃`` the value shrunk toward the pooled pass rate."""
        c = self.config
        p = (c.m * values + c.prior_strength * self.pool.value) / (c.m + c.prior_strength)
        scores: np.ndarray = 2.0 * np.sqrt(np.clip(p * (1.0 - p), 0.0, None))
        return scores

    def replay_distribution(self) -> np.ndarray:
        """``P(i)`` over the buffer's slots (rank and staleness mixed by ρ)."""
        n = len(self.buf_index)
        ranks = np.empty(n)
        ranks[np.argsort(-self.buf_score, kind="stable")] = np.arange(1, n + 1)
        p_score = (1.0 / ranks) ** (1.0 / self.config.beta)
        p_score /= p_score.sum()
        stale = (self.clock - self.buf_last).astype(np.float64)
        p_stale = stale / stale.sum() if stale.sum() > 0 else np.full(n, 1.0 / n)
        rho = self.config.staleness
        probabilities: np.ndarray = (1.0 - rho) * p_score + rho * p_stale
        return probabilities

    # -- selection --------------------------------------------------------------------------------------

    def _draw_unseen(self, count: int) -> np.ndarray:
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        for _ in range(4):  # rejection: cheap while the buffer is a small part of the taskset
            draw = self.rng.choice(self.size, size=min(self.size, 2 * count + 8), replace=False)
            fresh = draw[self.slot[draw] < 0]
            if len(fresh) >= count:
                return fresh[:count].astype(np.int64)
        unseen = np.flatnonzero(self.slot < 0)
        return self.rng.choice(unseen, size=count, replace=False).astype(np.int64)

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        seen = self.count
        replays = int(self.rng.binomial(batch_size, self.config.replay_prob)) if seen else 0
        replays = max(min(replays, seen), batch_size - (self.size - seen))
        picked = np.zeros(0, dtype=np.int64)
        if replays:
            probs = self.replay_distribution()
            with np.errstate(divide="ignore"):
                slots = gumbel_top_k(np.log(probs), replays, 1.0, self.rng)
            picked = self.buf_index[slots]
            self.buf_last[slots] = self.clock
        fresh = self._draw_unseen(batch_size - replays)
        self.clock += 1
        info = {"replayed": replays, "buffer": seen} if return_extra_info else {}
        return np.concatenate([picked, fresh]), info

    # -- feedback ---------------------------------------------------------------------------------------

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        self.pool.update(values)
        scores = self.score(values)
        inside = self.slot[indices] >= 0
        self.buf_score[self.slot[indices[inside]]] = scores[inside]
        for i, s in zip(indices[~inside].tolist(), scores[~inside].tolist(), strict=True):
            if self.count < self.capacity:
                slot = self.count
                self.count += 1
            else:
                slot = int(np.argmin(self.buf_score))
                if not s > self._score[slot]:
                    continue
                self.slot[self._index[slot]] = -1
            self.slot[i] = slot
            self._index[slot], self._score[slot], self._last[slot] = i, s, self.clock

    # -- state ------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """RNG, step counter, pooled pass rate and the buffer (index, score, last step per entry)."""
        return {**super().state_dict(), "clock": self.clock, "pool": self.pool.state_dict(),
                "buffer_index": self.buf_index.copy(), "buffer_score": self.buf_score.copy(),
                "buffer_last": self.buf_last.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        index = np.array(state["buffer_index"], dtype=np.int64).reshape(-1)
        score = np.array(state["buffer_score"], dtype=np.float64).reshape(-1)
        last = np.array(state["buffer_last"], dtype=np.int64).reshape(-1)
        clock = int(state["clock"])
        if not (index.shape == score.shape == last.shape) or len(index) > self.capacity:
            raise StateMismatchError(f"saved replay buffer has inconsistent shapes or more than {self.capacity} "
                                     "entries")
        if index.size and (index.min() < 0 or index.max() >= self.size or np.unique(index).size != index.size):
            raise StateMismatchError("saved replay buffer holds duplicate or out-of-range task indices")
        if index.size and (not np.isfinite(score).all() or last.max() > clock or last.min() < 0):
            raise StateMismatchError("saved replay buffer holds invalid scores or steps")
        pool = PooledRate(self.config.pool_rate)
        pool.load_state_dict(state["pool"])
        super().load_state_dict(state)
        n = len(index)
        self._index[:n], self._score[:n], self._last[:n] = index, score, last
        self.count, self.clock, self.pool = n, clock, pool
        self.slot = np.full(self.size, -1, dtype=self._slot_dtype)
        self.slot[index] = np.arange(n)
