"""flexkit's per-step metrics for a host trainer's logger (verl's step metrics, TRL's ``log``, Trinity-RFT's monitor).

Every name starts with :data:`PREFIX` (``flexkit/``), so the metrics group together in W&B, TensorBoard or any
tracker a host trainer feeds. The names are those of ``flexkit run``'s records, defined once in
:mod:`flexkit._metric_names` and listed in docs/metrics.md: the scheduler's step, epoch and mix, the sample stage's
metrics (``flexkit/sample/...``, with the step's refill count when the caller gives one), the fed-back pass
rates (``flexkit/feedback/...``) and the fed-back tasks' mix over each taskset's grouping column
(``flexkit/group_mix/<taskset>/<group>``), the selectors' summaries (``flexkit/selector/<taskset>/<key>``), the
responses generated this step (``flexkit/rollouts``) and so far (``flexkit/run/rollouts``), and what ``[replay]``
replayed (``flexkit/replay/...``).

:func:`pipeline_metrics` computes them from a :class:`~flexkit.Pipeline` (or a bare scheduler); it reads only
what is already there and changes nothing, so calling it is safe at any point between steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np

from flexkit._metric_names import (
    EPOCH,
    FEEDBACK_ONE_FRACTION,
    FEEDBACK_PASS_RATE_MAX,
    FEEDBACK_PASS_RATE_MEAN,
    FEEDBACK_PASS_RATE_MIN,
    FEEDBACK_PASS_RATE_STD,
    FEEDBACK_TASKS,
    FEEDBACK_ZERO_FRACTION,
    PREFIX,
    REPLAY_GROUPS,
    REPLAY_RESPONSES,
    ROLLOUTS,
    RUN_ROLLOUTS,
    SCHEDULER_STEP,
    group_mix_share,
    mix_share,
    selector_metric,
)
from flexkit.pipeline._pipeline import Pipeline
from flexkit.run._estimates import predicted_pass_rates, summary_metrics
from flexkit.sample._refill_count import RefillCount
from flexkit.sample._replay import ReplayBuffer
from flexkit.scheduler._scheduler import TasksetScheduler
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.selectors import _members as members

__all__ = ["ESTIMATE_MEAN_LIMIT", "PREFIX", "feedback_metrics", "group_mix_metrics", "pipeline_metrics",
           "selector_metrics"]

#: Largest taskset whose mean predicted pass rate is computed each step (it costs one pass over the estimates).
ESTIMATE_MEAN_LIMIT = 1_000_000


def pipeline_metrics(source: Pipeline | TasksetScheduler, *, feedback: Mapping[str, Any] | None = None,
                     rollouts: int | None = None, refill: RefillCount | None = None,
                     replay: ReplayBuffer | None = None, run_rollouts: int | None = None) -> dict[str, float]:
    """flexkit's metrics after a step, named ``flexkit/...`` (see the module docstring).

    Args:
        source: a :class:`~flexkit.Pipeline` or a :class:`~flexkit.TasksetScheduler`.
        feedback: this step's feedback payload (what :meth:`Pipeline.feedback` returns, or the dict given to
            ``scheduler.feedback``: ``{SELECTOR_METRIC: {taskset: {"indices", "values"}}}``); with a
            :class:`~flexkit.Pipeline`, also the fed-back tasks' mix over each taskset's grouping column
            (:func:`group_mix_metrics`).
        rollouts: responses generated this step, when the adapter knows it.
        refill: the step's count when it ran :func:`~flexkit.fill_batch` (``filled.count``): its kept groups
            (after the surplus rule), rounds and kept fraction replace the sample stage's latest round's, as in
            ``flexkit run``'s records, and its responses are ``flexkit/rollouts`` unless ``rollouts`` is given.
        replay: the host's ``[replay]`` buffer: the groups and responses its latest step replayed
            (``flexkit/replay/groups``, ``flexkit/replay/responses``).
        run_rollouts: the responses generated so far in the run, when the adapter counts them
            (``flexkit/run/rollouts``, the total ``flexkit run`` records).
    """
    scheduler = source.scheduler if isinstance(source, Pipeline) else source
    out: dict[str, float] = {SCHEDULER_STEP: float(scheduler.step), EPOCH: float(scheduler.epoch)}
    out.update(_mix_metrics(scheduler))
    if isinstance(source, Pipeline) and source.has_sample_stage:
        out.update({k: float(v) for k, v in source.sample_stage.metrics().items()})
    if refill is not None:
        out.update({k: float(v) for k, v in refill.metrics().items()})
        rollouts = refill.responses if rollouts is None else rollouts
    if feedback is not None:
        out.update(feedback_metrics(feedback))
        if isinstance(source, Pipeline):
            out.update(group_mix_metrics(source, feedback))
    out.update(selector_metrics(scheduler))
    if rollouts is not None:
        out[ROLLOUTS] = float(rollouts)
    if run_rollouts is not None:
        out[RUN_ROLLOUTS] = float(run_rollouts)
    if replay is not None:
        out[REPLAY_GROUPS], out[REPLAY_RESPONSES] = float(replay.last_groups), float(replay.last_responses)
    return out


def _mix_metrics(scheduler: Any) -> dict[str, float]:
    """The latest batch's share per taskset (only with several tasksets, after the first read)."""
    names = list(scheduler.names)
    if len(names) < 2 or scheduler.step < 1:
        return {}
    counts = np.asarray(scheduler.batch_plan(scheduler.step - 1), dtype=np.float64)
    total = counts.sum()
    return {mix_share(name): float(c / total) for name, c in zip(names, counts, strict=True)} if total else {}


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
    return {FEEDBACK_TASKS: float(rates.size), FEEDBACK_PASS_RATE_MEAN: float(rates.mean()),
            FEEDBACK_PASS_RATE_STD: float(rates.std()), FEEDBACK_PASS_RATE_MIN: float(rates.min()),
            FEEDBACK_PASS_RATE_MAX: float(rates.max()), FEEDBACK_ZERO_FRACTION: float((rates <= 0).mean()),
            FEEDBACK_ONE_FRACTION: float((rates >= 1).mean())}


