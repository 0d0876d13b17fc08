"""``flexkit run``: drive a pipeline and its ``[trainer]`` backend end to end, with metrics and checkpoints.

A run folder holds ``pipeline.toml`` (a copy of the file), ``resolved.json`` (the validated config with every
default filled in), ``metrics.jsonl`` (one object per step, flushed every step; evaluation records carry
``eval_accuracy``; with ``[run] eval_every`` the first record, ``"step": -1``, holds the evaluation before any
training: :data:`INITIAL_STEP`) and ``checkpoint/`` (the latest checkpoint, written atomically every ``[run]
checkpoint_every`` steps and at the end). ``--resume`` continues from the checkpoint and truncates the metrics
to it, so a resumed run ends with exactly the metrics of an uninterrupted one.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np
import structlog

from flexkit.dynamic_sampling import count_tokens, fill_batch
from flexkit.errors import ConfigError, ConfigIssue, FlexkitError, TasksetError
from flexkit.feedback import SELECTOR_METRIC, snapshot_experiences
from flexkit.log import say
from flexkit.pipeline import Pipeline
from flexkit.run_estimates import EstimateSnapshot, level_mix
from flexkit.run_folder import (
    CHECKPOINT_DIR,
    INITIAL_STEP,
    METRICS_FILE,
    Resumed,
    resume_run_folder,
    start_run_folder,
)
from flexkit.sample.actuator import Keep, Mix
from flexkit.sample.stage_checks import check_stage_timing
from flexkit.tasksets import Taskset
from flexkit.trainer_output import trainer_metrics

log = structlog.get_logger("flexkit.runner")

#: The timings at which the step loop runs the sample stage. ``pre_rollout`` has no rollout batch to score yet
#: and ``in_loss`` needs the trainer's loss code, so a scorer declaring either is refused at the start of a run.
RUN_TIMINGS = ("post_reward", "post_advantage")


@attrs.define
class RunResult:
    """What a run produced: its folder, the number of steps done, and the first and last evaluations."""

    run_dir: Path
    steps: int
    first_eval: dict[str, float]
    last_eval: dict[str, float]
    last_metrics: dict[str, Any]
    #: Why the run stopped: :data:`STEP_LIMIT` (all of ``[run] total_steps`` / ``total_epochs`` done) or
    #: :data:`ROLLOUT_BUDGET` (``[run] max_rollouts`` spent first).
    stop_reason: str = ""
    total_steps: int = 0
    max_rollouts: int | None = None


#: :attr:`RunResult.stop_reason` values.
STEP_LIMIT = "step limit"
ROLLOUT_BUDGET = "rollout budget"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_pipeline`: a :class:`KeyboardInterrupt` that knows the run folder and the step
    of its last committed checkpoint (``None``: none written yet), so the caller can say how to resume."""

    def __init__(self, run_dir: Path, checkpoint_step: int | None) -> None:
        super().__init__(f"interrupted; last checkpoint: {checkpoint_step}")
        self.run_dir, self.checkpoint_step = run_dir, checkpoint_step


def stop_reason(steps: int, total_steps: int, rollouts: int | None, max_rollouts: int | None) -> str:
    """Why a run that did ``steps`` of ``total_steps`` and generated ``rollouts`` stopped."""
    if steps < total_steps and max_rollouts is not None and rollouts is not None and rollouts >= max_rollouts:
        return ROLLOUT_BUDGET
    return STEP_LIMIT


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


