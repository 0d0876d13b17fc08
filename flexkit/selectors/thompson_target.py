"""``thompson_target``: Beta-Bernoulli Thompson sampling toward a target success rate, with discounted counts.

After MoPPS, "Model Predictive Prompt Selection" (arXiv 2507.04632): each task ``i`` has a posterior
``Beta(α_i, β_i)`` over its success rate, starting at the prior ``Beta(α0, β0)``. Each batch:

- ``K = ceil(candidates · B)`` candidates are drawn uniformly;
- for each a success rate is sampled, ``θ_i ~ Beta(α_i, β_i)`` (Thompson sampling);
- the ``B`` candidates with ``θ`` nearest the target rate ``γ*`` are served.

A feedback value ``v`` (mean reward of ``m`` rollouts) counts as ``v·m`` successes and ``(1 − v)·m``
failures, and the observed task's posterior is discounted toward the prior before it is added::

    α_i ← λ·α_i + (1 − λ)·α0 + v·m,      β_i ← λ·β_i + (1 − λ)·β0 + (1 − v)·m

so old evidence fades as the model changes (``λ = 1``: no forgetting). The prior and the Thompson draw guard
against the selection-bias trap: a task seen once still has a wide posterior, and ``α0, β0`` keep its draw
from sticking to a single lucky observation. Only observed tasks are touched: O(K) per selection, O(feedback)
per update. State: α, β (two floats per task) and the RNG.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector
from flexkit.selectors._estimates import candidate_count, draw_candidates, top_k
from flexkit.selectors._task_table import TaskTable


@attrs.frozen(kw_only=True)
class ThompsonTargetConfig:
    """Parameters of the ``thompson_target`` selector."""

    candidates: float = field(
        default=4.0, ge=1, le=1e6, doc="Candidates drawn uniformly per batch, as a multiple of the batch size."
    )
    target: float = field(default=0.5, ge=0, le=1, doc="γ*: the success rate to aim at.")
    discount: float = field(
        default=0.5, ge=0, le=1, doc="λ: weight kept by a task's posterior at each of its updates (1: no forgetting)."
    )
    alpha0: float = field(default=1.0, gt=0, le=1e6, doc="Prior pseudo-successes α0.")
    beta0: float = field(default=1.0, gt=0, le=1e6, doc="Prior pseudo-failures β0.")
    m: int = field(default=8, ge=1, le=1_000_000, doc="Rollouts behind one feedback value (its weight in counts).")


class ThompsonTargetSelector(Selector):
    """Thompson draws per candidate, the ``B`` nearest the target are served (module docstring)."""

    Config = ThompsonTargetConfig
    learns_from_feedback = True
    atomic_feedback = True  # _update changes nothing until its (validated) input is used whole

    def _init_state(self) -> None:
        self.table = TaskTable(self.size, (float(self.config.alpha0), float(self.config.beta0)), ("alpha", "beta"))

    @property
    def alpha(self) -> np.ndarray:
        """Every task's α (a dense array: 8 bytes per task)."""
        return self.table.dense()[0]

    @property
    def beta(self) -> np.ndarray:
        """Every task's β (a dense array: 8 bytes per task)."""
        return self.table.dense()[1]

    def predicted_pass_rates(self) -> np.ndarray:
        """Every task's posterior mean (:meth:`posterior_mean`)."""
        return self.posterior_mean()

    def posterior_mean(self) -> np.ndarray:
        """``α / (α + β)`` per task."""
        alpha, beta = self.table.dense()
        mean: np.ndarray = alpha / (alpha + beta)
        return mean

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        cand = draw_candidates(self.rng, self.size, candidate_count(batch_size, self.config.candidates, self.size))
        alpha, beta = self.table.get(cand)
        theta = self.rng.beta(alpha, beta)
        pick = top_k(-np.abs(theta - self.config.target), batch_size)
        info = {"candidates": len(cand), "sampled_rate": theta[pick]} if return_extra_info else {}
        return cand[pick], info

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        c = self.config
        lam, m = c.discount, float(c.m)
        alpha, beta = self.table.get(indices)
        self.table.set(indices, lam * alpha + (1.0 - lam) * c.alpha0 + values * m,
                       lam * beta + (1.0 - lam) * c.beta0 + (1.0 - values) * m)

    def state_dict(self) -> dict[str, Any]:
        """RNG and the per-task posterior parameters (of the tasks with feedback only, above
        :data:`~flexkit.selectors._task_table.DENSE_MAX` tasks)."""
        return {**super().state_dict(), **self.table.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: nothing changes when it is invalid)."""
        table = TaskTable.from_state(self.size, self.table.defaults, ("alpha", "beta"), state, _check_positive)
        super().load_state_dict(state)
        self.table = table


def _check_positive(alpha: np.ndarray, beta: np.ndarray) -> None:
    """Saved Beta parameters are > 0."""
    if alpha.size and (alpha.min() <= 0 or beta.min() <= 0):
        raise StateMismatchError("saved Beta parameters must be > 0")
