"""flexkit's per-step metrics for a host trainer's logger (verl's step metrics, TRL's ``log``, Trinity-RFT's monitor).

Every name starts with :data:`PREFIX` (``flexkit/``), so the metrics group together in W&B, TensorBoard or any
tracker a host trainer feeds. The scheme, documented once for every adapter:

============================================  ==========================================================================
name                                          value
============================================  ==========================================================================
``flexkit/step``                              batches the scheduler has handed out
``flexkit/epoch``                             the scheduler's current epoch
``flexkit/mix/<taskset>``                     share of the latest batch drawn from each taskset (pipelines with several)
``flexkit/sample/<name>``                     the sample stage's own metrics: ``kept_fraction``, ``mean_weight``,
                                              ``proportion/<id>``, and the actuator's (``kept_groups``, ...)
``flexkit/feedback/tasks``                    tasks in this step's feedback
``flexkit/feedback/pass_rate_{mean,std,min,max}``  pass rates fed back this step (the selected tasks' outcomes)
``flexkit/feedback/zero_fraction``,           share of fed-back tasks that were never / always solved (no learning
``flexkit/feedback/one_fraction``             signal for group-relative methods)
``flexkit/selector/<taskset>/<key>``          the selector's ``summary()`` (a plugin selector may define one), and
                                              ``predicted_pass_rate_mean`` for selectors that keep estimates
``flexkit/rollouts``                          responses generated this step (given by the adapter)
============================================  ==========================================================================

:func:`pipeline_metrics` computes them from a :class:`~flexkit.Pipeline` (or a bare scheduler); it reads only
what is already there and changes nothing, so calling it is safe at any point between steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np

from flexkit.feedback import SELECTOR_METRIC
from flexkit.run_estimates import predicted_pass_rates

__all__ = ["ESTIMATE_MEAN_LIMIT", "PREFIX", "feedback_metrics", "pipeline_metrics", "selector_metrics"]

#: The prefix of every flexkit metric name.
PREFIX = "flexkit/"

#: Largest taskset whose mean predicted pass rate is computed each step (it costs one pass over the estimates).
ESTIMATE_MEAN_LIMIT = 1_000_000


def pipeline_metrics(source: Any, *, feedback: Mapping[str, Any] | None = None,
                     rollouts: int | None = None) -> dict[str, float]:
    """flexkit's metrics after a step, named ``flexkit/...`` (see the module docstring).

    Args:
        source: a :class:`~flexkit.Pipeline` or a :class:`~flexkit.TasksetScheduler`.
        feedback: this step's feedback payload (what :meth:`Pipeline.feedback` returns, or the dict given to
            ``scheduler.feedback``: ``{SELECTOR_METRIC: {taskset: {"indices", "values"}}}``).
        rollouts: responses generated this step, when the adapter knows it.
    """
    scheduler = getattr(source, "scheduler", source)
    out: dict[str, float] = {f"{PREFIX}step": float(scheduler.step), f"{PREFIX}epoch": float(scheduler.epoch)}
    out.update(_mix_metrics(scheduler))
    stage = getattr(source, "sample_stage", None) if getattr(source, "has_sample_stage", False) else None
    if stage is not None:
        out.update({f"{PREFIX}{k}": float(v) for k, v in stage.metrics().items()})
    if feedback is not None:
        out.update(feedback_metrics(feedback))
    out.update(selector_metrics(scheduler))
    if rollouts is not None:
        out[f"{PREFIX}rollouts"] = float(rollouts)
    return out


def _mix_metrics(scheduler: Any) -> dict[str, float]:
    """The latest batch's share per taskset (only with several tasksets, after the first read)."""
    names = list(scheduler.names)
    if len(names) < 2 or scheduler.step < 1:
        return {}
    counts = np.asarray(scheduler.batch_plan(scheduler.step - 1), dtype=np.float64)
    total = counts.sum()
    return {f"{PREFIX}mix/{name}": float(c / total) for name, c in zip(names, counts, strict=True)} if total else {}


def feedback_metrics(feedback: Mapping[str, Any]) -> dict[str, float]:
    """Statistics of the pass rates in one feedback payload, as ``flexkit/feedback/...``; empty without any (parts
    that are not numbers, and non-finite values, are left out)."""
    parts = feedback.get(SELECTOR_METRIC, {}) if isinstance(feedback, Mapping) else {}
    values = []
    for part in parts.values() if isinstance(parts, Mapping) else ():
        if isinstance(part, Mapping) and "values" in part:
            try:
                values.append(np.asarray(part["values"], dtype=np.float64).reshape(-1))
            except (TypeError, ValueError):  # not numbers: nothing to report (metrics never stop a run)
                continue
    rates = np.concatenate(values) if values else np.empty(0)
    rates = rates[np.isfinite(rates)]
    if not rates.size:
        return {}
    p = f"{PREFIX}feedback/"
    return {f"{p}tasks": float(rates.size), f"{p}pass_rate_mean": float(rates.mean()),
            f"{p}pass_rate_std": float(rates.std()), f"{p}pass_rate_min": float(rates.min()),
            f"{p}pass_rate_max": float(rates.max()), f"{p}zero_fraction": float((rates <= 0).mean()),
            f"{p}one_fraction": float((rates >= 1).mean())}


def selector_metrics(scheduler: Any) -> dict[str, float]:
    """Each taskset's selector summary as ``flexkit/selector/<taskset>/<key>``.

    A selector's ``summary()`` (optional; a mapping of names to numbers) comes first; selectors that keep a
    pass-rate estimate per task (see :func:`~flexkit.run_estimates.predicted_pass_rates`) also give
    ``predicted_pass_rate_mean`` when the taskset has at most :data:`ESTIMATE_MEAN_LIMIT` tasks.
    """
    out: dict[str, float] = {}
    with scheduler.idle() if hasattr(scheduler, "idle") else nullcontext():  # never while a prefetch selects
        for entry in scheduler.entries:
            out.update(_one_selector(entry))
    return out


def _one_selector(entry: Any) -> dict[str, float]:
    prefix = f"{PREFIX}selector/{entry.name}/"
    selector = entry.selector
    out: dict[str, float] = {}
    summary = getattr(selector, "summary", None)
    if callable(summary):
        for key, value in dict(summary()).items():
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                out[f"{prefix}{key}"] = float(value)
    if getattr(selector, "learns_from_feedback", False) and entry.size <= ESTIMATE_MEAN_LIMIT:
        estimates = predicted_pass_rates(selector, entry.size)
        if estimates is not None:
            out[f"{prefix}predicted_pass_rate_mean"] = float(estimates.mean())
    return out