class _Progress:
    """A one-line progress display on a terminal; periodic plain lines elsewhere."""

    def __init__(self, total: int, stream: IO[str] | None, budget: int | None = None) -> None:
        self.total, self.stream, self.budget = total, stream, budget
        self._decile = 0
        self.tty = bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())
        self.started = time.monotonic()
        self.every = max(1, total // 10)
        self._phase: tuple[str, float, float] = ("", 0.0, 0.0)  # name, started, last written

    def phase(self, name: str, done: int, total: int) -> None:
        """A trainer's long phase (:meth:`flexkit.trainer.Trainer.report_progress`): on a terminal a line
        rewritten at most 5 times a second; elsewhere a line at every 10% of it."""
        if self.stream is None or total <= 0:
            return
        now = time.monotonic()
        if self._phase[0] != name:
            self._phase = (name, now, 0.0)
        _name, started, written = self._phase
        last = done >= total
        text = f"{name}: {min(done, total)}/{total} ({now - started:.0f}s)"
        if self.tty:
            if not last and now - written < 0.2:
                return
            self.stream.write("\r" + text + ("\n" if last else ""))
        elif last or done * 10 // total != (done - 1) * 10 // total:
            self.stream.write(text + "\n")
        else:
            return
        self.stream.flush()
        self._phase = (name, started, now)

    def update(self, step: int, metrics: Mapping[str, Any], accuracy: float | None) -> None:
        if self.stream is None:
            return
        done = step + 1
        elapsed = time.monotonic() - self.started
        rollouts = metrics.get("rollouts")
        fraction = done / self.total
        over_budget = self.budget is not None and rollouts is not None and rollouts >= self.budget
        if self.budget is not None and rollouts is not None:  # [run] max_rollouts may end the run first
            fraction = max(fraction, rollouts / self.budget)
        finished = done == self.total or over_budget
        bar = "#" * int(20 * min(1.0, fraction))
        acc = f" eval {accuracy:.3f}" if accuracy is not None else ""
        reward = metrics.get("reward_mean")
        spent = "" if rollouts is None else f" rollouts {rollouts:,}" + (f"/{self.budget:,}" if self.budget else "")
        text = (f"[{bar:<20}] step {done}/{self.total} reward {reward:.3f}{acc}{spent} "
                f"{elapsed:.1f}s") if reward is not None else f"step {done}/{self.total}{spent}"
        decile, previous = int(10 * min(1.0, fraction)), self._decile
        self._decile = decile
        if self.tty:
            self.stream.write("\r" + text)
            if finished:
                self.stream.write("\n")
            self.stream.flush()
        elif done % self.every == 0 or finished or (self.budget is not None and decile != previous):
            self.stream.write(text + "\n")
            self.stream.flush()


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

    With ``resume``, continue from ``run_dir/checkpoint``. ``trackers`` (a :class:`flexkit.trackers.Trackers`)
    also get each step's ``flexkit/...`` metrics. Raises :class:`~flexkit.ConfigError` when the pipeline has no
    trainer.
    """
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("flexkit run needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
    if pipe.has_sample_stage:
        check_stage_timing(pipe.sample_stage, RUN_TIMINGS, driver="flexkit run", source=pipe.source)
    run_dir = Path(run_dir)
    trainer = pipe.plugins.component("trainer", cfg.trainer.type).build(cfg.trainer.config,
                                                                         seed=trainer_seed(cfg.run.seed))
    sched = pipe.scheduler
    check_taskset_rows(pipe)
    bar = _Progress(sched.total_steps, progress, cfg.run.max_rollouts)
    if callable(getattr(trainer, "set_progress", None)):  # optional: trainers from before it existed lack it
        trainer.set_progress(bar.phase)
    trainer.setup(pipe)
    metrics_path = run_dir / METRICS_FILE
    counters = {"rollouts": 0, "generated_tokens": 0}
    if resume:
        resumed = resume_run_folder(pipe, trainer, run_dir, counters)
        _say_resumed(run_dir, resumed, sched.total_steps, counters["rollouts"])
    else:
        start_run_folder(pipe, run_dir)
        resumed = Resumed()
    start, first_eval, last_eval = resumed.start, resumed.first_eval, resumed.last_eval
    last: dict[str, Any] = {}
    saved = {"step": start} if resume else {}  # the step of the last committed checkpoint
    try:
        if not resumed.finished:
            last, last_eval, first_eval = _loop(pipe, trainer, run_dir, metrics_path, start, first_eval, last_eval,
                                                counters, bar, saved, trackers)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir, saved.get("step")) from None
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
    return RunResult(run_dir=run_dir, steps=steps, first_eval=dict(first_eval or {}), last_eval=last_eval,
                     last_metrics=last, stop_reason=stop_reason(steps, sched.total_steps, last.get("rollouts"), budget),
                     total_steps=sched.total_steps, max_rollouts=budget)


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
    start: int,
    first_eval: dict[str, float] | None,
    last_eval: dict[str, float],
    counters: dict[str, int],
    bar: _Progress,
    saved: dict[str, int],
    trackers: Any = None,
) -> tuple[dict[str, Any], dict[str, float], dict[str, float] | None]:
    """The step loop of :func:`run_pipeline`; returns the last record and the first and last evaluations, and
    keeps the step of the last checkpoint it committed in ``saved["step"]``."""
    cfg, sched = pipe.config, pipe.scheduler
    total = sched.total_steps
    eval_every, ckpt_every = cfg.run.eval_every, cfg.run.checkpoint_every
    last: dict[str, Any] = {}
    stage = pipe.sample_stage if pipe.has_sample_stage else None
    with metrics_path.open("a", encoding="utf-8") as out:
        if start == 0 and eval_every:
            first_eval = trainer_metrics(trainer, trainer.evaluate(step=0), "evaluate")
            last_eval = dict(first_eval)
            out.write(json.dumps({"step": INITIAL_STEP, **counters, **first_eval}) + "\n")
            out.flush()
            if trackers is not None:
                trackers.log_eval(first_eval, step=0)
        budget = cfg.run.max_rollouts
        snapshot = EstimateSnapshot.take(sched)  # what the selectors believe before the step
        for step in range(start, total):
            spent = counters["rollouts"]
            record, tasks, feedback = _train_step(pipe, trainer, stage, step, counters)
            snapshot = _record_selection(record, tasks, snapshot, sched)
            done = step + 1 == total or (budget is not None and counters["rollouts"] >= budget)
            if eval_every and ((step + 1) % eval_every == 0 or done):
                last_eval = trainer_metrics(trainer, trainer.evaluate(step=step + 1), "evaluate")
                record.update(last_eval)
            out.write(json.dumps(record) + "\n")
            out.flush()
            last = record
            if trackers is not None:
                trackers.log_step(pipe, record, feedback, counters["rollouts"] - spent, step=step + 1)
            bar.update(step, record, last_eval.get("eval_accuracy"))
            if (ckpt_every and (step + 1) % ckpt_every == 0) or done:
                pipe.save_checkpoint(run_dir / CHECKPOINT_DIR, extra={
                    "trainer": trainer.state_dict(),
                    "runner": {"step": step + 1, "first_eval": first_eval, "last_eval": last_eval, **counters},
                })
                saved["step"] = step + 1
            if done:
                break
    return last, last_eval, first_eval


@attrs.define
class _StepOutcome:
    """What one training step generated and trained on, before it becomes a metrics record."""

    tasks: list[Any]
    feedback: list[Mapping[str, Any]]
    rollout_metrics: dict[str, float]
    update: Mapping[str, float]
    responses: int
    tokens: int
    kept_groups: int
    filter_rounds: int
    kept_fraction: float | None


def _train_step(pipe: Pipeline, trainer: Any, stage: Any, step: int,
                counters: dict[str, int]) -> tuple[dict[str, Any], list[Any], list[Mapping[str, Any]]]:
    """One step (plain, or with dynamic sampling under ``[sample.refill]``) as a metrics record, the tasks it
    drew and its feedback payloads (one per round); adds the responses and tokens generated to the cumulative
    ``counters``."""
    sample = pipe.config.sample
    if sample is not None and sample.refill is not None:
        outcome = _refill_step(pipe, trainer, step)
    else:
        outcome = _plain_step(pipe, trainer, stage, step)
    counters["rollouts"] += outcome.responses
    counters["generated_tokens"] += outcome.tokens
    mix: dict[str, int] = {}
    for task in outcome.tasks:
        mix[task.taskset] = mix.get(task.taskset, 0) + 1
    values = [v for fb in outcome.feedback for part in fb.get(SELECTOR_METRIC, {}).values() for v in part["values"]]
    record: dict[str, Any] = {"step": step, **outcome.rollout_metrics, **outcome.update, "taskset_mix": mix,
                              "pass_rate_mean": float(np.mean(values)) if values else None,
                              "rollouts": counters["rollouts"], "generated_tokens": counters["generated_tokens"],
                              "kept_groups": outcome.kept_groups, "filter_rounds": outcome.filter_rounds}
    if stage is not None:
        record.update(stage.metrics())
    if outcome.kept_fraction is not None:
        record["kept_fraction"] = outcome.kept_fraction
    return record, outcome.tasks, outcome.feedback


def _record_selection(record: dict[str, Any], tasks: list[Any], before: EstimateSnapshot,
                      sched: Any) -> EstimateSnapshot:
    """Add the ``level_mix`` of the step's drawn ``tasks`` and the ``predicted_pass_rate`` histograms (theirs and
    the pool's, from the estimates ``before`` the step) to ``record``; return the snapshot for the next step."""
    levels = level_mix(tasks)
    if levels is not None:
        record["level_mix"] = levels
    histograms = before.record(tasks)
    if histograms is not None:
        record["predicted_pass_rate"] = histograms
    return EstimateSnapshot.take(sched)


def _plain_step(pipe: Pipeline, trainer: Any, stage: Any, step: int) -> _StepOutcome:
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
    experiences = snapshot_experiences(rollout.experiences)
    batch = rollout.batch
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_reward")
    trainer.compute_advantages(batch, step=step)
    weights = None
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_advantage")
        if not isinstance(stage.last_action, Mix) and stage.last_step == step:
            weights = stage.token_weights(batch, step=step)
    pending = _background().submit(pipe.feedback, experiences)
    try:
        update = trainer.update(batch, weights, step=step)
    finally:
        feedback = pending.result()  # waits even when the update failed, so no feedback outlives the step
    kept_fraction = stage.kept_fraction if stage is not None else None
    return _StepOutcome(tasks=tasks, feedback=[feedback], rollout_metrics=rollout_metrics,
                        update=trainer_metrics(trainer, update, "update"),
                        responses=batch.batch_size, tokens=count_tokens(batch),
                        kept_groups=_kept_groups(batch, stage.last_action if stage is not None else None),
                        filter_rounds=1, kept_fraction=kept_fraction)


@functools.cache
def _background() -> ThreadPoolExecutor:
    """The one thread that runs each step's feedback alongside the trainer's update (created on first use)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="flexkit-feedback")


def _refill_step(pipe: Pipeline, trainer: Any, step: int) -> _StepOutcome:
    """Dynamic sampling: rounds of rollouts until the kept groups fill the batch, then one update on them."""
    filled = fill_batch(pipe, lambda tasks: trainer.rollout(tasks, step=step), step=step)
    batch = filled.batch
    update: Mapping[str, float] = {}
    if batch.batch_size:  # nothing kept after every round: no update this step
        trainer.compute_advantages(batch, step=step)
        update = trainer_metrics(trainer, trainer.update(batch, None, step=step), "update")
    responses = filled.responses
    metrics: dict[str, float] = {}
    rounds = [(trainer_metrics(trainer, r.rollout.metrics, "rollout"), r.responses) for r in filled.rounds]
    for key in {k for m, _n in rounds for k in m}:  # response-weighted mean over rounds
        parts = [(float(m[key]), n) for m, n in rounds if m.get(key) is not None]
        if parts:
            metrics[key] = sum(v * n for v, n in parts) / max(1, sum(n for _, n in parts))
    return _StepOutcome(tasks=filled.tasks, feedback=[r.feedback for r in filled.rounds],
                        rollout_metrics=dict(sorted(metrics.items())), update=update, responses=responses,
                        tokens=filled.generated_tokens, kept_groups=filled.kept_groups,
                        filter_rounds=filled.filter_rounds,
                        kept_fraction=batch.batch_size / responses if responses else 0.0)


def _kept_groups(batch: Any, action: Any) -> int:
    """Groups of ``batch`` the update trains on: those with a kept sample under a select action, else all."""
    gid, groups = batch.group_index() if "uid" in batch else (np.arange(batch.batch_size), batch.batch_size)
    if isinstance(action, Keep):
        return len(np.unique(gid[action.indices]))
    return int(groups)


def summary_lines(result: RunResult) -> list[str]:
    """The before/after evaluation table printed at the end of a run."""
    first, last = result.first_eval, result.last_eval
    keys = [k for k in last if k.startswith("eval_accuracy/")]
    lines = [f"run folder: {result.run_dir}", "", f"{'eval accuracy':<22}{'before':>8}{'after':>8}{'change':>8}"]
    for key in ["eval_accuracy", *keys]:
        label = "all levels" if key == "eval_accuracy" else f"level {key.split('/', 1)[1]}"
        before, after = first.get(key), last.get(key)
        if before is None or after is None:
            continue
        lines.append(f"{label:<22}{before:>8.3f}{after:>8.3f}{after - before:>+8.3f}")
    spent = result.last_metrics.get("rollouts")
    if spent is not None:
        lines += ["", f"rollouts generated: {spent:,} ({result.last_metrics.get('generated_tokens', 0):,} tokens)"]
    if result.stop_reason == ROLLOUT_BUDGET:
        lines.append(f"stopped: rollout budget spent ([run] max_rollouts = {result.max_rollouts:,}) after step "
                     f"{result.steps} of {result.total_steps}")
    elif result.stop_reason == STEP_LIMIT and result.total_steps:
        lines.append(f"stopped: step limit reached ({result.steps} of {result.total_steps} steps, [run] "
                     "total_steps / total_epochs)")
    return lines
