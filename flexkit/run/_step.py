"""One training step of ``flexkit run`` as a metrics record: read, roll out, the sample stage, advantages and the
update with the feedback alongside it (:func:`train_step`), or rounds of rollouts and refills under
``[sample.refill]``; and the step's selection added to its record (:func:`record_selection`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np

from flexkit._metric_names import (
    FEEDBACK_PASS_RATE_MEAN,
    LEVEL_MIX,
    PREDICTED_PASS_RATE,
    REPLAY_GROUPS,
    REPLAY_RESPONSES,
    STEP,
    TASKSET_MIX,
)
from flexkit.pipeline._pipeline import Pipeline
from flexkit.plugins._contract import TrainerLike
from flexkit.run._counters import RunCounters
from flexkit.run._dynamic_sampling import fill_batch
from flexkit.run._estimates import EstimateSnapshot, level_mix
from flexkit.run._trainer_output import trainer_metrics
from flexkit.sample._actuator import Keep, Mix
from flexkit.sample._refill_count import RefillCount
from flexkit.sample._replay import ReplayBuffer
from flexkit.sample._stage import SampleStage
from flexkit.sample.actuators.group_filter import GroupKeep
from flexkit.scheduler.feedback import SELECTOR_METRIC, snapshot_experiences

__all__ = ["record_selection", "train_step"]


@attrs.define
class _StepOutcome:
    """What one training step generated and trained on, before it becomes a metrics record."""

    tasks: list[Any]
    feedback: list[Mapping[str, Any]]
    rollout_metrics: dict[str, float]
    update: Mapping[str, float]
    #: What the step generated and kept: its rounds, groups, responses and tokens.
    count: RefillCount


def train_step(pipe: Pipeline, trainer: TrainerLike, stage: SampleStage | None, step: int, counters: RunCounters,
               replay: ReplayBuffer | None = None
               ) -> tuple[dict[str, Any], list[Any], list[Mapping[str, Any]], RefillCount]:
    """One step (plain, or with dynamic sampling under ``[sample.refill]``) as a metrics record, the tasks it
    drew, its feedback payloads (one per round) and its count (:class:`RefillCount`, whose metrics the record
    holds); adds the responses and tokens generated to the run's ``counters``. With ``replay`` (``[replay]``)
    the update also trains on the stored groups it hands back, and the step's informative groups are stored."""
    sample = pipe.config.sample
    if sample is not None and sample.refill is not None:
        outcome = _refill_step(pipe, trainer, step, replay)
    else:
        outcome = _plain_step(pipe, trainer, stage, step, replay)
    counters.add(outcome.count.responses, outcome.count.tokens)
    mix: dict[str, int] = {}
    for task in outcome.tasks:
        mix[task.taskset] = mix.get(task.taskset, 0) + 1
    values = [v for fb in outcome.feedback for part in fb.get(SELECTOR_METRIC, {}).values() for v in part["values"]]
    record: dict[str, Any] = {STEP: step, **outcome.rollout_metrics, **outcome.update, TASKSET_MIX: mix,
                              FEEDBACK_PASS_RATE_MEAN: float(np.mean(values)) if values else None,
                              **counters.record_totals()}
    if stage is not None:
        record.update(stage.metrics())
    record.update(outcome.count.metrics())  # the step's counts, not the sample stage's latest round's
    if replay is not None:
        record[REPLAY_GROUPS], record[REPLAY_RESPONSES] = replay.last_groups, replay.last_responses
    return record, outcome.tasks, outcome.feedback, outcome.count


def record_selection(record: dict[str, Any], tasks: list[Any], before: EstimateSnapshot,
                     sched: Any) -> EstimateSnapshot:
    """Add the ``flexkit/level_mix`` of the step's drawn ``tasks`` and the ``flexkit/predicted_pass_rate``
    histograms (theirs and the pool's, from the estimates ``before`` the step) to ``record``; return the snapshot
    for the next step."""
    levels = level_mix(tasks)
    if levels is not None:
        record[LEVEL_MIX] = levels
    histograms = before.record(tasks)
    if histograms is not None:
        record[PREDICTED_PASS_RATE] = histograms
    return EstimateSnapshot.take(sched)


