"""``zero_variance_skip``: skip tasks whose recent groups were all correct or all wrong, with a probability
that grows with the streak.

After GRESO, "Act Only When It Pays" (arXiv 2506.02177): a group whose rewards are all equal gives GRPO no
gradient, and a prompt that gave such a group is likely to do so again. Per task, ``z_i`` counts its
consecutive zero-variance observations and remembers their kind (all correct = easy, all wrong = hard). A
candidate is kept with probability ``max(p^z, min_prob)`` (``p = p_easy`` or ``p_hard`` by kind; ``z = 0``:
always kept). After each feedback batch each ``p`` moves by ``adjust_step`` toward a target share of
zero-variance tasks of its kind: when the batch's share of all-correct tasks exceeds ``target_easy``,
``p_easy`` decreases (skip easy tasks more), otherwise it increases, clipped to ``[min_prob, 1]``; likewise
for ``p_hard``. The paper adjusts once per epoch; flexkit does it per feedback batch, with a small step.

A feedback value ``v`` (mean reward of a group) is all correct when ``v ≥ 1 − tolerance`` and all wrong when
``v ≤ tolerance`` (binary rewards). Each batch draws ``K = ceil(candidates · B)`` tasks uniformly and runs the
skip test on each; the first ``B`` kept are served, and when fewer than ``B`` survive, the skipped candidates
with the highest keep probability fill the batch (so a batch is always full). Cost: O(K) per selection,
O(feedback) per update. State: ``z`` and its kind per task, ``p_easy``, ``p_hard``, the RNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector
from flexkit.selectors._estimates import candidate_count, draw_candidates, load_array, top_k

#: Kinds of a zero-variance streak.
NONE, EASY, HARD = 0, 1, 2


@attrs.frozen(kw_only=True)
class ZeroVarianceSkipConfig:
    """Parameters of the ``zero_variance_skip`` selector."""

    candidates: float = field(
        default=2.0, ge=1, le=1e6, doc="Candidates drawn uniformly per batch, as a multiple of the batch size."
    )
    p_easy: float = field(default=0.5, ge=0, le=1, doc="Initial keep base for all-correct streaks (kept: p^z).")
    p_hard: float = field(default=0.5, ge=0, le=1, doc="Initial keep base for all-wrong streaks (kept: p^z).")
    target_easy: float = field(default=0.083, ge=0, le=1, doc="Target share of all-correct tasks in a batch.")
    target_hard: float = field(default=0.167, ge=0, le=1, doc="Target share of all-wrong tasks in a batch.")
    adjust_step: float = field(default=0.01, ge=0, le=1, doc="How far p_easy / p_hard move per feedback batch.")
    min_prob: float = field(default=0.01, ge=0, le=1, doc="Lowest keep probability (and lowest p).")
    tolerance: float = field(
        default=1e-6, ge=0, lt=0.5, doc="A value within this of 1 (of 0) counts as all correct (all wrong)."
    )


class ZeroVarianceSkipSelector(Selector):
    """Uniform candidates, each skipped with probability ``1 − max(p^z, min_prob)`` (module docstring)."""

    Config = ZeroVarianceSkipConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    def _init_state(self) -> None:
        config = self.config
        self.streak = np.zeros(self.size, dtype=np.int64)
        self.kind = np.zeros(self.size, dtype=np.int8)
        self.p_easy = max(float(config.p_easy), config.min_prob)
        self.p_hard = max(float(config.p_hard), config.min_prob)

    def keep_probability(self, indices: np.ndarray) -> np.ndarray:
        """``max(p^z, min_prob)`` per task (1 for tasks without a zero-variance streak)."""
        z = self.streak[indices]
        base = np.where(self.kind[indices] == EASY, self.p_easy, self.p_hard)
        return np.where(z > 0, np.maximum(base ** z.astype(np.float64), self.config.min_prob), 1.0)

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        cand = draw_candidates(self.rng, self.size, candidate_count(batch_size, self.config.candidates, self.size))
        q = self.keep_probability(cand)
        kept = self.rng.random(len(cand)) < q
        order = np.concatenate([np.flatnonzero(kept), np.flatnonzero(~kept)[top_k(q[~kept], len(cand))]])
        pick = order[:batch_size]
        info = {"candidates": len(cand), "skipped": int((~kept).sum()), "p_easy": self.p_easy,
                "p_hard": self.p_hard} if return_extra_info else {}
        return cand[pick], info

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        c = self.config
        kind = np.where(values >= 1.0 - c.tolerance, EASY, np.where(values <= c.tolerance, HARD, NONE)).astype(np.int8)
        same = (kind != NONE) & (self.kind[indices] == kind)
        self.streak[indices] = np.where(kind == NONE, 0, np.where(same, self.streak[indices] + 1, 1))
        self.kind[indices] = kind
        step = c.adjust_step
        easy_share, hard_share = float(np.mean(kind == EASY)), float(np.mean(kind == HARD))
        self.p_easy = float(np.clip(self.p_easy + (-step if easy_share > c.target_easy else step), c.min_prob, 1.0))
        self.p_hard = float(np.clip(self.p_hard + (-step if hard_share > c.target_hard else step), c.min_prob, 1.0))

    def state_dict(self) -> dict[str, Any]:
        """RNG, streak lengths and kinds per task, and the two keep bases."""
        return {**super().state_dict(), "streak": self.streak.copy(), "kind": self.kind.copy(),
                "p_easy": self.p_easy, "p_hard": self.p_hard}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        streak = load_array(state, "streak", self.size, np.int64, low=0)
        kind = load_array(state, "kind", self.size, np.int8, low=NONE, high=HARD)
        p_easy, p_hard = float(state["p_easy"]), float(state["p_hard"])
        if not (0.0 <= p_easy <= 1.0 and 0.0 <= p_hard <= 1.0):
            raise StateMismatchError(f"saved keep bases must lie in [0, 1], got {p_easy!r}, {p_hard!r}")
        super().load_state_dict(state)
        self.streak, self.kind, self.p_easy, self.p_hard = streak, kind, p_easy, p_hard
