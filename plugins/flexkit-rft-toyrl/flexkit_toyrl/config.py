"""Configuration of the ``toyrl`` trainer (importable without torch)."""

from __future__ import annotations

import math
from typing import Literal

import attrs

from flexkit import field
from flexkit_toyrl.families import FAMILIES, Operation


@attrs.frozen(kw_only=True)
class ToyRLConfig:
    """Parameters of the ``toyrl`` trainer."""

    operation: Operation = field(
        default="add",
        doc='Task family of the warm start, the rollouts, the reward and the held-out evaluation: "add", "mul" or '
            '"sub"; must match the arithmetic taskset\'s operation.',
    )
    max_digits: int = field(default=4, ge=1, le=9, doc="Digit slots per operand; the largest task level.")
    base: int = field(default=10, ge=2, le=10, doc="Number base; must match the taskset's.")
    d_model: int = field(default=64, ge=8, doc="Transformer width.")
    n_layers: int = field(default=2, ge=1, doc="Transformer blocks.")
    n_heads: int = field(default=4, ge=1, doc="Attention heads (d_model must be a multiple).")
    group_size: int = field(default=8, ge=2, le=4096, doc="Sampled answers per task (G).")
    learning_rate: float = field(default=3e-4, gt=0, doc="Adam learning rate of the RL phase.")
    clip_ratio: float = field(default=0.2, gt=0, lt=1, doc="PPO clip range.")
    entropy_coef: float = field(default=0.001, ge=0, doc="Weight of the entropy bonus.")
    max_grad_norm: float = field(default=1.0, gt=0, doc="Gradient norm clip.")
    temperature: float = field(default=1.0, ge=0.01, le=100,
                               doc="Sampling temperature of the rollouts (0.01-100: beyond, float32 logits overflow or "
                                   "every answer is uniform noise).")
    aggregation: Literal["token-mean", "kept-token-mean"] = field(
        default="token-mean", doc="Loss aggregation (see flexkit.policy_loss)."
    )
    warmup_seed: int = field(
        default=0, ge=0,
        doc="Seed of the initial weights and the warm-start data. Independent of the pipeline seed, so every run "
            "of a comparison starts from the same warm-started policy, as fine-tuning runs share a pretrained model.",
    )
    pretrained: bool = field(
        default=True,
        doc="Load the warm-started weights shipped with the plugin when they were made with this table's warm-start "
            "parameters (the repository's examples), so that every machine starts the RL phase from the same policy; "
            "false: compute the warm start (its floating-point results differ between CPUs).",
    )
    warmup_steps: int = field(default=500, ge=0, doc="Supervised warm-start steps before the RL phase.")
    warmup_batch_size: int = field(default=128, ge=1, doc="Problems per warm-start step.")
    warmup_learning_rate: float = field(default=3e-3, gt=0, doc="Adam learning rate of the warm start.")
    warmup_level_weights: tuple[float, ...] = field(
        default=(0.9, 0.06, 0.03, 0.01),
        min_items=1,
        doc="Share of warm-start problems per level 1, 2, ...; mostly easy ones, so harder levels stay weak.",
    )
    num_threads: int = field(
        default=1, ge=0, speed_only=True,
        doc="torch CPU threads for this run (0: leave torch's setting). One thread keeps this small model fast on a "
            "shared CPU (more threads wait for each other when another process holds a core) and gives the same "
            "results on every machine; results can differ with the thread count.",
    )
    eval_tasks_per_level: int = field(default=200, ge=1, le=10**6,
                                      doc="Held-out test problems per level (evaluate: what runs are judged on).")
    eval_levels: tuple[int, ...] = field(default=(1, 2, 3, 4), min_items=1,
                                         doc="Levels of the held-out test and validation sets.")
    val_tasks_per_level: int = field(
        default=200, ge=1, le=10**6,
        doc="Validation problems per level (validate: the only evaluation the selectors steer on, frontier's "
            "guard_metric = \"val_accuracy/{}\"), none of them in the test set; a level the test set nearly "
            "exhausts (level 1) gives a fifth of its problems instead (see flexkit_toyrl.splits).",
    )

    def __attrs_post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if len(self.warmup_level_weights) > self.max_digits:
            raise ValueError(warmup_weights_message(self.warmup_level_weights, self.max_digits))
        family = FAMILIES[self.operation]
        if self.base < family.min_base:
            raise ValueError(f'operation = "{self.operation}" needs base >= {family.min_base}, got base = '
                             f"{self.base}: set base = {family.min_base} or more")
        total = sum(self.warmup_level_weights)
        if any(w < 0 or not math.isfinite(w) for w in self.warmup_level_weights) or not (
                0 < total < math.inf):  # a sum that overflows normalises to zeros
            raise ValueError("warmup_level_weights must be finite, >= 0, with a positive sum")
        bad = [level for level in self.eval_levels if not 1 <= level <= self.max_digits]
        if bad:
            raise ValueError(f"eval_levels must be between 1 and max_digits ({self.max_digits}), got {bad}")


def warmup_weights_message(weights: tuple[float, ...], max_digits: int) -> str:
    """The error for more ``warmup_level_weights`` than ``max_digits``: both fixes, with the values to set."""
    shorter = ", ".join(repr(w) for w in weights[:max_digits])
    return (f"warmup_level_weights has {len(weights)} entries (levels 1-{len(weights)}) but max_digits is "
            f"{max_digits}: set max_digits = {len(weights)}, or keep max_digits = {max_digits} and set "
            f"warmup_level_weights = [{shorter}] (one weight per level 1-{max_digits})")
