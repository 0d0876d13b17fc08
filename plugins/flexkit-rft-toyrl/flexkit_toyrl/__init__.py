"""flexkit's embedded RL fine-tuning backend: GRPO on a tiny transformer learning multi-digit addition.

Registers the ``arithmetic`` taskset storage and the ``toyrl`` trainer through flexkit's entry points
(:mod:`flexkit_toyrl.plugin`). Importing the package does not import torch; the trainer
(:mod:`flexkit_toyrl.trainer`) and model (:mod:`flexkit_toyrl.model`) modules do.
"""

from flexkit_toyrl.arithmetic import ArithmeticTasksConfig, make_arithmetic_taskset
from flexkit_toyrl.config import ToyRLConfig

__all__ = ["ArithmeticTasksConfig", "ToyRLConfig", "make_arithmetic_taskset"]
