"""Shared pieces of the feedback-driven selectors: candidate draws, Gumbel top-k, a pooled pass rate and
checked loading of per-task arrays."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from flexkit.errors import StateMismatchError


def candidate_count(batch_size: int, factor: float, size: int) -> int:
    """``min(size, max(batch_size, ceil(factor · batch_size)))``: how many candidates to draw for a batch."""
    return int(min(size, max(batch_size, math.ceil(factor * batch_size))))


def draw_candidates(rng: np.random.Generator, size: int, count: int) -> np.ndarray:
    """``count`` distinct indices in ``0 .. size-1``, uniformly (O(count) for ``count ≪ size``)."""
    return rng.choice(size, size=count, replace=False).astype(np.int64, copy=False)


def uniform_floor(batch_size: int, fraction: float, rng: np.random.Generator) -> int:
    """How many of a batch are kept from the uniform candidates as drawn: ``fraction · batch_size`` on average,
    rounded at random (down, or up with the chance of its fractional part; a whole number draws nothing from
    ``rng``), so a small batch keeps its share in expectation rather than none or all of it.

    Learning selectors draw their candidates uniformly; keeping the first ``floor`` of them as they are gives every
    group of tasks (solved ones too) a share of the draws whatever the estimates say, against forgetting."""
    exact = fraction * batch_size
    whole = round(exact)
    if abs(exact - whole) > 1e-9:  # not a whole number, float error aside
        whole = math.floor(exact) + int(rng.random() < exact - math.floor(exact))
    return min(batch_size, whole)


def top_k(keys: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``keys``, largest first; ties keep their order (stable)."""
    return np.argsort(-keys, kind="stable")[:k]