def group_mix_metrics(pipe: Pipeline, feedback: Mapping[str, Any]) -> dict[str, float]:
    """The share of each taskset's fed-back tasks in each group of its grouping column
    (:meth:`~flexkit.Pipeline.task_groupings`), as ``flexkit/group_mix/<taskset>/<group>``; tasksets without a
    grouping, and parts that are not indices of a known taskset, are left out."""
    parts = feedback.get(SELECTOR_METRIC, {}) if isinstance(feedback, Mapping) else {}
    if not isinstance(parts, Mapping) or not parts:
        return {}
    groupings, entries = pipe.task_groupings(), pipe.scheduler.entries
    by_name = {entry.name: entry for entry in entries}
    out: dict[str, float] = {}
    for key, part in parts.items():
        entry = (entries[int(key)] if isinstance(key, (int, np.integer)) and 0 <= int(key) < len(entries)
                 else by_name.get(key) if isinstance(key, str) else None)
        if entry is None or entry.name not in groupings or not isinstance(part, Mapping):
            continue
        try:
            indices = np.asarray(part.get("indices", ()), dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):  # not indices: nothing to report (metrics never stop a run)
            continue
        if not indices.size or indices.min() < 0 or indices.max() >= entry.size:
            continue
        counts = groupings[entry.name].counts_of(entry.taskset, indices)
        out.update({group_mix_share(entry.name, name): count / indices.size for name, count in counts.items()})
    return out


def selector_metrics(scheduler: Any) -> dict[str, float]:
    """Each taskset's selector summary as ``flexkit/selector/<taskset>/<key>``.

    ``scheduler``: a :class:`~flexkit.TasksetScheduler` (read while it is idle: never during a prefetch), or any
    object whose ``entries`` have a ``name``, ``selector`` and ``size`` (an adapter's own selectors, read as they
    are).

    A selector's ``summary()`` (optional; a mapping of names to numbers) comes first; selectors that keep a
    pass-rate estimate per task (see :func:`~flexkit.run._estimates.predicted_pass_rates`) also give
    ``predicted_pass_rate_mean`` when the taskset has at most :data:`ESTIMATE_MEAN_LIMIT` tasks.
    """
    out: dict[str, float] = {}
    with scheduler.idle() if isinstance(scheduler, TasksetScheduler) else nullcontext():
        for entry in scheduler.entries:
            out.update(_one_selector(entry))
    return out


def _one_selector(entry: Any) -> dict[str, float]:
    selector = entry.selector
    out = summary_metrics(entry.name, selector)
    if members.flag(selector, "learns_from_feedback") and entry.size <= ESTIMATE_MEAN_LIMIT:
        estimates = predicted_pass_rates(selector, entry.size)
        if estimates is not None:
            out[selector_metric(entry.name, "predicted_pass_rate_mean")] = float(estimates.mean())
    return out
