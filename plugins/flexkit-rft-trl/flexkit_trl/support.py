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

#: The trainer with an evaluation configured, on one process: the sample stage (no refills), rollout replay
#: (:mod:`flexkit_trl.replay`) and evaluations for the guard.
SUPPORT = HostSupport(name="FlexkitGRPOTrainer (TRL)", sample=True, replay=True, evaluation=True, advice=_ADVICE,
                      requirements={
                          "evaluation": ("an eval_dataset and GRPOConfig eval_strategy other than 'no' (e.g. "
                                         "eval_strategy='steps', eval_steps=25)"),
                          "group_accuracy": ("eval_dataset rows carrying the selector's grouping column, for every "
                                             "value of it in the training rows"),
                      })


def trainer_support(eval_dataset: Any, processes: int = 1, *, eval_strategy: str = "steps") -> HostSupport:
    """:data:`SUPPORT` for a trainer given ``eval_dataset`` on ``processes`` processes with ``eval_strategy``
    (``GRPOConfig``'s): evaluations only with an ``eval_dataset`` that ``train()`` evaluates (``eval_strategy``
    other than ``"no"``: with ``"no"`` TRL never evaluates during training, so the guard would never fire), replay
    only on one process (each process would keep a buffer of its own completions and hand TRL a different number
    of rows, which is not tested)."""
    advice = dict(_ADVICE)
    if eval_dataset is not None and eval_strategy == "no":
        advice["evaluation"] = ("GRPOConfig's eval_strategy is 'no' (TRL's default), so train() never evaluates "
                                "the eval_dataset and the guard would never fire: set eval_strategy='steps' with "
                                "eval_steps (e.g. 25), or turn the guard off (guard_metric = \"\")")
    if processes > 1:
        advice["replay"] = (f"this run has {processes} processes, and FlexkitGRPOTrainer replays in one: remove the "
                            "[replay] table (the selector part of the recipe applies as it is), run on one process, "
                            "or run the recipe with flexkit run")
    return HostSupport(name=SUPPORT.name, sample=True, replay=processes == 1,
                       evaluation=eval_dataset is not None and eval_strategy != "no", advice=advice,
                       requirements=SUPPORT.requirements)
