"""What ``FlexkitGRPOTrainer`` honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without TRL
(``flexkit validate --for trl`` reads :data:`SUPPORT` through the ``flexkit.hosts`` entry point)."""

from __future__ import annotations

from typing import Any

from flexkit.host import HostSupport

__all__ = ["SUPPORT", "trainer_support"]

_ADVICE = {
    "refill": ("TRL generates once per loader batch, which every process draws from the sampler in lockstep, so a "
               "step cannot roll out more prompts than the loader handed it. Remove [sample.refill] (the group "
               "filter then drops groups from the loss without refilling them), or call flexkit.fill_batch in your "
               "own loop (docs/integrations/dynamic-sampling.md)"),
    "evaluation": ("give the trainer an eval_dataset (with the guard's grouping column) and evaluate (an "
                   "eval_strategy other than 'no'), or turn the guard off (guard_metric = \"\")"),
}

#: The trainer with an evaluation configured: the sample stage (no refills), rollout replay (one process:
#: :mod:`flexkit_trl.checks`) and evaluations for the guard.
SUPPORT = HostSupport(name="FlexkitGRPOTrainer (TRL)", sample=True, replay=True, evaluation=True, advice=_ADVICE)


def trainer_support(eval_dataset: Any) -> HostSupport:
    """:data:`SUPPORT` for a trainer given ``eval_dataset``: evaluations only with one (``evaluate()`` may be called
    by hand, so ``eval_strategy = "no"`` is not refused)."""
    return HostSupport(name=SUPPORT.name, sample=True, replay=True, evaluation=eval_dataset is not None,
                       advice=_ADVICE)
