"""``flexkit run``: drive a pipeline and its ``[trainer]`` backend end to end, with metrics and checkpoints.

A run folder holds ``pipeline.toml`` (a copy of the file), ``resolved.json`` (the validated config with every
default filled in), ``metrics.jsonl`` (one object per step, flushed every step, named as in
:mod:`flexkit._metric_names`; evaluation records carry the test split's ``flexkit/eval/accuracy`` and, for a trainer
with a validation split, ``flexkit/val/accuracy``; with ``[run] eval_every`` the first record, ``"step": -1``,
holds the evaluation before any training: :data:`INITIAL_STEP`) and
``checkpoint/`` (the latest checkpoint, written atomically every ``[run] checkpoint_every`` steps and at the
end). ``--resume`` continues from the checkpoint and truncates the metrics
to it, so a resumed run ends with exactly the metrics of an uninterrupted one (but for its wall clock,
``flexkit/run/seconds``). A run holds its folder's lock
(:mod:`flexkit.run._lock`) from before its trainer is set up to its end: a second run on the folder is refused.

At each evaluation the trainer's :meth:`~flexkit.Trainer.evaluate` (the test split) is recorded
and read by the summary, ``flexkit compare`` and the plots; only its
:meth:`~flexkit.Trainer.validate` (the validation split, for a trainer with
``supports_validation``) reaches the selectors (:meth:`~flexkit.Pipeline.evaluation`): what steers a run is never
what judges it (:func:`evaluate_splits`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import numpy as np
import structlog

from flexkit._log import say
from flexkit._metric_names import (
    RUN_ROLLOUTS,
    RUN_SECONDS,
    STEP,
    record_evaluation,
    record_validation,
    selector_metric,
)
from flexkit.errors import CheckpointError, ConfigError, ConfigIssue, FlexkitError, TasksetError
from flexkit.pipeline._checkpoint import load_state
from flexkit.pipeline._pipeline import Pipeline
from flexkit.pipeline._state import EXTRA_KEY, TRAINER_KEY
from flexkit.pipeline._support import HostSupport, check_support
from flexkit.plugins._contract import Trainer, ValidationRows, set_progress
from flexkit.run._counters import RUNNER_KEY, RunCounters
from flexkit.run._estimates import EstimateSnapshot, selector_summaries
from flexkit.run._folder import (
    CHECKPOINT_DIR,
    INITIAL_STEP,
    METRICS_FILE,
    Resumed,
    resume_run_folder,
    start_run_folder,
    update_resolved_config,
)
from flexkit.run._lock import hold_folder
from flexkit.run._progress import ProgressDisplay
from flexkit.run._result import ROLLOUT_BUDGET, STEP_LIMIT, RunResult, stop_reason, summary_lines
from flexkit.run._step import record_selection, train_step
from flexkit.run._trainer_output import trainer_metrics
from flexkit.sample._replay import REPLAY_KEY, ReplayBuffer
from flexkit.sample._stage_checks import check_stage_timing
from flexkit.tasksets import Taskset

__all__ = ["CHECKPOINT_DIR", "INITIAL_STEP", "METRICS_FILE", "ROLLOUT_BUDGET", "RUN_TIMINGS", "STEP_LIMIT",
           "RunInterrupted", "RunResult", "check_run_support", "check_taskset_rows", "default_run_dir",
           "evaluate_splits", "has_validation", "new_trainer", "run_pipeline", "stop_reason", "summary_lines",
           "trainer_seed"]

log = structlog.get_logger("flexkit.runner")

#: The progress display's name before it moved to :mod:`flexkit.run._progress` (tests import it from here).
_Progress = ProgressDisplay

#: The timings at which the step loop runs the sample stage. ``pre_rollout`` has no rollout batch to score yet
#: and ``in_loss`` needs the trainer's loss code, so a scorer declaring either is refused at the start of a run.
RUN_TIMINGS = ("post_reward", "post_advantage")


def _committed_step(run_dir: Path, saved: dict[str, int]) -> int | None:
    """The step of the last committed checkpoint when a run is interrupted: ``saved["step"]``, or, when the
    interruption came while a checkpoint was being written (it may have committed already), the step of the one
    on disk."""
    if "pending" not in saved:
        return saved.get("step")
    try:
        state, _meta = load_state(run_dir / CHECKPOINT_DIR)
        return RunCounters.step_of(state[EXTRA_KEY][RUNNER_KEY])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return saved.get("step")


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_pipeline`: a :class:`KeyboardInterrupt` that knows the run folder and the step
    of its last committed checkpoint (``None``: none written yet), so the caller can say how to resume."""

    def __init__(self, run_dir: Path, checkpoint_step: int | None) -> None:
        super().__init__(f"interrupted; last checkpoint: {checkpoint_step}")
        self.run_dir, self.checkpoint_step = run_dir, checkpoint_step


