"""``TRLRunTrainer``: ``flexkit run``'s ``[trainer] type = "trl"``, GRPO fine-tuning of a causal LM by TRL.

:meth:`TRLRunTrainer.setup` builds TRL's own ``GRPOTrainer`` (a subclass, :class:`GRPOStepper`, that is driven
one generation and one optimizer step at a time) with the model, the tokenizer and the reward function of the
``[trainer]`` table (:class:`~flexkit_trl.run_config.TRLRunConfig`), and its AdamW optimizer and learning-rate
schedule over the pipeline's ``total_steps``. Each ``flexkit run`` step is then:

1. :meth:`~TRLRunTrainer.rollout`: the scheduler's tasks as TRL inputs (:mod:`flexkit_trl.run_rows`), each
   ``group_size`` times in a row, through TRL's ``_generate_and_score_completions``: TRL tokenises, samples,
   scores with the reward function and computes its group-relative advantages (``scale_rewards``); the result
   becomes a :class:`~flexkit.RolloutBatch` (``token_level_scores`` = each completion's weighted reward,
   ``response_mask`` = TRL's completion mask, ``uid``, ``taskset_id``, ``index``), whose rewards the feedback
   reads;
2. :meth:`~TRLRunTrainer.compute_advantages`: TRL's advantages on every completion token;
3. :meth:`~TRLRunTrainer.update`: TRL's GRPO loss (``compute_loss``: the clipped surrogate, ``loss_type``'s
   aggregation, the KL term with ``beta``), with the sample stage's token weights multiplied into the
   advantages and their zeros dropped from the loss mask (:func:`flexkit_trl.sample.weighted_inputs`), one
   backward pass, gradient clipping, one optimizer and schedule step.

With ``[replay]`` every rollout also keeps the generating policy's per-token log-probabilities
(``old_log_probs``, computed by TRL's ``_get_per_token_logps_and_entropies``) and pads prompts and completions to
``max_prompt_length`` and ``max_completion_length``, so that stored groups fit any later batch; the update hands
them to TRL's loss as ``old_per_token_logps``, so a replayed row's importance ratio is taken against the policy
that generated it and clipped at ``epsilon`` (a fresh row's ratio is 1: the policy has not moved since its
rollout). Under ``[sample.refill]`` (dynamic sampling) the widths are fixed the same way, so that the kept groups
of every round form one batch for the one update.

With ``warmup_steps``, :meth:`~TRLRunTrainer.setup` first warm-starts a model built from ``model_config`` with
supervised steps on generated problems (:mod:`flexkit_trl.warm_start`), as the embedded trainer does.

:meth:`~TRLRunTrainer.evaluate` decodes greedily the held-out prompts (``eval_data``, or fresh arithmetic problems
per level) with TRL's generation and scores them with the same reward function: ``eval_accuracy`` is the mean
reward, ``eval_accuracy/<group>`` the mean per value of ``eval_group_column`` (default: the selectors' grouping
column, else ``level``).

:meth:`~TRLRunTrainer.state_dict` holds the weights, the optimizer, the schedule, torch's random state and TRL's
counters as arrays, so ``flexkit run --resume`` continues exactly (on a CPU with a fixed ``num_threads``).
One process: ``flexkit run`` drives a single model copy (no ``accelerate launch``).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

from flexkit import ConfigError, ConfigIssue, FlexkitError, Rollout, RolloutBatch, Trainer, ValidationRows
from flexkit.host import GroupColumn, group_label, guard_columns, pipeline_needs
from flexkit_trl.rewards import load_reward
from flexkit_trl.run_config import BUILTIN_REWARDS, TRLRunConfig
from flexkit_trl.run_rows import arithmetic_eval_rows, arithmetic_val_rows, read_eval_rows, trl_input, union_keys
from flexkit_trl.sample import weighted_inputs
from flexkit_trl.warm_start import warm_start

__all__ = ["GRPOStepper", "TRLRunTrainer"]

#: Spawn key of the trainer's torch random stream (with the run's trainer seed).
TORCH_SPAWN_KEY = 1


class GRPOStepper(GRPOTrainer):
    """TRL's ``GRPOTrainer``, driven by :class:`TRLRunTrainer` one generation and one optimizer step at a time
    instead of by ``train()``: no gradient accumulation, and each generation's summed rewards kept
    (:attr:`last_rewards`)."""

    #: One backward pass per optimizer step (``train()`` sets it per accumulation window; nothing else does).
    current_gradient_accumulation_steps = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: The latest scored generation's reward per completion (weighted sum over the reward functions; NaN:
        #: every function returned None).
        self.last_rewards: torch.Tensor | None = None
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        """TRL's rewards, with their weighted sum per completion kept in :attr:`last_rewards`."""
        rewards_per_func: torch.Tensor = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        self.last_rewards = rewards.detach()
        return rewards_per_func

    @property
    def policy(self) -> torch.nn.Module:
        """The model being trained (the HF Trainer types it as optional)."""
        assert self.model is not None
        return self.model

    @property
    def adamw(self) -> torch.optim.Optimizer:
        """The optimizer (after ``create_optimizer_and_scheduler``)."""
        assert self.optimizer is not None
        return self.optimizer

    @property
    def schedule(self) -> Any:
        """The learning-rate schedule (after ``create_optimizer_and_scheduler``)."""
        assert self.lr_scheduler is not None
        return self.lr_scheduler

    @property
    def pad_token_id(self) -> int:
        """The tokenizer's padding token id."""
        pad: int = self._tokenizer.pad_token_id
        return pad

    def take_metrics(self, mode: str) -> dict[str, float]:
        """The means of TRL's metrics gathered since the last call in ``mode`` (``"train"``, ``"eval"``), which are
        then cleared (one flexkit record per step instead of TRL's logging windows)."""
        out = {name: float(np.mean(values)) for name, values in self._metrics[mode].items() if len(values)}
        self._metrics[mode].clear()
        return out

    @contextlib.contextmanager
    def greedy(self) -> Iterator[None]:
        """Within: TRL's generation decodes greedily (the held-out evaluation)."""
        config, kwargs = self.generation_config, self.generation_kwargs
        greedy = {**kwargs, "do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
        self.generation_kwargs = greedy
        self.generation_config = type(config)(**greedy, disable_compile=True)
        try:
            yield
        finally:
            self.generation_config, self.generation_kwargs = config, kwargs


def _path_or_name(base: Path, value: str) -> str:
    """``value`` as a path under ``base`` when that exists (a local folder), else as it is (a Hub name)."""
    candidate = base / value
    return str(candidate) if candidate.exists() else value


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array on the CPU (bfloat16 and other types numpy lacks as float32)."""
    value = tensor.detach().to("cpu")
    if value.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        value = value.to(torch.float32)
    array: np.ndarray = value.numpy().copy()
    return array


def _tensor_tree(value: Any) -> Any:
    """``value`` (an optimizer's or schedule's state) with every tensor as a numpy array, for a checkpoint."""
    if isinstance(value, torch.Tensor):
        return _numpy(value)
    if isinstance(value, Mapping):
        return {str(k): _tensor_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tensor_tree(v) for v in value]
    return value


class TRLRunTrainer(Trainer):
    """The ``trl`` trainer of this module's docstring."""

    Config = TRLRunConfig
    #: ``[replay]``'s rows are weighed against their generating policy in TRL's clipped ratio (module docstring).
    supports_replay = True
    #: :meth:`validate` scores a validation split apart from the test set (``val_tasks_per_level`` or
    #: ``val_data``); without one it returns nothing, and a selector that needs it is refused at :meth:`setup`.
    supports_validation = True

    def __init__(self, config: TRLRunConfig, *, seed: int | np.random.SeedSequence = 0) -> None:
        super().__init__(config)
        self.config = config
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        child = np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, TORCH_SPAWN_KEY))
        self.torch_seed = int(child.generate_state(1)[0])
        self._grpo: GRPOStepper | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._eval_rows: list[dict[str, Any]] = []
        self._val_rows: list[dict[str, Any]] = []
        self._scored_val_rows: ValidationRows | None = None  # the latest validate's rows and their rewards
        #: With ``rows = "arithmetic"``: the operand width of the pools' own ``prompt`` texts (``None``: none).
        self._pool_text_width: int | None = None
        #: The column held-out rewards are pooled by (:meth:`_group_column`), set in :meth:`setup`.
        self._group_by = "level"
        self._fixed_widths = False
        self._old_log_probs = False
        #: The warm start's last loss (nan: none ran).
        self.warmup_loss = float("nan")

    # -- setup --------------------------------------------------------------------------------------------

    @property
    def grpo(self) -> GRPOStepper:
        """TRL's trainer (after :meth:`setup`)."""
        if self._grpo is None:
            raise FlexkitError("the trl trainer is used before setup(pipeline) built its model")
        return self._grpo

    def check_setup(self, pipeline: Any) -> None:
        """Read and check what :meth:`setup` trains and evaluates on, without building the model: the tasksets'
        operation (``rows = "arithmetic"``) or a first row's prompt and answer columns (``rows = "columns"``), the
        held-out rows (``eval_data``, ``val_data``) and the column they are grouped by, and a validation split for
        a guard. ``flexkit validate`` calls it; :meth:`setup` calls it first."""
        cfg = self.config
        base = Path(pipeline.base_dir)
        self._check_tasksets(pipeline)
        columns = guard_columns(pipeline, "the trl trainer")
        self._group_by = self._group_column(columns, pipeline.source)
        if pipeline.config.run.eval_every > 0:
            self._eval_rows = self._held_out(base)
            self._val_rows = self._validation(base)
            self._check_group_column(columns)
        needs = [n.key for n in pipeline_needs(pipeline) if n.part == "evaluation"]
        if needs and not self._val_rows:
            raise ConfigError([ConfigIssue(key, (
                "reads the validation split, and the trl trainer has none: set trainer.val_tasks_per_level above 0 "
                '(rows = "arithmetic") or trainer.val_data (rows = "columns"), or turn the guard off '
                '(guard_metric = "")'))
                for key in needs], pipeline.source)
        if cfg.rows == "columns":
            for entry in pipeline.scheduler.entries:
                first = entry.taskset.read([0])[0] if entry.size else {}
                trl_input(first, cfg, where=f"row 0 of taskset {entry.name!r}")
                if cfg.reward in BUILTIN_REWARDS and cfg.answer_column not in first:
                    raise ConfigError([ConfigIssue("trainer.answer_column", (
                        f"row 0 of taskset {entry.name!r} has no {cfg.answer_column!r} column for the {cfg.reward} "
                        f"reward (columns: {', '.join(map(repr, sorted(first)))}): set answer_column to the column "
                        "holding the answers"))], pipeline.source)

    def setup(self, pipeline: Any) -> None:
        """Check what it reads (:meth:`check_setup`), then load or build the model and tokenizer, the reward
        function, TRL's ``GRPOTrainer``, its optimizer and schedule."""
        from datasets import Dataset  # type: ignore[import-untyped]
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        cfg = self.config
        base = Path(pipeline.base_dir)
        self.check_setup(pipeline)
        if cfg.rows == "arithmetic":  # the arithmetic storage's own plugin, installed with that storage
            from flexkit_toyrl.arithmetic import text_pool_width

            self._pool_text_width = text_pool_width(pipeline)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        tokenizer_name = cfg.tokenizer if cfg.tokenizer is not None else cfg.model
        self.report_progress("load model", 0, 1)
        tokenizer = AutoTokenizer.from_pretrained(_path_or_name(base, tokenizer_name))
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.model_seed)
            if cfg.model_config is not None:
                settings = dict(cfg.model_config)
                model_type = settings.pop("model_type")
                settings.setdefault("vocab_size", len(tokenizer))
                settings.setdefault("pad_token_id", tokenizer.pad_token_id)
                settings.setdefault("eos_token_id", tokenizer.eos_token_id)
                settings.setdefault("bos_token_id", tokenizer.bos_token_id)
                model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                    AutoConfig.for_model(model_type, **settings))
            else:
                model = AutoModelForCausalLM.from_pretrained(_path_or_name(base, cfg.model))
        self.report_progress("load model", 1, 1)
        if cfg.warmup_steps:
            self.report_progress("warm start", 0, 1)
            self.warmup_loss = warm_start(model, tokenizer, cfg)
            self.report_progress("warm start", 1, 1)
        reward = load_reward(cfg.reward, cfg.answer_column, base)
        self._workdir = tempfile.TemporaryDirectory(prefix="flexkit-trl-")
        batch = pipeline.scheduler.batch_size * cfg.group_size
        args = GRPOConfig(
            output_dir=self._workdir.name, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
            steps_per_generation=1, num_iterations=1, num_generations=cfg.group_size,
            per_device_eval_batch_size=cfg.group_size, num_generations_eval=1,
            max_completion_length=cfg.max_completion_length, learning_rate=cfg.learning_rate,
            lr_scheduler_type=cfg.lr_scheduler, temperature=cfg.temperature, top_p=cfg.top_p, beta=cfg.beta,
            epsilon=cfg.epsilon, loss_type=cfg.loss_type, scale_rewards=cfg.scale_rewards,
            max_grad_norm=cfg.max_grad_norm, seed=self.torch_seed % 2**31, use_cpu=cfg.use_cpu, bf16=cfg.bf16,
            report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0,
            **cfg.grpo_args)
        self._grpo = GRPOStepper(model=model, reward_funcs=reward, args=args, processing_class=tokenizer,
                                 train_dataset=Dataset.from_dict({"prompt": [""]}))
        self.grpo.create_optimizer_and_scheduler(num_training_steps=pipeline.scheduler.total_steps)
        sample = pipeline.config.sample
        refill = sample is not None and sample.refill is not None
        self._old_log_probs = pipeline.config.replay is not None
        self._fixed_widths = self._old_log_probs or refill  # rows of other steps or rounds join the batch
        torch.manual_seed(self.torch_seed)  # the rollouts' stream (TRL's set_seed ran in its constructor)

    def _group_column(self, columns: list[GroupColumn], source: str | None) -> str:
        """The column held-out rewards are pooled by: ``eval_group_column`` when set (it must be the one a guard
        reads), else the selectors' grouping column (a guard's first), else ``"level"``."""
        cfg = self.config
        required = sorted({c.name for c in columns if c.required})
        if len(required) > 1:
            raise ConfigError([ConfigIssue("trainer.eval_group_column", (
                f"the selectors' guards read held-out accuracy per value of {len(required)} columns "
                f"({', '.join(map(repr, required))}) and the trl trainer pools held-out rows by one: group every "
                "guarded taskset by the same column"))], source)
        if cfg.eval_group_column is None:
            return required[0] if required else columns[0].name if columns else "level"
        if required and cfg.eval_group_column != required[0]:
            raise ConfigError([ConfigIssue("trainer.eval_group_column", (
                f"is {cfg.eval_group_column!r}, but the selector's guard reads val_accuracy/<value of "
                f"{required[0]!r}> (its feature_keys): set eval_group_column = {required[0]!r}, or leave it unset "
                "(it defaults to the selectors' grouping column)"))], source)
        return str(cfg.eval_group_column)

    def _check_group_column(self, columns: list[GroupColumn]) -> None:
        """Refuse validation rows without the column a guard reads, and an ``eval_group_column`` that no held-out
        file has (a grouping that would be dropped without a word)."""
        cfg, column = self.config, self._group_by
        if any(c.required and c.name == column for c in columns):
            lacking = [i for i, row in enumerate(self._val_rows) if row.get(column) is None]
            if lacking:
                key = "trainer.val_data" if cfg.rows == "columns" else "trainer.rows"
                raise ConfigError([ConfigIssue(key, (
                    f"{len(lacking)} of the {len(self._val_rows)} validation rows (the first: row {lacking[0]}) have "
                    f"no {column!r}, the column the selector's guard reads each group's validation accuracy by: add "
                    "it to every validation row"))])
        if cfg.eval_group_column is None:
            return
        for key, rows in (("trainer.eval_data", self._eval_rows), ("trainer.val_data", self._val_rows)):
            if rows and all(row.get(column) is None for row in rows):
                have = sorted({k for row in rows for k in row} - {"prompt"})
                raise ConfigError([ConfigIssue("trainer.eval_group_column", (
                    f"is {column!r}, and no row of {key} has it (their columns: {', '.join(map(repr, have))}): "
                    "name one of those, or leave eval_group_column unset"))])

    def _check_tasksets(self, pipeline: Any) -> None:
        """With ``rows = "arithmetic"``: the ``arithmetic`` tasksets' operation must be the trainer's."""
        cfg = self.config
        if cfg.rows != "arithmetic":
            return
        issues = []
        for i, taskset in enumerate(pipeline.config.tasksets):
            if taskset.storage.type == "arithmetic" and taskset.storage.config.operation != cfg.operation:
                issues.append(ConfigIssue(
                    f"tasksets[{i}]",
                    f'the taskset {taskset.name!r} generates operation = "{taskset.storage.config.operation}" problems '
                    f'but the trl trainer has operation = "{cfg.operation}": set the same operation in both'))
        if issues:
            raise ConfigError(issues, pipeline.source)

    def _held_out(self, base: Path) -> list[dict[str, Any]]:
        """The evaluation's TRL inputs (a ``ConfigError`` for ``rows = "columns"`` without ``eval_data``)."""
        cfg = self.config
        if cfg.rows == "arithmetic":
            rows = arithmetic_eval_rows(cfg)
        elif cfg.eval_data is None:
            raise ConfigError([ConfigIssue(
                "trainer.eval_data", "[run] eval_every evaluates the model, and the trl trainer reads held-out rows "
                "from eval_data (a JSON Lines file with the prompt and answer columns): set eval_data, or "
                "[run] eval_every = 0")])
        else:
            rows = read_eval_rows(base / cfg.eval_data)
        return [trl_input(row, cfg, where=f"held-out row {i}") for i, row in enumerate(rows)]

    def _validation(self, base: Path) -> list[dict[str, Any]]:
        """The validation split's TRL inputs: problems apart from the test set (arithmetic), or ``val_data``'s
        rows, none of whose prompts is a test prompt (a ``ConfigError`` naming ``trainer.val_data`` otherwise)."""
        cfg = self.config
        if cfg.rows == "arithmetic":  # apart from the test set, already read (self._eval_rows keep a and b)
            rows = arithmetic_val_rows(cfg, self._eval_rows) if cfg.val_tasks_per_level else []
        elif cfg.val_data is None:
            return []
        else:
            rows = read_eval_rows(base / cfg.val_data, key="trainer.val_data")
        out = [trl_input(row, cfg, where=f"validation row {i}") for i, row in enumerate(rows)]
        shared = {r["prompt"] for r in out} & {r["prompt"] for r in self._eval_rows}
        if shared:
            raise ConfigError([ConfigIssue("trainer.val_data", (
                f"{len(shared)} validation prompt(s) are also in eval_data, the test set (e.g. {sorted(shared)[0]!r}): "
                "the split that steers must be apart from the one that judges"))])
        return out

    # -- the step -------------------------------------------------------------------------------------------

    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """``group_size`` completions per task through TRL's generation and scoring (module docstring, 1.)."""
        cfg, grpo, g = self.config, self.grpo, self.config.group_size
        rows = [trl_input(t.data, cfg, where=f"task {t.index} of {t.taskset!r}") for t in tasks]
        keys = union_keys(rows)
        inputs = [{k: row.get(k) for k in keys} for row in rows for _ in range(g)]
        grpo.policy.train()
        grpo.state.global_step = step  # what reward functions see as trainer_state
        output = grpo._generate_and_score_completions(inputs)
        rewards = grpo.last_rewards
        assert rewards is not None
        prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        if "tool_mask" in output:
            completion_mask = completion_mask * output["tool_mask"]
        if prompt_ids.shape[1] > cfg.max_prompt_length:
            raise ConfigError([ConfigIssue("trainer.max_prompt_length",
                                           f"a prompt of step {step} has {prompt_ids.shape[1]} tokens, more than "
                                           f"max_prompt_length = {cfg.max_prompt_length}: raise it")])
        if self._fixed_widths:
            pad = grpo.pad_token_id
            prompt_ids = _pad(prompt_ids, cfg.max_prompt_length, pad, left=True)
            prompt_mask = _pad(prompt_mask, cfg.max_prompt_length, 0, left=True)
            completion_ids = _pad(completion_ids, cfg.max_completion_length, pad, left=False)
            completion_mask = _pad(completion_mask, cfg.max_completion_length, 0, left=False)
        mask = completion_mask.to(torch.float32).cpu()
        fields: dict[str, Any] = {
            "prompt_ids": prompt_ids.cpu(), "prompt_mask": prompt_mask.cpu(), "completion_ids": completion_ids.cpu(),
            "response_mask": mask,
            "token_level_scores": torch.nan_to_num(rewards.to(torch.float32).cpu(), nan=0.0),
            "trl_advantages": output["advantages"].to(torch.float32).cpu(),
            "uid": np.repeat(np.arange(len(tasks), dtype=np.int64), g),
            "taskset_id": np.repeat(np.asarray([t.taskset_id for t in tasks], dtype=np.int64), g),
            "index": np.repeat(np.asarray([t.index for t in tasks], dtype=np.int64), g),
        }
        if "ref_per_token_logps" in output:
            fields["ref_log_prob"] = _pad(output["ref_per_token_logps"], mask.shape[1], 0.0, left=False).cpu()
        if self._old_log_probs:
            fields["old_log_probs"] = self._log_probs(prompt_ids, prompt_mask, completion_ids, completion_mask)
        metrics = grpo.take_metrics("train")
        return Rollout(batch=RolloutBatch.from_dict(fields), metrics=metrics)

    def _log_probs(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                   completion_mask: torch.Tensor) -> torch.Tensor:
        """The current (generating) policy's per-token log-probabilities of the completions (TRL's)."""
        grpo = self.grpo
        with torch.no_grad():
            logps, _, _ = grpo._get_per_token_logps_and_entropies(
                grpo.policy, torch.cat([prompt_ids, completion_ids], dim=1),
                torch.cat([prompt_mask, completion_mask], dim=1), completion_ids.shape[1],
                batch_size=grpo.args.per_device_train_batch_size)
        result: torch.Tensor = logps.to(torch.float32).cpu()
        return result

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """TRL's group-relative advantages (of the rollout's rewards, ``scale_rewards``) on every completion
        token."""
        batch["advantages"] = batch["trl_advantages"][:, None] * batch["response_mask"]

    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One optimizer step on TRL's GRPO loss (module docstring, 3.; replayed rows: their ``old_log_probs``)."""
        grpo = self.grpo
        device = grpo.accelerator.device
        mask = batch["response_mask"]
        inputs: dict[str, Any] = {
            "prompt_ids": batch["prompt_ids"].to(device), "prompt_mask": batch["prompt_mask"].to(device),
            "completion_ids": batch["completion_ids"].to(device),
            "completion_mask": (mask > 0).to(torch.long).to(device),
            "advantages": batch["advantages"].to(device),
            "num_items_in_batch": mask.sum().to(device),
        }
        if "old_log_probs" in batch:
            inputs["old_per_token_logps"] = batch["old_log_probs"].to(device)
        if "ref_log_prob" in batch:
            inputs["ref_per_token_logps"] = batch["ref_log_prob"].to(device)
        if weights is not None:
            weighted_inputs(inputs, weights)
        model, optimizer, schedule = grpo.policy, grpo.adamw, grpo.schedule
        model.train()
        with grpo.compute_loss_context_manager():
            loss = grpo.compute_loss(model, inputs)
        grpo.accelerator.backward(loss)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grpo.args.max_grad_norm)
        if not (torch.isfinite(loss) and torch.isfinite(norm)):
            raise FlexkitError(f"trl: step {step}: the loss ({float(loss):g}) or gradient norm ({float(norm):g}) is "
                               "not finite: the policy diverged; lower learning_rate")
        rate = float(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        grpo.state.global_step = step + 1
        return {**grpo.take_metrics("train"), "loss": float(loss.detach()), "grad_norm": float(norm),
                "learning_rate": rate}

    # -- evaluation ------------------------------------------------------------------------------------------

    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Greedy completions of the held-out prompts (the test split), scored by the reward function:
        ``eval_accuracy`` (mean reward) and ``eval_accuracy/<group>`` per value of the grouping column
        (``eval_group_column``)."""
        if not self._eval_rows:
            raise ConfigError([ConfigIssue("trainer.eval_data", "the trl trainer evaluates only with [run] "
                                                                "eval_every above 0")])
        return self._score(self._eval_rows, "eval_accuracy")

    def validate(self, *, step: int) -> Mapping[str, float]:
        """The same on the validation split: ``val_accuracy`` and ``val_accuracy/<group>`` (nothing without one)."""
        return self._score(self._val_rows, "val_accuracy") if self._val_rows else {}

    def validation_rows(self) -> ValidationRows | None:
        """The validation rows the latest :meth:`validate` scored, each with its greedy completion's reward clipped
        into [0, 1] (as the selectors' feedback is); ``None`` before the first validation, or without a validation
        split. With ``rows = "columns"`` every column of ``val_data``'s rows, as the pool's rows hold them. With
        ``rows = "arithmetic"`` the storage's columns (``a``, ``b``, ``level``), without TRL's spaced ``prompt``;
        where the pools hold their own ``prompt`` text (``label = "none"``, one width), that text as they write
        it, for the problems such a pool could hold."""
        return self._scored_val_rows

    def _as_validation_rows(self, rows: list[dict[str, Any]], scores: np.ndarray) -> ValidationRows:
        """``rows`` (TRL inputs) and their ``scores`` as :meth:`validation_rows` gives them."""
        cfg = self.config
        if cfg.rows != "arithmetic":
            return ValidationRows({key: [row.get(key) for row in rows] for key in union_keys(rows)}, scores)
        from flexkit_toyrl.arithmetic import validation_prompts

        levels, a, b = (np.array([row[key] for row in rows], dtype=np.int64) for key in ("level", "a", "b"))
        given = np.ones(len(rows), dtype=bool)
        columns: dict[str, list[Any]] = {}
        if self._pool_text_width is not None:
            given, columns["prompt"] = validation_prompts(levels, a, b, cfg.operation, self._pool_text_width, 10)
        columns.update({"level": levels[given].tolist(), "a": a[given].tolist(), "b": b[given].tolist()})
        return ValidationRows(columns, scores[given])

    def _score(self, held_out: list[dict[str, Any]], name: str) -> dict[str, float]:
        """Mean reward of greedy completions of ``held_out``, overall (``name``) and per group (``name/<group>``)."""
        cfg, grpo = self.config, self.grpo
        grpo.policy.eval()
        rewards: list[float] = []
        with grpo.greedy():
            for start in range(0, len(held_out), cfg.eval_batch_size):
                rows = held_out[start:start + cfg.eval_batch_size]
                keys = union_keys(rows)
                inputs = [{k: row.get(k) for k in keys} for row in rows]
                prompts = [row["prompt"] for row in inputs]
                _, completion_ids, _, completions, *_ = grpo._generate(prompts)
                grpo._calculate_rewards(inputs, prompts, completions, completion_ids)
                assert grpo.last_rewards is not None
                rewards.extend(torch.nan_to_num(grpo.last_rewards, nan=0.0).cpu().tolist())
        grpo.take_metrics("eval")
        grpo.policy.train()
        values = np.asarray(rewards, dtype=np.float64)
        if held_out is self._val_rows:
            self._scored_val_rows = self._as_validation_rows(held_out, np.clip(values, 0.0, 1.0))
        out = {name: float(values.mean())}
        groups: dict[str, list[float]] = {}
        for row, value in zip(held_out, rewards, strict=True):
            if row.get(self._group_by) is not None:
                groups.setdefault(group_label(row[self._group_by]), []).append(value)
        for label in sorted(groups, key=_group_order):
            out[f"{name}/{label}"] = float(np.mean(groups[label]))
        return out

    # -- state ------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Weights, optimizer, schedule, torch's random state (CPU, and CUDA when present) and TRL's counters; before
        :meth:`setup` (nothing built yet) an empty state."""
        if self._grpo is None:
            return {}
        grpo = self.grpo
        state: dict[str, Any] = {
            "model": {k: _numpy(v) for k, v in grpo.policy.state_dict().items()},
            "optimizer": _tensor_tree(grpo.adamw.state_dict()),
            "schedule": _tensor_tree(grpo.schedule.state_dict()),
            "rng": _numpy(torch.get_rng_state()),
            "tokens_seen": int(grpo.state.num_input_tokens_seen),
        }
        if torch.cuda.is_available():
            state["cuda_rng"] = [_numpy(s) for s in torch.cuda.get_rng_state_all()]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (after :meth:`setup`; before it only the empty state of a trainer not
        yet set up)."""
        if self._grpo is None and not state:
            return
        grpo = self.grpo
        weights = {k: torch.from_numpy(np.array(v)) for k, v in state["model"].items()}
        grpo.policy.load_state_dict(weights)
        opt = state["optimizer"]
        grpo.adamw.load_state_dict({
            "state": {int(k): {n: torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v
                               for n, v in s.items()} for k, s in opt["state"].items()},
            "param_groups": [dict(group) for group in opt["param_groups"]],
        })
        grpo.schedule.load_state_dict(dict(state["schedule"]))
        torch.set_rng_state(torch.from_numpy(np.array(state["rng"], dtype=np.uint8)))
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.from_numpy(np.array(s, dtype=np.uint8)) for s in state["cuda_rng"]])
        grpo.state.num_input_tokens_seen = int(state["tokens_seen"])


def _pad(tensor: torch.Tensor, width: int, value: float, *, left: bool) -> torch.Tensor:
    """``tensor`` (B, T) padded on the left or the right to ``width`` columns with ``value``."""
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    return torch.nn.functional.pad(tensor, (missing, 0) if left else (0, missing), value=value)


def _group_order(label: str) -> tuple[int, float, str]:
    """Numeric group labels in numeric order, then the others alphabetically."""
    try:
        number = float(label)
    except ValueError:
        return (1, 0.0, label)
    return (0, number if math.isfinite(number) else 0.0, label)
