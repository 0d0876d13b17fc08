"""``target_difficulty``: serve the tasks whose difficulty is nearest a target that follows the mean reward.

After AdaRFT, "Efficient Reinforcement Finetuning via Adaptive Curriculum Learning" (arXiv 2504.05520): every
task has a static difficulty (a feature column, e.g. a reference model's pass rate) and the curriculum keeps
one scalar, the target difficulty ``T``. After each feedback batch with mean reward ``R̄``::

    T ← clip(T + η · tanh(α · (R̄ − β)), d_min, d_max)

(``β``: the reward the curriculum aims for; above it the target moves harder, below it easier), and each
batch serves the ``B`` tasks with difficulty nearest ``T``. ``harder = "lower"`` reads a column where lower
values are harder (a pass rate), so the target then moves downward as the reward rises. ``pool > 1`` serves
``B`` tasks drawn uniformly from the ``ceil(pool · B)`` nearest instead (a little variety; ``pool = 1`` is
the paper's rule). The column is sorted once when the selector is built; a batch is then a binary search and
a window of ``2·ceil(pool·B)`` sorted values: O(log N + B). State: ``T`` and the RNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError, StateMismatchError, TasksetError
from flexkit.selectors._base import Selector, read_feature_columns
from flexkit.selectors._estimates import candidate_count


@attrs.frozen(kw_only=True)
class TargetDifficultyConfig:
    """Parameters of the ``target_difficulty`` selector."""

    feature_keys: tuple[str, ...] = field(
        min_items=1, doc="One feature column: each task's static difficulty (a list of one name, as other selectors)."
    )
    harder: str = field(
        default="higher", choices=("higher", "lower"),
        doc='"higher": larger values are harder (a difficulty score); "lower": smaller ones are (a pass rate).',
    )
    initial_target: float | None = field(
        default=None, doc="Starting target difficulty, in the column's units (unset: the easiest task's value)."
    )
    eta: float = field(default=0.05, ge=0, doc="η: largest move of the target per feedback batch (column units).")
    alpha: float = field(default=2.0, ge=0, doc="α: sensitivity of the move to the reward gap (inside the tanh).")
    target_reward: float = field(default=0.5, ge=0, le=1, doc="β: the mean reward the curriculum aims for.")
    pool: float = field(
        default=1.0, ge=1, le=1e6, doc="Serve B tasks drawn uniformly from the ceil(pool·B) nearest the target."
    )

    def __attrs_post_init__(self) -> None:
        if len(self.feature_keys) != 1:
            raise ConfigError(f"feature_keys must name exactly one difficulty column, got {list(self.feature_keys)}")


class TargetDifficultySelector(Selector):
    """Nearest-to-target tasks on a static difficulty column, the target driven by the reward (module docstring)."""

    Config = TargetDifficultyConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    def _init_state(self) -> None:
        config = self.config
        keys = list(config.feature_keys)
        (column,) = read_feature_columns(self.features, keys, self.size, owner="target_difficulty")
        column = column.astype(np.float64)
        if not np.isfinite(column).all():
            raise TasksetError(f"target_difficulty: feature column {keys[0]!r} must be finite")
        self._order = np.argsort(column, kind="stable").astype(np.int64)
        self._sorted = column[self._order]
        self.low, self.high = float(self._sorted[0]), float(self._sorted[-1])
        self._direction = 1.0 if config.harder == "higher" else -1.0
        easiest = self.low if config.harder == "higher" else self.high
        start = easiest if config.initial_target is None else float(config.initial_target)
        self.target = float(np.clip(start, self.low, self.high))

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        k = candidate_count(batch_size, self.config.pool, self.size)
        pos = int(np.searchsorted(self._sorted, self.target))
        lo, hi = max(0, pos - k), min(self.size, pos + k)
        near = lo + np.argsort(np.abs(self._sorted[lo:hi] - self.target), kind="stable")[:k]
        if k > batch_size:
            near = near[self.rng.choice(k, size=batch_size, replace=False)]
        info = {"target": self.target, "difficulty": self._sorted[near]} if return_extra_info else {}
        return self._order[near], info

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        c = self.config
        move = self._direction * c.eta * np.tanh(c.alpha * (float(np.mean(values)) - c.target_reward))
        self.target = float(np.clip(self.target + move, self.low, self.high))

    def state_dict(self) -> dict[str, Any]:
        """RNG and the target difficulty."""
        return {**super().state_dict(), "target": self.target}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (a target outside the column's range is refused)."""
        target = float(state["target"])
        if not self.low <= target <= self.high:
            raise StateMismatchError(f"saved target {target!r} is outside the difficulty range [{self.low}, "
                                     f"{self.high}]")
        super().load_state_dict(state)
        self.target = target
