"""Construction-time checks of a TRL ``GRPOConfig`` against a flexkit pipeline: settings the trainer would
otherwise ignore or outrun silently.

* **Batch size.** One scheduler batch is one generation batch: the pipeline's ``batch_size`` must be
  ``generation_batch_size // num_generations`` (the prompts of a generation batch), and ``num_generations`` must
  divide ``generation_batch_size``; :func:`flexkit_trl.repeat_sampler` refuses it too, but only once
  ``trainer.train()`` builds the sampler.
* **Run length.** TRL runs ``max_steps`` optimizer steps (or ``num_train_epochs`` passes over the sampler). One
  scheduler batch is one generation batch, used for ``num_iterations × steps_per_generation`` micro-steps, that
  is ``num_iterations × steps_per_generation / gradient_accumulation_steps`` optimizer steps. When the trainer
  needs more scheduler batches than the pipeline's ``[run]`` gives, the sampler runs dry and the HF Trainer stops
  early (observed: step 96 of 200), with a learning-rate schedule sized for the full run; that is refused.
* **The sample stage.** The stage runs once per generation batch, after TRL's rewards and advantages
  (:mod:`flexkit_trl.sample`), so its scorer must run at ``post_reward`` or ``post_advantage``. Dynamic sampling
  (``[sample.refill]``) is refused: TRL's generation batch is one loader batch that every process draws from the
  sampler in lockstep, so a step cannot roll out more prompts than the loader handed it.
* **Rollout replay.** ``[replay]`` (DOTS, arXiv 2506.05316) runs in one process (:mod:`flexkit_trl.replay`); with
  more it is refused by :func:`flexkit_trl.support.trainer_support` through :func:`flexkit.host.check_support`.
"""

from __future__ import annotations

import math
from typing import Any

from flexkit import ConfigError, ConfigIssue, Pipeline, TasksetScheduler
from flexkit.host import pipeline_needs

__all__ = ["STAGE_TIMINGS", "check_batch_size", "check_evaluations", "check_run_length", "check_sample_stage",
           "generation_batches_needed"]

#: The sample stage timings FlexkitGRPOTrainer runs (both at the same point: after TRL's advantages).
STAGE_TIMINGS = ("post_reward", "post_advantage")


def _micro_steps(args: Any) -> int:
    """The micro-steps one generation batch is used for: ``num_iterations × steps_per_generation``."""
    return int(args.steps_per_generation) * int(args.num_iterations)


def generation_batches_needed(args: Any, steps_per_epoch: int) -> int:
    """Scheduler batches (generation batches) the HF Trainer will draw with these ``GRPOConfig`` settings, given
    the sampler's ``steps_per_epoch`` scheduler batches per pass."""
    micro = _micro_steps(args)
    accumulation = int(args.gradient_accumulation_steps)
    if args.max_steps and args.max_steps > 0:
        optimizer_steps = int(args.max_steps)
    else:
        per_epoch = max(steps_per_epoch * micro // accumulation, 1)
        optimizer_steps = math.ceil(float(args.num_train_epochs) * per_epoch)
    return math.ceil(optimizer_steps * accumulation / micro)


def check_run_length(args: Any, scheduler: Any) -> None:
    """Refuse a ``GRPOConfig`` that needs more generation batches than the pipeline's run holds, with both
    settings and the numbers that would match in the message."""
    needed = generation_batches_needed(args, scheduler.steps_per_epoch)
    if needed <= scheduler.total_steps:
        return
    micro = _micro_steps(args)
    accumulation = int(args.gradient_accumulation_steps)
    fits = scheduler.total_steps * micro // accumulation
    asked = (f"max_steps = {args.max_steps}" if args.max_steps and args.max_steps > 0
             else f"num_train_epochs = {args.num_train_epochs}")
    raise ConfigError([ConfigIssue("run", (
        f"GRPOConfig {asked} needs {needed} generation batches (one scheduler batch each, used for "
        f"num_iterations × steps_per_generation = {micro} micro-steps, gradient_accumulation_steps = "
        f"{accumulation}), but the pipeline's run holds {scheduler.total_steps} ({scheduler.steps_per_epoch} per "
        f"epoch); the trainer would stop early when the sampler runs dry. Set [run] total_steps = {needed} (or "
        f"total_epochs = {math.ceil(needed / scheduler.steps_per_epoch)}), or GRPOConfig max_steps = {fits}"))])


def check_sample_stage(pipeline: Any) -> None:
    """Refuse a ``[sample]`` stage whose scorer's timing is not in :data:`STAGE_TIMINGS` (``[sample.refill]`` and
    ``[replay]`` are refused by :func:`flexkit.host.check_support` with :mod:`flexkit_trl.support`)."""
    if not isinstance(pipeline, Pipeline) or not pipeline.has_sample_stage:
        return
    stage = pipeline.sample_stage
    if stage.timing not in STAGE_TIMINGS:
        raise ConfigError([ConfigIssue("sample.scorer", (
            f"FlexkitGRPOTrainer runs the [sample] stage after TRL's rewards and advantages "
            f"({' and '.join(STAGE_TIMINGS)}), but the scorer {type(stage.scorer).__name__} runs at "
            f"{stage.timing!r}: use a scorer of one of those timings"))])


def check_batch_size(args: Any, num_generations: int, scheduler: Any) -> None:
    """Refuse a pipeline ``batch_size`` that is not the prompts per generation batch, with the settings that fit."""
    generation = int(args.generation_batch_size)
    prompts = generation // num_generations
    if prompts * num_generations == generation and scheduler.batch_size == prompts:
        return
    if prompts * num_generations != generation:
        fix = f"make generation_batch_size a multiple of num_generations ({num_generations})"
    else:
        fix = (f"set [run] batch_size = {prompts}, or generation_batch_size = {scheduler.batch_size * num_generations} "
               f"(per_device_train_batch_size × processes × steps_per_generation)")
    raise ConfigError([ConfigIssue("run.batch_size", (
        f"the pipeline's batch_size ({scheduler.batch_size}) must be the prompts per generation batch: "
        f"generation_batch_size ({generation}) // num_generations ({num_generations}) = {prompts}; {fix}"))])


def check_evaluations(args: Any, strategy: str, pipeline: Pipeline | TasksetScheduler) -> None:
    """Refuse a guard that no evaluation within the run would feed: with ``eval_strategy = "steps"`` the HF
    Trainer evaluates at the steps that are multiples of ``eval_steps`` (a fraction of ``max_steps`` below 1) and
    not before ``eval_delay``; when the first such step is past ``max_steps`` the guard never fires."""
    guards = [need.key for need in pipeline_needs(pipeline) if need.part == "evaluation"]
    if not guards or strategy != "steps" or not args.max_steps or args.max_steps <= 0 or args.eval_steps is None:
        return
    total = int(args.max_steps)
    every = math.ceil(args.eval_steps * total) if 0 < args.eval_steps < 1 else int(args.eval_steps)
    delay = float(args.eval_delay or 0)
    first = every * max(1, math.ceil(delay / every))
    if first > total:
        raise ConfigError([ConfigIssue(guards[0], (
            f"TRL would first evaluate at step {first} (eval_steps = {args.eval_steps}, eval_delay = "
            f"{args.eval_delay}) but trains max_steps = {total}, so the guard would never see an evaluation: set "
            f"eval_steps (and eval_delay) so that an evaluation falls within the run, e.g. eval_steps = "
            f"{max(1, total // 4)}, or turn the guard off (guard_metric = \"\")"))])
