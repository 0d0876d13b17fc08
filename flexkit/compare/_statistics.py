"""``flexkit compare`` statistics: 95% Student-t intervals over seeds, accuracy curves, steps to a target, and
the default target accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from flexkit.compare._results import RunOutcome, SettingResult

__all__ = ["FORGETTING_MARGIN", "FORGETTING_MEASURES", "MIN_INTERVAL_VALUES", "TARGET_FRACTION", "accuracy_at",
           "below_best", "default_budget", "default_target", "final_drop", "first_reaching", "interpolated_curve",
           "largest_drop", "mean_curve", "mean_interval", "reported_interval", "steps_to", "t_quantile"]

#: The fewest values (seeds) a reported 95% interval needs: with two, the Student-t half-width is
#: 12.7 × the standard error, a band so wide that it says nothing, so reports show the values instead.
MIN_INTERVAL_VALUES = 3

#: Fraction of the way from the initial to the best final accuracy that the default target sits at.
TARGET_FRACTION = 0.9
#: Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30, then selected larger df.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_T975_LARGE = ((120, 1.9799), (60, 2.0003), (40, 2.0211), (30, 2.0423))


def t_quantile(df: int) -> float:
    """The two-sided 95% Student-t quantile t_{0.975, df} (tabulated; conservative between table rows)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    if df > 1000:
        return 1.96
    return next(t for d, t in _T975_LARGE if df >= d)