def trainer_seed(seed: int) -> np.random.SeedSequence:
    """The trainer's random stream, derived from the pipeline seed (spawn key 3)."""
    return np.random.SeedSequence(seed, spawn_key=(3,))


def default_run_dir(root: str | os.PathLike[str] = "runs", name: str = "run") -> Path:
    """A fresh dated folder under ``root`` (``runs/2026-11-29T20-15-03-quickstart``)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%S")
    base = Path(root) / f"{stamp}-{name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}")
    return path


def check_taskset_rows(pipe: Pipeline) -> None:
    """Parse every row of flexkit's own tasksets before training (a JSON Lines file: 1–2 s per million rows), so
    a bad row fails the run at its start, named with its line, not at the step that first draws it. Third-party
    storages, which may be remote or huge, are not read here (``flexkit validate`` reads them)."""
    issues = []
    for i, entry in enumerate(pipe.scheduler.entries):
        if isinstance(entry.taskset, Taskset):
            try:
                entry.taskset.check_rows()
            except TasksetError as exc:
                issues.append(ConfigIssue(f"tasksets[{i}]", str(exc)))
    if issues:
        raise ConfigError(issues, pipe.source)


def run_pipeline(
    pipe: Pipeline,
    *,
    run_dir: str | os.PathLike[str],
    resume: bool = False,
    progress: IO[str] | None = sys.stderr,
    trackers: Any = None,
) -> RunResult:
    """Run ``pipe`` with its ``[trainer]`` to the end of its schedule, writing into ``run_dir``.

    With ``resume``, continue from ``run_dir/checkpoint``. ``trackers`` (a :class:`flexkit.cli._trackers.Trackers`)
    also get each step's ``flexkit/...`` metrics. Raises :class:`~flexkit.ConfigError` when the pipeline has no
    trainer.
    """
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("flexkit run needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
    if pipe.has_sample_stage:
        check_stage_timing(pipe.sample_stage, RUN_TIMINGS, driver="flexkit run", source=pipe.source)
    run_dir = Path(run_dir)
    trainer = new_trainer(pipe)
    replay = _replay_buffer(pipe, trainer)  # before the rows are read and the trainer set up (both can be slow)
    check_taskset_rows(pipe)
    if not resume:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise FlexkitError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}{where}") from None
    # one run per folder: a second one is refused before it sets up its trainer (--resume of no folder: below)
    with hold_folder(run_dir, "flexkit run") if run_dir.is_dir() else nullcontext():
        return _run_in_folder(pipe, trainer, replay, run_dir, resume, progress, trackers)


def _run_in_folder(pipe: Pipeline, trainer: Any, replay: ReplayBuffer | None, run_dir: Path, resume: bool,
                   progress: IO[str] | None, trackers: Any) -> RunResult:
    """:func:`run_pipeline` once the pipeline is checked and the folder locked: set the trainer up, start or
    resume the folder, run the step loop."""
    cfg, sched = pipe.config, pipe.scheduler
    bar = ProgressDisplay(sched.total_steps, progress, cfg.run.max_rollouts)
    set_progress(trainer, bar.phase)  # declared on Trainer; a duck-typed trainer from before it may lack it
    trainer.setup(pipe)
    metrics_path = run_dir / METRICS_FILE
    if resume:
        resumed = resume_run_folder(pipe, trainer, run_dir, replay)
        changes = update_resolved_config(pipe, run_dir)
        if changes:
            say("resumed_with_other_settings", (
                f"warning: {run_dir} continues with settings other than those it ran with: "
                f"{'; '.join(changes[:6])}{' ...' if len(changes) > 6 else ''} (the pipeline file's and --set's now; "
                "resolved.json records them). To keep the run's own, pass the --set it was started with"),
                level="warning", run_dir=str(run_dir), changes=changes)
        _say_resumed(run_dir, resumed, sched.total_steps, resumed.counters.rollouts)
    else:
        start_run_folder(pipe, run_dir)
        resumed = Resumed()
    counters, start = resumed.counters, resumed.start
    last: dict[str, Any] = {}
    saved = {"step": start} if resume else {}  # the step of the last committed checkpoint
    try:
        if not resumed.finished:
            last = _loop(pipe, trainer, run_dir, metrics_path, counters, bar, saved, trackers, replay)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir, _committed_step(run_dir, saved)) from None
    except BrokenPipeError:
        raise  # the progress display's reader went away: the command line ends quietly
    except OSError as exc:  # a full or read-only disk under the metrics file (checkpoint writes raise their own)
        where = f" ({exc.filename})" if exc.filename else ""
        raise FlexkitError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}{where}; the last "
                           f"checkpoint is kept: make room (or the folder writable) and continue with --resume "
                           f"{run_dir}") from None
    finally:
        sched.close()
    last = last or resumed.last_record
    steps = int(last["step"]) + 1 if last else start
    budget = cfg.run.max_rollouts
    return RunResult(run_dir=run_dir, steps=steps, first_eval=dict(counters.first_eval or {}),
                     last_eval=counters.last_eval,
                     last_metrics=last, stop_reason=stop_reason(steps, sched.total_steps, last.get(RUN_ROLLOUTS),
                                                                budget),
                     total_steps=sched.total_steps, max_rollouts=budget)


def new_trainer(pipe: Pipeline) -> Any:
    """The pipeline's ``[trainer]`` built from its config and the run's trainer seed, not yet set up (building is
    cheap; :meth:`~flexkit.Trainer.setup`, a warm start for instance, can take minutes)."""
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("this command needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
    return pipe.plugins.component("trainer", cfg.trainer.type).build(cfg.trainer.config,
                                                                     seed=trainer_seed(cfg.run.seed))


def has_validation(trainer: Any) -> bool:
    """Whether ``trainer`` has a validation split (:attr:`~flexkit.Trainer.supports_validation`;
    a trainer that does not derive from :class:`~flexkit.Trainer` has none)."""
    return isinstance(trainer, Trainer) and trainer.supports_validation


def evaluate_splits(pipe: Pipeline, trainer: Any, step: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """One evaluation of ``trainer`` at ``step``: its test split (``evaluate``) and its validation split
    (``validate``; ``{}`` for a trainer without one), both checked (:func:`trainer_metrics`). Only the validation
    split is handed to the selectors (:meth:`~flexkit.Pipeline.evaluation`); a trainer without one hands them
    nothing. Third: when the trainer gives the rows it validated (:meth:`~flexkit.Trainer.validation_rows`), how
    well each selector's predictions of them agree with their scores, under the record's names
    (``flexkit/selector/<taskset>/<name>``, :meth:`~flexkit.Pipeline.validation_calibration`)."""
    test = trainer_metrics(trainer, trainer.evaluate(step=step), "evaluate")
    if not has_validation(trainer):
        return test, {}, {}
    validation = trainer_metrics(trainer, trainer.validate(step=step), "validate")
    pipe.evaluation(validation)
    rows = trainer.validation_rows()
    if rows is None:
        return test, validation, {}
    if not isinstance(rows, ValidationRows):
        raise FlexkitError(f"the trainer {type(trainer).__name__}'s validation_rows returned "
                           f"{type(rows).__name__}, not a flexkit.ValidationRows or None")
    calibration = {selector_metric(name, key): value
                   for name, found in pipe.validation_calibration(rows).items() for key, value in found.items()}
    return test, validation, calibration


def run_support(pipe: Pipeline, trainer: Any) -> HostSupport:
    """What ``flexkit run`` with ``trainer`` honours of ``pipe``: the sample stage and refills always; ``[replay]``
    when the trainer declares :attr:`~flexkit.Trainer.supports_replay`; evaluations for the
    selectors (the validation split) when ``[run] eval_every`` is above 0 and the trainer declares
    :attr:`~flexkit.Trainer.supports_validation`."""
    kind = pipe.config.trainer.type if pipe.config.trainer is not None else "?"
    every = pipe.config.run.eval_every
    if every <= 0:
        no_evaluation = (f"[run] eval_every = {every} runs no evaluation: set it above 0, or "
                         'turn the guard off (guard_metric = "")')
    else:
        no_evaluation = (f"the trainer {kind!r} has no validation split (supports_validation = False), and the "
                         "selectors steer on validation only, never on the test split evaluate reports: give the "
                         "trainer a validate method (docs/plugins/trainer.md), or turn the guard off "
                         '(guard_metric = "")')
    return HostSupport(
        name=f"flexkit run with the trainer {kind!r}", sample=True, refill=True,
        replay=isinstance(trainer, Trainer) and trainer.supports_replay,
        evaluation=every > 0 and has_validation(trainer),
        advice={"replay": "replayed rows need their behaviour log-probabilities in the loss (a trainer declares it "
                          "with supports_replay = True): remove [replay]",
                "evaluation": no_evaluation})


def check_run_support(pipe: Pipeline, trainer: Any) -> None:
    """Refuse every part of ``pipe`` that ``flexkit run`` with ``trainer`` would not honour (:func:`run_support`,
    :func:`~flexkit.pipeline._support.check_support`): one :class:`~flexkit.ConfigError` naming each key."""
    check_support(pipe, run_support(pipe, trainer))


def _replay_buffer(pipe: Pipeline, trainer: Any) -> ReplayBuffer | None:
    """The run's :class:`ReplayBuffer` under ``[replay]`` (``None`` without), after :func:`check_run_support`."""
    check_run_support(pipe, trainer)
    cfg = pipe.config.replay
    return None if cfg is None else ReplayBuffer(cfg.groups, cfg.max_age)


