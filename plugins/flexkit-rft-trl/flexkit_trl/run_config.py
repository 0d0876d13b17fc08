"""Configuration of the ``trl`` trainer of ``flexkit run`` (importable without torch or TRL).

``[trainer] type = "trl"`` trains a Hugging Face causal LM with TRL's GRPO (:mod:`flexkit_trl.run_trainer`). The
model is ``model`` (a local model folder or a Hub name), or ``model_config`` (a transformers config as a table,
built with random weights from ``model_seed``) with ``tokenizer``; relative paths are read from the pipeline
file's folder.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

import attrs

from flexkit import field

__all__ = ["BUILTIN_REWARDS", "RESERVED_GRPO_ARGS", "TRLRunConfig"]

#: The reward functions named by a word (anything else is a ``module:function`` import path).
BUILTIN_REWARDS = ("exact_match", "prefix_match")

#: ``GRPOConfig`` keys the trainer sets itself (one generation and one optimizer step per flexkit step), refused
#: in ``grpo_args``.
RESERVED_GRPO_ARGS = frozenset({
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
    "generation_batch_size", "num_iterations", "num_generations", "max_completion_length", "learning_rate",
    "temperature", "beta", "epsilon", "loss_type", "max_grad_norm", "seed", "use_cpu", "bf16", "report_to",
    "max_steps", "num_train_epochs", "save_strategy", "eval_strategy", "logging_steps", "disable_tqdm",
    "use_vllm", "num_generations_eval", "per_device_eval_batch_size", "dataloader_num_workers",
})

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@attrs.frozen(kw_only=True)
class TRLRunConfig:
    """Parameters of the ``trl`` trainer: the model, the rows' prompts and answers, the reward, GRPO's settings
    and the held-out evaluation."""

    model: str = field(
        doc="The model to fine-tune: a local folder saved with save_pretrained (relative to the pipeline file), or a "
            "Hugging Face Hub name; its tokenizer too, unless tokenizer names another. With model_config only its "
            "tokenizer is read (a folder of tokenizer files is enough) and the model is built from model_config.",
    )
    model_config: dict[str, Any] | None = field(
        default=None,
        doc='A transformers model config as a table (model_type = "llama", hidden_size = 32, ...), built with random '
            "weights from model_seed: a tiny model for tests and examples. vocab_size and the pad/eos token ids "
            "default to the tokenizer's. model (or tokenizer) names the tokenizer.",
    )
    tokenizer: str | None = field(
        default=None,
        doc="The tokenizer folder or Hub name (relative to the pipeline file); default: model's.",
    )
    model_seed: int = field(
        default=0, ge=0,
        doc="Seed of model_config's random weights. Independent of the pipeline seed, so every run of a comparison "
            "starts from the same model.",
    )
    rows: Literal["columns", "arithmetic"] = field(
        default="columns",
        doc='How a task row becomes a prompt and an answer: "columns" reads prompt_column and answer_column; '
            '"arithmetic" writes the operands a and b of flexkit-rft-toyrl\'s arithmetic storage as "4 7 + 5 =" '
            '(digits separated by spaces, most significant first) with the answer "5 2".',
    )
    prompt_column: str = field(default="prompt", doc='The prompt column of the rows (rows = "columns").')
    answer_column: str = field(
        default="answer",
        doc="The column the built-in rewards compare completions with; every row column reaches a reward function "
            "as a keyword argument.",
    )
    reward: str = field(
        default="exact_match",
        doc='The reward function: "exact_match" (1 when the completion, whitespace-normalised, equals the answer), '
            '"prefix_match" (1 when its first words are the answer\'s), or "package.module:function", called as TRL '
            "calls reward functions: f(prompts=..., completions=..., completion_ids=..., **columns) -> list of "
            "floats in [0, 1] (or None).",
    )
    operation: Literal["add", "mul"] = field(
        default="add",
        doc='rows = "arithmetic": the problems\' operation ("mul": a × b, b one digit), for the held-out set; must '
            "match the arithmetic tasksets'.",
    )
    group_size: int = field(default=8, ge=2, doc="Completions per prompt (GRPO's group, TRL's num_generations).")
    max_completion_length: int = field(default=16, ge=1, doc="Most tokens per completion.")
    max_prompt_length: int = field(
        default=64, ge=1,
        doc="Most tokens per prompt; with [replay], every prompt is padded to this width so that stored groups fit "
            "any later batch.",
    )
    learning_rate: float = field(default=1e-5, gt=0, doc="AdamW's learning rate (TRL's optimizer and schedule).")
    lr_scheduler: Literal["constant", "linear", "cosine"] = field(
        default="constant", doc="The learning-rate schedule over the pipeline's total_steps (TRL's).",
    )
    temperature: float = field(default=1.0, gt=0, doc="Sampling temperature of the rollouts.")
    top_p: float = field(default=1.0, gt=0, le=1, doc="Nucleus sampling of the rollouts.")
    beta: float = field(default=0.0, ge=0, doc="Weight of the KL term to the initial model (0: no reference model).")
    epsilon: float = field(default=0.2, gt=0, lt=1, doc="PPO clip range of the importance ratio.")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = field(
        default="grpo", doc="TRL's loss aggregation (GRPOConfig loss_type).",
    )
    scale_rewards: Literal["group", "batch", "none"] = field(
        default="group", doc="TRL's advantage scaling (GRPOConfig scale_rewards).",
    )
    max_grad_norm: float = field(default=1.0, gt=0, doc="Gradient norm clip.")
    grpo_args: dict[str, Any] = field(
        factory=dict,
        doc="Further GRPOConfig settings (weight_decay, top_k, repetition_penalty, ...); the ones this table sets "
            "and the training-loop ones are refused.",
    )
    eval_data: str | None = field(
        default=None,
        doc='rows = "columns": a JSON Lines file of held-out rows (prompt and answer columns, and eval_group_column), '
            "relative to the pipeline file; needed when [run] eval_every is above 0.",
    )
    eval_group_column: str | None = field(
        default=None, earlier_default="level",
        doc="The column the held-out rows (eval_data, val_data) are grouped by: eval_accuracy/<value> and "
            "val_accuracy/<value> per value. Default: the column the pipeline's selectors group tasks by (the "
            "first of their feature_keys; a guard needs it in every validation row), else \"level\" where the "
            "rows have it. Set: every held-out file must have it.",
    )
    eval_levels: tuple[int, ...] = field(
        default=(1, 2, 3, 4), min_items=1, doc='rows = "arithmetic": the levels (digits of a) of the held-out set.',
    )
    eval_tasks_per_level: int = field(default=50, ge=1, doc='rows = "arithmetic": held-out problems per level.')
    val_data: str | None = field(
        default=None,
        doc='rows = "columns": a JSON Lines file of validation rows (prompt and answer columns, and '
            "eval_group_column), relative to the pipeline file: the split that steers (a guard reads "
            "val_accuracy/<value>), no prompt of which may be in eval_data. Default: no validation split.",
    )
    val_tasks_per_level: int = field(
        default=32, ge=0,
        doc='rows = "arithmetic": validation problems per level of eval_levels (the split that steers: a guard '
            "reads val_accuracy/<level>), none of them in the test set. 0: no validation split.",
    )
    reversed_digits: bool = field(
        default=False,
        doc='rows = "arithmetic": write every number least significant digit first ("7 4 + 5 =", answer "2 5"), the '
            "order in which a small causal model can carry (most significant first needs the carry before the first "
            "answer digit).",
    )
    warmup_steps: int = field(
        default=0, ge=0,
        doc='rows = "arithmetic": supervised steps on generated problems before the RL phase (flexkit_trl.warm_start), '
            "so that a model built from model_config starts, as a pretrained one would, solving the easy levels and "
            "little of the hard ones (0: none).",
    )
    warmup_batch_size: int = field(default=64, ge=1, doc="Problems per warm-start step.")
    warmup_learning_rate: float = field(default=3e-3, gt=0, doc="AdamW learning rate of the warm start.")
    warmup_level_weights: tuple[float, ...] = field(
        default=(0.9, 0.06, 0.03, 0.01), min_items=1,
        doc="Share of warm-start problems per level 1, 2, ...; mostly easy ones, so harder levels stay weak.",
    )
    warmup_seed: int = field(
        default=0, ge=0,
        doc="Seed of the warm start's problems and dropout, independent of the pipeline seed, so every run of a "
            "comparison starts from the same warm-started policy.",
    )
    eval_batch_size: int = field(default=64, ge=1, doc="Prompts per generation batch of the evaluation.")
    use_cpu: bool = field(default=False, doc="Train on the CPU even when a GPU is present.")
    bf16: bool = field(default=False, doc="bfloat16 mixed precision (a GPU that has it).")
    num_threads: int = field(
        default=1, ge=0, speed_only=True,
        doc="torch CPU threads (0: leave torch's setting); results can differ with the thread count.",
    )

    def __attrs_post_init__(self) -> None:
        if self.model_config is not None and not isinstance(self.model_config.get("model_type"), str):
            raise ValueError('model_config needs model_type (e.g. "llama")')
        if self.reward not in BUILTIN_REWARDS and not _IMPORT_PATH.match(self.reward):
            raise ValueError(f"reward must be one of {', '.join(BUILTIN_REWARDS)} or 'package.module:function', "
                             f"got {self.reward!r}")
        reserved = sorted(set(self.grpo_args) & RESERVED_GRPO_ARGS)
        if reserved:
            raise ValueError(f"grpo_args may not set {', '.join(reserved)}: the trainer sets them (this table's keys, "
                             "or one generation and one optimizer step per flexkit step)")
        if self.warmup_steps and self.rows != "arithmetic":
            raise ValueError('warmup_steps needs rows = "arithmetic" (the warm start trains on generated arithmetic '
                             "problems): set warmup_steps = 0, or start from a pretrained model")
        weights = self.warmup_level_weights
        if any(w < 0 or not math.isfinite(w) for w in weights) or not 0 < sum(weights) < math.inf:
            raise ValueError("warmup_level_weights must be finite, >= 0, with a positive sum")
        if len(weights) > 9:
            raise ValueError(f"warmup_level_weights has {len(weights)} entries; levels go up to 9 digits")
        bad = [level for level in self.eval_levels if not 1 <= level <= 9]
        if bad:
            raise ValueError(f"eval_levels must be between 1 and 9, got {bad}")