def mean_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and half-width of the 95% Student-t interval (``None`` for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t_quantile(n - 1) * math.sqrt(var / n)


def reported_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """:func:`mean_interval`, but without a half-width for fewer than :data:`MIN_INTERVAL_VALUES` values (what
    the reports print, write and shade)."""
    mean, half = mean_interval(values)
    return mean, half if len(values) >= MIN_INTERVAL_VALUES else None


def steps_to(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first x (step, or rollouts) of ``curve`` whose accuracy reaches ``target`` (``None``: never)."""
    return next((step for step, acc in curve if acc >= target), None)


def first_reaching(curve: Sequence[tuple[int, float]], target: float) -> int | None:
    """The index in ``curve`` of the first evaluation whose accuracy reaches ``target`` (``None``: never); the
    point :func:`steps_to` reports."""
    return next((i for i, (_x, acc) in enumerate(curve) if acc >= target), None)


def accuracy_at(curve: list[tuple[int, float]], budget: int) -> float | None:
    """Accuracy of the last evaluation at or before ``budget`` rollouts; ``None`` when the run stopped before
    spending the budget (its accuracy there is unknown)."""
    if not curve or curve[-1][0] < budget:
        return None
    return next(acc for x, acc in reversed(curve) if x <= budget)


def largest_drop(curve: Sequence[tuple[int, float]]) -> float:
    """How far an accuracy curve ever fell below its best earlier value: ``max_t (max_{s ≤ t} a_s − a_t)``
    (0 for a curve that never falls). Per level, this is the forgetting a recipe shows."""
    best, drop = -math.inf, 0.0
    for _, value in curve:
        best = max(best, value)
        drop = max(drop, best - value)
    return drop


def final_drop(curve: Sequence[tuple[int, float]]) -> float:
    """How far an accuracy curve ends below its best value: ``max_t a_t − a_last`` (0 for an empty curve).
    Unlike :func:`largest_drop`, a dip that recovers does not count: this is the forgetting that lasts."""
    values = [value for _, value in curve]
    return max(values) - values[-1] if values else 0.0


#: How far below its best earlier value a level may fall before an evaluation counts in :func:`below_best`.
FORGETTING_MARGIN = 0.05


def below_best(curve: Sequence[tuple[int, float]], margin: float = FORGETTING_MARGIN) -> float:
    """The share of a curve's evaluations at which it is more than ``margin`` below its best value so far
    (0 for an empty curve). Between :func:`largest_drop` (one bad evaluation is enough) and :func:`final_drop`
    (only the end counts): a single dip that recovers at the next evaluation adds ``1 / len(curve)``, a level
    that slides and stays down adds every evaluation it stays there."""
    best, below = -math.inf, 0
    for _, value in curve:
        best = max(best, value)
        below += best - value > margin + 1e-9  # 1.0 − 0.95 is 0.05000000000000004 in floating point
    return below / len(curve) if curve else 0.0


#: Per-level forgetting measures ``compare`` reports, as ``(results.json key, function, report label)``.
FORGETTING_MEASURES: tuple[tuple[str, Callable[[Sequence[tuple[int, float]]], float], str], ...] = (
    ("largest_drop", largest_drop, "largest, at any evaluation"),
    ("final_drop", final_drop, "at the end, below the best"),
    ("below_best", below_best, f"share of evaluations more than {FORGETTING_MARGIN} below the best"),
)


def default_budget(results: Sequence[SettingResult]) -> tuple[int, str]:
    """The default rollout budget: the fewest rollouts any run generated (every run has a value there; 0 when
    no run finished)."""
    budget = min((r.rollouts for res in results for r in res.runs), default=0)
    return budget, f"{budget:,} rollouts = the fewest any run generated"


def interpolated_curve(runs: Sequence[RunOutcome], points: int = 60, *,
                       curve: Callable[[RunOutcome], list[tuple[int, float]]] | None = None,
                       ) -> tuple[list[float], list[float], list[float | None]]:
    """Mean accuracy (and 95% half-width) against rollouts on a common grid up to the shortest run's rollouts,
    each run's curve linearly interpolated between its evaluations (runs evaluate at different rollouts).
    ``curve`` picks another curve of each run (default: its overall ``rollout_curve``)."""
    pick = curve or (lambda r: r.rollout_curve)
    usable = [pick(r) for r in runs if len(pick(r)) >= 2]
    if not usable:
        return [], [], []
    end = min(c[-1][0] for c in usable)
    start = max(c[0][0] for c in usable)
    if end <= start:
        return [], [], []
    grid = [start + (end - start) * i / (points - 1) for i in range(points)]
    means, halves = [], []
    for x in grid:
        values = [_interp(c, x) for c in usable]
        mean, half = mean_interval(values)
        means.append(mean)
        halves.append(half)
    return grid, means, halves


def _interp(curve: list[tuple[int, float]], x: float) -> float:
    """``curve``'s accuracy at ``x`` rollouts, linear between evaluations (its end values beyond them)."""
    import numpy as np

    xs, ys = zip(*curve, strict=True)
    return float(np.interp(x, xs, ys))


def mean_curve(runs: Sequence[RunOutcome]) -> tuple[list[int], list[float], list[float | None]]:
    """Steps evaluated in every run, with the mean accuracy and 95% half-width at each."""
    common = set.intersection(*(set(s for s, _ in r.curve) for r in runs)) if runs else set()
    steps = sorted(common)
    means, halves = [], []
    for step in steps:
        mean, half = mean_interval([dict(r.curve)[step] for r in runs])
        means.append(mean)
        halves.append(half)
    return steps, means, halves


def default_target(results: Sequence[SettingResult]) -> tuple[float, str]:
    """The default target accuracy and the rule that made it.

    ``initial + TARGET_FRACTION·(best − initial)``: ``initial`` is the mean step-0 evaluation over all runs (0
    when there is none) and ``best`` the highest per-setting mean final accuracy.
    """
    initial = [r.curve[0][1] for res in results for r in res.runs if r.curve and r.curve[0][0] == 0]
    finished = [res for res in results if res.runs]
    if not finished:
        return 0.0, "none: no run finished"
    best_name, best = max(((res.setting.name, mean_interval([r.final["eval_accuracy"] for r in res.runs])[0])
                           for res in finished), key=lambda x: x[1])
    start = math.fsum(initial) / len(initial) if initial else 0.0
    target = start + TARGET_FRACTION * (best - start)
    rule = (f"{target:.3f} = initial {start:.3f} + {TARGET_FRACTION:.0%} of the way to the best final mean "
            f"{best:.3f} ({best_name})")
    return target, rule
