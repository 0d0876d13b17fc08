"""flexkit hook implementations of the ``toyrl`` distribution (entry point ``toyrl``).

Loading this module does not import torch: the trainer is imported when a pipeline builds it.
"""

from __future__ import annotations

from typing import Any

from flexkit import hookimpl
from flexkit_toyrl.arithmetic import ArithmeticTasksConfig, make_arithmetic_taskset
from flexkit_toyrl.config import ToyRLConfig


def make_toyrl_trainer(config: ToyRLConfig, **context: Any) -> Any:
    """Build a :class:`~flexkit_toyrl.trainer.ToyRLTrainer` (imports torch)."""
    from flexkit_toyrl.trainer import ToyRLTrainer

    return ToyRLTrainer(config, **context)


@hookimpl
def flexkit_register_storages(register: Any) -> None:
    """The ``arithmetic`` storage: generated addition or multiplication problems with graded difficulty."""
    register("arithmetic", make_arithmetic_taskset, ArithmeticTasksConfig,
             description="Generated multi-digit addition, or multiplication by one digit, with graded difficulty "
                         "(levels = digits).")


@hookimpl
def flexkit_register_trainers(register: Any) -> None:
    """The ``toyrl`` trainer: GRPO on a tiny transformer."""
    register("toyrl", make_toyrl_trainer, ToyRLConfig,
             description="GRPO fine-tuning of a tiny transformer on generated arithmetic, on a CPU in minutes.")