def _plain_step(pipe: Pipeline, trainer: TrainerLike, stage: SampleStage | None, step: int,
                replay: ReplayBuffer | None = None) -> _StepOutcome:
    """Read, roll out, sample stage at its timings, advantages, then the update with the feedback alongside it.

    The feedback (pass rates, selector updates and, with the default prefetch, the next batch's selection) runs
    in a background thread while the trainer updates the policy, on a snapshot of the experiences taken right
    after the rollout (:func:`snapshot_experiences`): it sees the rewards the rollout returned even when the
    trainer's ``compute_advantages`` rewrites a shared reward array in place. Neither reads what the other
    writes (the sample stage never reads selectors, and its mix proportions are set before the feedback), so
    the results are those of running them one after the other, and flexkit's work leaves the step's critical
    path. An error in either is raised after both are done, before the step is recorded or checkpointed."""
    tasks = pipe.scheduler.read()
    rollout = trainer.rollout(tasks, step=step)
    rollout_metrics = trainer_metrics(trainer, rollout.metrics, "rollout")
    experiences = (snapshot_experiences(rollout.experiences) if rollout.experiences is not None
                   else rollout.feedback_experiences())  # the batch's own columns, copied
    batch = rollout.batch
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_reward")
    trainer.compute_advantages(batch, step=step)
    weights = None
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_advantage")
        if not isinstance(stage.last_action, Mix) and stage.last_step == step:
            weights = stage.token_weights(batch, step=step)
    trained = replay.train_batch(batch, step) if replay is not None else batch
    pending = _background().submit(pipe.feedback, experiences)
    try:
        update = trainer.update(trained, weights, step=step)
    finally:
        feedback = pending.result()  # waits even when the update failed, so no feedback outlives the step
    return _StepOutcome(tasks=tasks, feedback=[feedback], rollout_metrics=rollout_metrics,
                        update=trainer_metrics(trainer, update, "update"),
                        count=_plain_count(batch, stage.last_action if stage is not None else None, step))


@functools.cache
def _background() -> ThreadPoolExecutor:
    """The one thread that runs each step's feedback alongside the trainer's update (created on first use)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="flexkit-feedback")


def _refill_step(pipe: Pipeline, trainer: TrainerLike, step: int, replay: ReplayBuffer | None = None
                 ) -> _StepOutcome:
    """Dynamic sampling: rounds of rollouts until the kept groups fill the batch, then one update on them (and
    on the groups ``replay`` hands back; a step that kept nothing makes no update and replays nothing)."""
    filled = fill_batch(pipe, lambda tasks: trainer.rollout(tasks, step=step), step=step)
    batch = filled.batch
    update: Mapping[str, float] = {}
    if batch.batch_size:  # nothing kept after every round: no update this step (and nothing replayed)
        trainer.compute_advantages(batch, step=step)
        trained = replay.train_batch(batch, step) if replay is not None else batch
        update = trainer_metrics(trainer, trainer.update(trained, None, step=step), "update")
    elif replay is not None:
        replay.last_groups = replay.last_responses = 0
    metrics: dict[str, float] = {}
    rounds = [(trainer_metrics(trainer, r.rollout.metrics, "rollout"), r.responses) for r in filled.rounds]
    for key in {k for m, _n in rounds for k in m}:  # response-weighted mean over rounds
        parts = [(float(m[key]), n) for m, n in rounds if m.get(key) is not None]
        if parts:
            metrics[key] = sum(v * n for v, n in parts) / max(1, sum(n for _, n in parts))
    return _StepOutcome(tasks=filled.tasks, feedback=[r.feedback for r in filled.rounds],
                        rollout_metrics=dict(sorted(metrics.items())), update=update, count=filled.count)


def _plain_count(batch: Any, action: Any, step: int) -> RefillCount:
    """A one-round step's count: the groups a group filter kept (its own count), the groups with a kept sample
    under another select action, else every group; the kept responses of a select action."""
    responses, tokens = batch.batch_size, batch.count_tokens()
    if isinstance(action, GroupKeep):
        return RefillCount.start(step).add_round(groups=action.total_groups, passed=action.kept_groups,
                                                 responses=responses, responses_kept=len(action.indices),
                                                 tokens=tokens)
    gid, groups = batch.group_index() if "uid" in batch else (np.arange(batch.batch_size), batch.batch_size)
    if isinstance(action, Keep):
        return RefillCount.start(step).add_round(groups=int(groups), passed=len(np.unique(gid[action.indices])),
                                                 responses=responses, responses_kept=len(action.indices),
                                                 tokens=tokens)
    return RefillCount(step=step).add_round(groups=int(groups), passed=int(groups), responses=responses,
                                            tokens=tokens)