def gumbel_top_k(log_weights: np.ndarray, k: int, tau: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` positions drawn without replacement with probability ∝ ``exp(log_weights / tau)``
    (Gumbel top-k); ``tau = 0`` is the deterministic top-k (no random numbers are drawn)."""
    if tau == 0:
        return top_k(log_weights, k)
    return top_k(log_weights / tau + rng.gumbel(size=len(log_weights)), k)


class PooledRate:
    """An exponential moving average of the mean feedback value over all tasks (the pool).

    Difficulty-aware selectors shrink thin per-task estimates toward it, so a task that got lucky once does
    not outrank tasks observed many times (the selection-bias trap). ``value`` is ``initial`` until the first
    feedback, which is then taken as is.
    """

    def __init__(self, rate: float, initial: float = 0.5) -> None:
        self.rate = float(rate)
        self.value = float(initial)
        self.seen = False

    def update(self, values: np.ndarray) -> None:
        """Fold the mean of one feedback batch into the pooled rate."""
        mean = float(np.mean(values))
        self.value = mean if not self.seen else (1.0 - self.rate) * self.value + self.rate * mean
        self.seen = True

    def state_dict(self) -> dict[str, Any]:
        """The pooled value and whether any feedback arrived."""
        return {"value": self.value, "seen": self.seen}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        value = float(state["value"])
        if not 0.0 <= value <= 1.0:
            raise StateMismatchError(f"saved pooled rate {value!r} is outside [0, 1]")
        self.value, self.seen = value, bool(state["seen"])


class GroupRates:
    """Exponential moving averages of the mean feedback value per group of tasks (e.g. per level).

    When each task is seen only a few times, a per-task estimate is mostly its prior; the mean pass rate of the
    task's group (a level, a source, a length bucket: :class:`~flexkit.selectors._grouping.TaskGroups`), learned
    online from every feedback batch, is a far better prior than the pool's. A group with no feedback yet has no
    value (``NaN``); callers fall back to the pool. ``group`` maps each task to its group id (``0 .. groups-1``).
    """

    def __init__(self, group: np.ndarray, groups: int, rate: float) -> None:
        self.group = group
        self.rate = float(rate)
        self.values = np.full(groups, np.nan)

    def of(self, indices: np.ndarray | slice, fallback: float) -> np.ndarray:
        """The group rate of each task of ``indices`` (``fallback`` where its group has no feedback yet)."""
        values = self.values[self.group[indices]]
        return np.where(np.isnan(values), fallback, values)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Fold each group's mean of one feedback batch into its rate (the first batch is taken as is)."""
        self.update_groups(self.group[indices], values)

    def update_groups(self, gids: np.ndarray, values: np.ndarray) -> None:
        """:meth:`update` for tasks given by their group ids (groups that change as a model learns)."""
        counts = np.bincount(gids, minlength=len(self.values))
        present = np.flatnonzero(counts)
        means = np.bincount(gids, weights=values, minlength=len(self.values))[present] / counts[present]
        old = self.values[present]
        self.values[present] = np.where(np.isnan(old), means, (1.0 - self.rate) * old + self.rate * means)

    def state_dict(self) -> dict[str, Any]:
        """The group rates (``NaN`` for groups without feedback is stored as -1)."""
        return {"values": np.where(np.isnan(self.values), -1.0, self.values)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked: same number of groups, values in [0, 1] or -1)."""
        values = load_array(state, "values", len(self.values), np.float64, low=-1.0, high=1.0)
        if ((values < 0) & (values != -1.0)).any():
            raise StateMismatchError("saved group rates must lie in [0, 1] (or be -1: no feedback yet)")
        self.values = np.where(values < 0, np.nan, values)


class GroupBeta:
    """A discounted ``Beta(1 + a_g, 1 + b_g)`` posterior per group of tasks over a per-task success chance.

    Each feedback batch adds every task's outcome ``x ∈ [0, 1]`` to its group, ``a_g ← γ·a_g + Σ x`` and
    ``b_g ← γ·b_g + Σ (1 − x)``, after multiplying every group's earlier evidence by the discount ``γ``: the
    posterior of a group that is not drawn widens again, which is what lets Thompson draws
    (:meth:`draw`) re-probe it in a non-stationary bandit (discounted Thompson sampling, arXiv 1707.09727).

    With ``prior = m > 0`` and ``parents``, the groups share evidence with their parent group (hierarchical
    shrinkage, empirical Bayes for a Beta-binomial): a group's posterior is ``Beta(m·μ_P + a_g, m·(1 − μ_P) + b_g)``,
    ``μ_P = (1 + A_P) / (2 + A_P + B_P)`` the posterior mean of its parent ``P`` from the summed counts of
    ``P``'s groups. A group with little evidence of its own is valued as its parent is; one with much evidence
    (``a_g + b_g ≫ m``) by its own.

    Args:
        group: each task's group id (``0 .. count-1``).
        count: number of groups.
        discount: ``γ`` in (0, 1].
        names: the state keys of ``a`` and ``b``.
        parents: each group's parent id (needed with ``prior > 0``).
        prior: ``m``, the weight of the parent's mean in pseudo-observations (0: independent ``Beta(1 + a, 1 + b)``).
    """

    def __init__(self, group: np.ndarray, count: int, discount: float, names: tuple[str, str] = ("a", "b"), *,
                 parents: np.ndarray | None = None, prior: float = 0.0) -> None:
        self.group = group
        self.discount = float(discount)
        self.names = names
        self.parents = parents
        self.prior = float(prior)
        self.a = np.zeros(count)
        self.b = np.zeros(count)

    def update(self, indices: np.ndarray, outcomes: np.ndarray) -> None:
        """Discount every group's evidence once, then add the outcomes of ``indices`` to their groups."""
        self.update_groups(self.group[indices], outcomes)

    def update_groups(self, gids: np.ndarray, outcomes: np.ndarray) -> None:
        """:meth:`update` for tasks given by their group ids (groups that change as a model learns)."""
        count = len(self.a)
        hits = np.bincount(gids, weights=outcomes, minlength=count)
        seen = np.bincount(gids, minlength=count).astype(np.float64)
        self.a = self.discount * self.a + hits
        self.b = self.discount * self.b + (seen - hits)

    def recentred(self, rates: np.ndarray) -> GroupBeta:
        """The same evidence at other means: a posterior whose counts are ``r_g·n_g`` and ``(1 − r_g)·n_g``,
        ``n_g = a_g + b_g`` this one's discounted count of group ``g`` and ``r_g`` its entry of ``rates`` (``NaN``:
        no count, the prior alone). A draw from it varies around ``r_g`` as widely as this posterior's evidence
        allows, and widens as that evidence fades (same discount, parents and prior)."""
        unseen = np.isnan(rates)
        centre, seen = np.where(unseen, 0.5, rates), np.where(unseen, 0.0, self.a + self.b)
        view = GroupBeta(self.group, len(self.a), self.discount, self.names, parents=self.parents, prior=self.prior)
        view.a, view.b = centre * seen, (1.0 - centre) * seen
        return view

    def shapes(self) -> tuple[np.ndarray, np.ndarray]:
        """Each group's posterior ``Beta(α, β)`` parameters (see the class docstring)."""
        if not self.prior or self.parents is None:
            return 1.0 + self.a, 1.0 + self.b
        big_a = np.bincount(self.parents, weights=self.a)  # one entry per parent id up to the largest
        big_b = np.bincount(self.parents, weights=self.b)
        parent_mean = ((1.0 + big_a) / (2.0 + big_a + big_b))[self.parents]
        tiny = np.finfo(np.float64).tiny  # a tiny prior times a tiny mean underflows to 0, which Beta refuses
        return (np.maximum(self.prior * parent_mean + self.a, tiny),
                np.maximum(self.prior * (1.0 - parent_mean) + self.b, tiny))

    def mean(self) -> np.ndarray:
        """Posterior mean of each group."""
        alpha, beta = self.shapes()
        mean: np.ndarray = alpha / (alpha + beta)
        return mean

    def draw(self, rng: np.random.Generator, gids: np.ndarray) -> np.ndarray:
        """One independent Thompson draw per entry of ``gids`` from its group's posterior."""
        alpha, beta = self.shapes()
        draws: np.ndarray = rng.beta(alpha[gids], beta[gids])
        return draws

    def state_dict(self) -> dict[str, Any]:
        """Both discounted counts of every group."""
        return {self.names[0]: self.a.copy(), self.names[1]: self.b.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked: one count per group, finite and >= 0)."""
        a = load_array(state, self.names[0], len(self.a), np.float64, low=0.0)
        b = load_array(state, self.names[1], len(self.b), np.float64, low=0.0)
        self.a, self.b = a, b


def load_array(state: Mapping[str, Any], key: str, size: int, dtype: Any, *, low: float | None = None,
               high: float | None = None) -> np.ndarray:
    """``state[key]`` as a fresh array of ``dtype`` and shape ``(size,)``;
    :class:`~flexkit.errors.StateMismatchError` on a missing key, values that are not of ``dtype``'s kind (text,
    tables; numbers for ``bool``), a wrong shape, NaN or a value outside ``[low, high]``."""
    if key not in state:
        raise StateMismatchError(f"saved state has no {key!r}")
    try:
        raw = np.asarray(state[key])
        arr = np.array(raw, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateMismatchError(f"saved {key!r} is not an array of {np.dtype(dtype).name} ({exc})") from None
    if dtype is bool and raw.size and raw.dtype.kind != "b":
        raise StateMismatchError(f"saved {key!r} holds {raw.dtype} values, expected true/false")
    if arr.shape != (size,):
        raise StateMismatchError(f"saved {key!r} has shape {arr.shape}, expected ({size},)")
    if arr.size and np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        raise StateMismatchError(f"saved {key!r} holds NaN or infinite values")
    if arr.size and low is not None and arr.min() < low:
        raise StateMismatchError(f"saved {key!r} holds {arr.min()!r}, below {low}")
    if arr.size and high is not None and arr.max() > high:
        raise StateMismatchError(f"saved {key!r} holds {arr.max()!r}, above {high}")
    return arr
