"""flexkit hook implementations of ``flexkit-rft-trl`` (entry point ``trl``): the ``trl`` trainer of ``flexkit run``.

Loading this module imports neither torch nor TRL: the trainer is imported when a pipeline builds it.
"""

from __future__ import annotations

from typing import Any

from flexkit import hookimpl
from flexkit_trl.run_config import TRLRunConfig


def make_trl_trainer(config: TRLRunConfig, **context: Any) -> Any:
    """Build a :class:`~flexkit_trl.run_trainer.TRLRunTrainer` (imports torch and TRL)."""
    from flexkit_trl.run_trainer import TRLRunTrainer

    return TRLRunTrainer(config, **context)


@hookimpl
def flexkit_register_trainers(register: Any) -> None:
    """The ``trl`` trainer: GRPO fine-tuning of a Hugging Face causal LM by TRL's GRPOTrainer."""
    register("trl", make_trl_trainer, TRLRunConfig,
             description="GRPO fine-tuning of a Hugging Face causal LM with TRL's GRPOTrainer (generation, rewards, "
                         "advantages, loss and optimizer), one flexkit step at a time.")
