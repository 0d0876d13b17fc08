"""Construction-time checks of a TRL ``GRPOConfig`` against a flexkit pipeline: settings the trainer would
otherwise ignore or outrun silently.

* **Run length.** TRL runs ``max_steps`` optimizer steps (or ``num_train_epochs`` passes over the sampler). One
  scheduler batch is one generation batch, used for ``num_iterations × steps_per_generation`` micro-steps, that
  is ``num_iterations × steps_per_generation / gradient_accumulation_steps`` optimizer steps. When the trainer
  needs more scheduler batches than the pipeline's ``[run]`` gives, the sampler runs dry and the HF Trainer stops
  early (observed: step 96 of 200), with a learning-rate schedule sized for the full run; that is refused.
* **The sample stage.** ``GRPOTrainer`` computes its loss inside ``compute_loss`` from its own advantages, with
  no per-sample weights a pipeline could set, so a ``[sample]`` table would be ignored; that is refused.
"""

from __future__ import annotations

import math
from typing import Any

from flexkit import ConfigError, ConfigIssue

__all__ = ["check_no_sample_stage", "check_run_length", "generation_batches_needed"]


def generation_batches_needed(args: Any, steps_per_epoch: int) -> int:
    """Scheduler batches (generation batches) the HF Trainer will draw with these ``GRPOConfig`` settings, given
    the sampler's ``steps_per_epoch`` scheduler batches per pass."""
    micro = int(args.steps_per_generation) * int(getattr(args, "num_iterations", 1))
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
    micro = int(args.steps_per_generation) * int(getattr(args, "num_iterations", 1))
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


def check_no_sample_stage(pipeline: Any) -> None:
    """Refuse a pipeline with a ``[sample]`` table: TRL's GRPO loss takes no per-sample weights from outside."""
    if getattr(pipeline, "has_sample_stage", False):
        raise ConfigError([ConfigIssue("sample", (
            "FlexkitGRPOTrainer cannot apply a [sample] stage: TRL's GRPOTrainer computes its loss from its own "
            "advantages with no per-sample weights, so filtering, reweighting and mixing would be ignored. Remove "
            "the [sample] table, or use flexkit.run.dynamic_sampling.fill_batch in your own loop "
            "(docs/integrations/dynamic-sampling.md)"))])