def _say_resumed(run_dir: Path, resumed: Resumed, total: int, rollouts: int) -> None:
    """Tell where a resumed run continues from (or that it had finished)."""
    if resumed.finished:
        say("run_already_finished", f"{run_dir}: the run had already finished at step {resumed.start} of {total} "
            f"({rollouts:,} rollouts); nothing to train (a larger run.total_steps extends it)",
            run_dir=str(run_dir), step=resumed.start, total_steps=total, rollouts=rollouts)
    else:
        say("run_resumed", f"resuming {run_dir} from its checkpoint at step {resumed.start} of {total} "
            f"({rollouts:,} rollouts so far)", run_dir=str(run_dir), step=resumed.start, total_steps=total,
            rollouts=rollouts)


def _loop(
    pipe: Pipeline,
    trainer: Any,
    run_dir: Path,
    metrics_path: Path,
    counters: RunCounters,
    bar: ProgressDisplay,
    saved: dict[str, int],
    trackers: Any = None,
    replay: ReplayBuffer | None = None,
) -> dict[str, Any]:
    """The step loop of :func:`run_pipeline` from step ``counters.step`` on; returns the last record, keeps the
    run's counters and evaluations in ``counters`` and the step of the last checkpoint it committed in
    ``saved["step"]``. Each record ends with the run's wall seconds so far (``flexkit/run/seconds``, counted on
    from ``counters.seconds``)."""
    cfg, sched = pipe.config, pipe.scheduler
    total = sched.total_steps
    eval_every, ckpt_every = cfg.run.eval_every, cfg.run.checkpoint_every
    last: dict[str, Any] = {}
    stage = pipe.sample_stage if pipe.has_sample_stage else None
    started = time.monotonic() - counters.seconds  # a resumed run goes on from its last record's seconds

    def clock() -> dict[str, float]:
        counters.seconds = round(time.monotonic() - started, 3)
        return {RUN_SECONDS: counters.seconds}

    with metrics_path.open("a", encoding="utf-8") as out:
        if counters.step == 0 and eval_every:
            counters.first_eval, validation, calibration = evaluate_splits(pipe, trainer, 0)
            counters.last_eval = dict(counters.first_eval)
            out.write(json.dumps({STEP: INITIAL_STEP, **counters.record_totals(),
                                  **record_evaluation(counters.first_eval), **record_validation(validation),
                                  **calibration, **clock()}) + "\n")
            out.flush()
            if trackers is not None:
                trackers.log_eval(counters.first_eval, step=0, validation=validation)
                if calibration:
                    trackers.log(calibration, step=0)
        budget = cfg.run.max_rollouts
        snapshot = EstimateSnapshot.take(sched)  # what the selectors believe before the step
        for step in range(counters.step, total):
            spent = counters.rollouts
            record, tasks, feedback, count = train_step(pipe, trainer, stage, step, counters, replay)
            counters.step = step + 1
            snapshot = record_selection(record, tasks, snapshot, sched)
            done = step + 1 == total or (budget is not None and counters.rollouts >= budget)
            if eval_every and ((step + 1) % eval_every == 0 or done):
                counters.last_eval, validation, calibration = evaluate_splits(pipe, trainer, step + 1)
                record.update(record_evaluation(counters.last_eval))
                record.update(record_validation(validation))
                record.update(calibration)
            record.update(selector_summaries(sched))  # after the step's feedback and evaluation
            record.update(clock())
            out.write(json.dumps(record) + "\n")
            out.flush()
            last = record
            if trackers is not None:
                trackers.log_step(pipe, record, feedback, counters.rollouts - spent, step=step + 1, refill=count)
            bar.update(step, record, counters.last_eval.get("eval_accuracy"))
            if (ckpt_every and (step + 1) % ckpt_every == 0) or done:
                saved["pending"] = step + 1  # a Ctrl-C from here on may land before or after the commit
                extra = {TRAINER_KEY: trainer.state_dict(), RUNNER_KEY: counters.state_dict()}
                if replay is not None:
                    extra[REPLAY_KEY] = replay.state_dict()
                pipe.save_checkpoint(run_dir / CHECKPOINT_DIR, extra=extra)
                saved["step"] = step + 1
                del saved["pending"]
            if done:
                break
    return last
