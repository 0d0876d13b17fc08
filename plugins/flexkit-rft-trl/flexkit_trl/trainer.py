"""``FlexkitGRPOTrainer``: TRL's ``GRPOTrainer`` drawing prompts from a flexkit pipeline.

TRL's ``RepeatSampler`` guarantees the grouping GRPO needs: each prompt ``num_generations`` times in a row (so a
prompt's completions form one group, across processes too), and each generation batch of
``generation_batch_size // num_generations`` prompts repeated ``num_iterations × steps_per_generation`` times
(the buffered generations are reused for those steps). :func:`repeat_sampler` builds a flexkit sampler with
exactly that layout, each generation batch being one batch of the pipeline's scheduler, so the pipeline's
``batch_size`` must be ``generation_batch_size // num_generations``.

After each generation batch is scored, ``_calculate_rewards`` (which gathers rewards from all processes) feeds
the weighted reward sum of every completion back with its prompt's dataset index; every process gets the same
feedback, so every process's pipeline copy stays identical. Rewards should lie in [0, 1] (pass/fail): the
selectors clip feedback into that range.

accelerate's loader fetches one loader batch ahead: with ``num_iterations × steps_per_generation ≥ 2`` that is a
repeat of the current generation batch, so the next one is selected after this one's feedback; with 1, feedback
reaches the batch after next.

The pipeline's ``[sample]`` stage runs on each training generation batch and its keep / weights enter GRPO's loss
(:mod:`flexkit_trl.sample`); with ``[replay]`` each generation batch also trains on the informative groups of the
last ``max_age`` ones, weighed against the policy that generated them (:mod:`flexkit_trl.replay`). Each evaluation's
logs (``eval_reward``, ...) reach the selectors (:meth:`~flexkit.Pipeline.evaluation`), with each group's held-out
accuracy ``eval_accuracy/<group>`` computed from the evaluation's rewards (:mod:`flexkit_trl.groups`) for a
``frontier`` guard; every process logs the same gathered values, so the copies stay identical. Every checkpoint
holds the curriculum's state, and ``resume_from_checkpoint`` continues it exactly (:mod:`flexkit_trl.resume`).

At construction the ``GRPOConfig`` is checked against the pipeline (:mod:`flexkit_trl.checks`): a run longer than
the pipeline's, a ``batch_size`` other than the prompts per generation batch, ``save_steps`` between generations,
``[sample.refill]``, ``[replay]`` on more than one process and a guard the evaluation cannot feed are refused.
flexkit's metrics (:func:`flexkit.pipeline_metrics`, ``flexkit/...``) are added to every ``log`` call during
training, so they reach the trackers in ``report_to``.
"""

from __future__ import annotations

import inspect
import os
from enum import Enum
from typing import Any, cast

import numpy as np
import torch
from accelerate.utils import gather_object  # type: ignore[import-untyped]
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer  # type: ignore[attr-defined]
from trl.models.utils import disable_gradient_checkpointing

from flexkit import FlexkitSampler, Mix, Pipeline, TasksetScheduler, pipeline_metrics
from flexkit.host import (
    REPLAY_KEY,
    SAMPLER_SUPPORT,
    HostSupport,
    check_rows_line_up,
    check_support,
    text_columns,
)
from flexkit_trl.checks import check_batch_size, check_evaluations, check_run_length, check_sample_stage
from flexkit_trl.dataset import INDEX_COLUMN, check_prompt_columns, with_index_column
from flexkit_trl.groups import EvalGroups, check_eval_columns, group_columns
from flexkit_trl.replay import OLD_LOGPS, GenerationReplay
from flexkit_trl.resume import TrackedSampler, check_save_alignment, load_state, save_state
from flexkit_trl.sample import stage_batch, weighted_inputs
from flexkit_trl.support import trainer_support

#: TRL's prefix of an evaluation of ``eval_dataset``, the validation split (``metric_key_prefix``'s default).
EVAL_PREFIX = "eval_"
#: The prefix the selectors read the validation split under (``guard_metric = "val_accuracy/{}"``).
VAL_PREFIX = "val_"


def repeat_sampler(
    source: Pipeline | TasksetScheduler,
    dataset: Any,
    *,
    num_generations: int,
    generation_batch_size: int,
    num_iterations: int = 1,
    steps_per_generation: int = 1,
    sampler_class: type[FlexkitSampler] = FlexkitSampler,
    host: HostSupport | None = SAMPLER_SUPPORT,
) -> FlexkitSampler:
    """A :class:`FlexkitSampler` (or ``sampler_class``) with ``RepeatSampler``'s layout for these GRPO settings
    (checked against the pipeline's ``batch_size``); ``host`` is the sampler's (what the loop driving it honours:
    :class:`FlexkitGRPOTrainer` passes its own support, your loop what it gives)."""
    prompts = generation_batch_size // num_generations
    scheduler = source.scheduler if isinstance(source, Pipeline) else source
    if prompts * num_generations != generation_batch_size or scheduler.batch_size != prompts:
        raise ValueError(
            f"the pipeline's batch_size ({scheduler.batch_size}) must be the prompts per generation batch: "
            f"generation_batch_size ({generation_batch_size}) // num_generations ({num_generations}) = {prompts}"
        )
    return sampler_class(source, dataset, mini_repeat_count=num_generations,
                         repeat_count=num_iterations * steps_per_generation, host=host)


class FlexkitGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer(..., pipeline=pipe)``: the training prompts come from ``pipe`` (a flexkit
    :class:`~flexkit.Pipeline` or scheduler whose tasksets lay out ``train_dataset``), and rewards flow back.

    ``train_dataset`` gets an :data:`~flexkit_trl.INDEX_COLUMN` column (reward functions receive it as a keyword
    argument; ``**kwargs`` absorbs it). The sampler is :attr:`flexkit_sampler`.

    Raises :class:`~flexkit.ConfigError` for a pipeline ``batch_size`` other than the prompts per generation batch,
    for a ``GRPOConfig`` that needs more generation batches than the pipeline's run holds or saves between
    generations, for ``[sample.refill]``, for ``[replay]`` on more than one process, and for a per-group
    ``guard_metric`` the evaluation cannot feed (see :mod:`flexkit_trl.checks`, :mod:`flexkit_trl.groups`,
    :mod:`flexkit_trl.resume`).
    """

    def __init__(self, *args: Any, pipeline: Pipeline | TasksetScheduler, **kwargs: Any) -> None:
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs)
        if bound.arguments.get("train_dataset") is None:
            raise ValueError("FlexkitGRPOTrainer needs a train_dataset laid out like the pipeline's tasksets")
        check_sample_stage(pipeline)
        check_prompt_columns(bound.arguments["train_dataset"], bound.arguments.get("eval_dataset"))
        check_rows_line_up(bound.arguments["train_dataset"], pipeline.scheduler if isinstance(pipeline, Pipeline)
                           else pipeline)
        columns = group_columns(pipeline)
        if bound.arguments.get("eval_dataset") is not None:
            check_eval_columns(columns, bound.arguments["eval_dataset"])
        # what this trainer does not honour (a bare scheduler's guard too), refused before the model is set up
        config = bound.arguments.get("args")  # TRL's default GRPOConfig evaluates never (eval_strategy "no")
        chosen = config.eval_strategy if config is not None else "no"
        strategy = str(chosen.value if isinstance(chosen, Enum) else chosen)
        self._flexkit_support = trainer_support(bound.arguments.get("eval_dataset"), eval_strategy=strategy)
        check_support(pipeline, self._flexkit_support)
        bound.arguments["train_dataset"] = with_index_column(bound.arguments["train_dataset"])
        self.flexkit_pipeline = pipeline
        #: The evaluation's rewards per group of the selectors' grouping columns (``eval_accuracy/<group>``).
        self.flexkit_eval_groups = EvalGroups(columns, text_columns(pipeline))
        self.flexkit_sampler: TrackedSampler | None = None
        self._flexkit_feedback: dict[str, Any] | None = None
        self._flexkit_rollouts: int | None = None
        #: Completions generated for training so far, every process's (``flexkit/run/rollouts``; checkpointed).
        self._flexkit_run_rollouts = 0
        #: The latest training generation batch's rewards (weighted sums, NaN: unscored) and dataset indices, from
        #: every process.
        self._flexkit_scored: tuple[torch.Tensor, np.ndarray] | None = None
        #: Training generation batches scored so far (the sample stage's and the replay buffer's step).
        self._flexkit_generations = 0
        #: The ``[replay]`` buffer (:mod:`flexkit_trl.replay`), with a pipeline that has one.
        self.flexkit_replay: GenerationReplay | None = None
        super().__init__(*bound.args[1:], **bound.kwargs)
        scheduler = pipeline.scheduler if isinstance(pipeline, Pipeline) else pipeline
        check_batch_size(self._grpo_args, cast(int, self.num_generations), scheduler)
        check_run_length(self.args, scheduler)
        if self._flexkit_support.evaluation:
            check_evaluations(self.args, strategy, pipeline)
        check_save_alignment(self.args, self._generate_every)
        # the number of processes is known once TRL built its accelerator: replay is refused on more than one
        self._flexkit_support = trainer_support(bound.arguments.get("eval_dataset"), self.accelerator.num_processes,
                                                eval_strategy=strategy)
        check_support(pipeline, self._flexkit_support)
        replay = pipeline.config.replay if isinstance(pipeline, Pipeline) else None
        if replay is not None:
            self.flexkit_replay = GenerationReplay(replay.groups, replay.max_age,
                                                   num_generations=cast(int, self.num_generations),
                                                   steps_per_generation=int(self._grpo_args.steps_per_generation))

    @property
    def _grpo_args(self) -> Any:
        """``self.args``, a ``GRPOConfig`` (typed as the HF Trainer's ``TrainingArguments``)."""
        return self.args

    @property
    def _generate_every(self) -> int:
        """Micro-steps per generation batch: ``steps_per_generation × num_iterations``."""
        return int(self._grpo_args.steps_per_generation) * int(self.num_iterations)

    def _get_train_sampler(self, dataset: Any = None) -> TrackedSampler:
        """The flexkit sampler in ``RepeatSampler``'s layout (built once, then reused)."""
        if self.flexkit_sampler is None:
            args = self._grpo_args
            sampler = repeat_sampler(
                self.flexkit_pipeline, dataset if dataset is not None else self.train_dataset,
                num_generations=cast(int, self.num_generations), generation_batch_size=args.generation_batch_size,
                num_iterations=self.num_iterations, steps_per_generation=args.steps_per_generation,
                sampler_class=TrackedSampler, host=self._flexkit_support)
            assert isinstance(sampler, TrackedSampler)
            self.flexkit_sampler = sampler
        return self.flexkit_sampler

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        """TRL's inputs; while training, the loader batch counts as consumed by the sampler (what a checkpoint
        must not replay, :mod:`flexkit_trl.resume`)."""
        if self.flexkit_sampler is not None and self.model is not None and self.model.training:
            self.flexkit_sampler.consume(len(generation_batch) * self.accelerator.num_processes)
        return super()._prepare_inputs(generation_batch)

    def _flexkit_extra_state(self) -> dict[str, Any]:
        """Adapter state saved beside the pipeline's in every checkpoint: the generation batches scored so far, the
        completions generated for them and the ``[replay]`` buffer."""
        extra: dict[str, Any] = {"generations": self._flexkit_generations, "rollouts": self._flexkit_run_rollouts}
        if self.flexkit_replay is not None:
            extra[REPLAY_KEY] = self.flexkit_replay.state_dict()
        return extra

    def _load_flexkit_extra_state(self, extra: dict[str, Any]) -> None:
        """Restore :meth:`_flexkit_extra_state`'s output (a checkpoint saved before the completions were counted:
        one generation batch of completions per generation)."""
        self._flexkit_generations = int(extra.get("generations", 0))
        generated = self._flexkit_generations * int(self._grpo_args.generation_batch_size)
        self._flexkit_run_rollouts = int(extra.get("rollouts", generated))
        if self.flexkit_replay is not None:
            self.flexkit_replay.load_state_dict(extra.get(REPLAY_KEY))

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint, then the curriculum's state in the same folder (:func:`flexkit_trl.resume.save_state`):
        the pipeline as of the last trained batch, the sampler's position, the adapter's own state."""
        super()._save_checkpoint(model, trial)  # type: ignore[no-untyped-call]
        if self.flexkit_sampler is None or not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        save_state(self.flexkit_pipeline, self.flexkit_sampler, folder, extra=self._flexkit_extra_state(),
                   mid_generation=self._step % self._generate_every != 0)

    def _init_training_state(self, max_steps: int, num_update_steps_per_epoch: int, num_train_epochs: int,
                             resume_from_checkpoint: str | None, trial: Any) -> tuple[int, int]:
        """The Trainer's state (restored on resume), then on resume the curriculum's
        (:func:`flexkit_trl.resume.load_state`), with the sampler yielding filler for the batches the Trainer is
        about to skip, so that its fast-forward does not advance the restored scheduler a second time."""
        epochs, skipped_batches = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial)
        if resume_from_checkpoint is not None and self.flexkit_sampler is not None:
            extra = load_state(self.flexkit_pipeline, self.flexkit_sampler, resume_from_checkpoint,
                               skipped=int(skipped_batches) * int(self._grpo_args.generation_batch_size))
            self._load_flexkit_extra_state(extra)
        return int(epochs), int(skipped_batches)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> torch.Tensor:
        """TRL's rewards, then feedback while training: each completion's weighted reward sum with its prompt's
        dataset index (completions whose reward functions all returned None are left out). An evaluation's
        rewards are not feedback: they are on held-out prompts."""
        rewards_per_func: torch.Tensor = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.flexkit_sampler is not None and self.model is not None and self.model.training:
            indices = np.asarray(gather_object([int(row[INDEX_COLUMN]) for row in inputs]), dtype=np.int64)
            scored = ~torch.isnan(rewards_per_func).all(dim=1)
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
            rewards = (rewards_per_func * weights).nansum(dim=1)
            keep = scored.cpu().numpy()
            values = rewards[scored].double().cpu().numpy()
            self._flexkit_feedback = self.flexkit_sampler.feedback(indices[keep], values)
            self._flexkit_rollouts = len(indices)
            self._flexkit_run_rollouts += len(indices)
            self._flexkit_scored = (self._weighted_rewards(rewards_per_func), indices)
        elif self.model is not None and not self.model.training and self.flexkit_eval_groups.reads:
            names = self.flexkit_eval_groups.reads
            rows = gather_object([{n: row[n] for n in names if n in row} for row in inputs])
            self.flexkit_eval_groups.add(rows, self._weighted_rewards(rewards_per_func).tolist())
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's generation and scoring; while training, then the pipeline's ``[sample]`` stage on the whole
        generation batch, its weights multiplied into the loss (:mod:`flexkit_trl.sample`), and ``[replay]``'s
        stored groups appended (:mod:`flexkit_trl.replay`)."""
        output: dict[str, Any] = super()._generate_and_score_completions(inputs)
        training = self.model is not None and self.model.training
        if training and self._flexkit_scored is not None:
            if self.flexkit_replay is not None:
                self._add_behaviour_log_probs(output)
            if isinstance(self.flexkit_pipeline, Pipeline) and self.flexkit_pipeline.has_sample_stage:
                self._apply_sample_stage(output, *self._flexkit_scored)
            if self.flexkit_replay is not None:
                output = self.flexkit_replay.train_inputs(output, step=self._flexkit_generations)
            self._flexkit_generations += 1
        self._flexkit_scored = None
        return output

    def _add_behaviour_log_probs(self, output: dict[str, Any]) -> None:
        """``old_per_token_logps`` of the generation batch, when TRL skipped them (generation and optimisation
        aligned): the policy that generated the completions, computed as TRL computes them otherwise, with one
        forward pass without gradient."""
        if output.get(OLD_LOGPS) is not None:
            return
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        model: Any = self.model
        with torch.no_grad(), disable_gradient_checkpointing(model, cast(Any, self.args).gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, mask, output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size)
        output[OLD_LOGPS] = logps

    def _gathered(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (this process's rows) from every process, padded to the widest (completion widths differ)."""
        if tensor.dim() > 1:
            tensor = self.accelerator.pad_across_processes(tensor, dim=1)
        gathered: torch.Tensor = self.accelerator.gather(tensor)
        return gathered

    def _apply_sample_stage(self, output: dict[str, Any], rewards: torch.Tensor, indices: np.ndarray) -> None:
        """Run the stage on the generation batch and weight this process's rows of ``output`` in place."""
        assert isinstance(self.flexkit_pipeline, Pipeline) and self.flexkit_sampler is not None
        mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            mask = mask * output["tool_mask"]
        old = output.get("old_per_token_logps")
        taskset_ids, local = self.flexkit_sampler.locate(indices)
        batch = stage_batch(rewards=rewards, advantages=self._gathered(output["advantages"]),
                            response_mask=self._gathered(mask), num_generations=cast(int, self.num_generations),
                            taskset_ids=taskset_ids, indices=local,
                            old_log_probs=self._gathered(old) if old is not None else None)
        step = self._flexkit_generations
        action = self.flexkit_pipeline.apply_sample_stage(batch, step=step)
        if isinstance(action, Mix):
            return
        weights = self.flexkit_pipeline.sample_stage.token_weights(batch, step=step)
        rows, width = mask.shape
        start = self.accelerator.process_index * rows
        weighted_inputs(output, weights[start:start + rows, :width])

    def _weighted_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Each completion's weighted reward sum (NaN where every reward function returned None)."""
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return rewards

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's evaluation, with each group's held-out accuracy added to its metrics: the mean reward of the
        evaluated completions whose prompts have that value in a selector's grouping column, as
        ``eval_accuracy/<group>`` (and ``eval_accuracy`` over all of them; ``eval`` is the evaluation's
        ``metric_key_prefix``), which the selectors receive as ``val_accuracy/<group>``: ``eval_dataset`` is the
        validation split (``guard_metric = "val_accuracy/{}"``). For a prompt model (``frontier``'s ``text_key``),
        an evaluation of one ``eval_dataset`` (prefix ``eval``; not each of a mapping of several, whose numbers would
        share one name) also adds how well it predicts the evaluated rows' rewards
        (``flexkit/selector/<taskset>/val_predicted/<group>``, ``.../val_observed/<group>``,
        :meth:`~flexkit.Pipeline.validation_calibration`)."""
        bound = inspect.signature(super().evaluation_loop).bind(*args, **kwargs)
        prefix = bound.arguments.get("metric_key_prefix", "eval")
        self.flexkit_eval_groups.reset()
        output = super().evaluation_loop(*args, **kwargs)
        if output.metrics is not None:
            output.metrics.update(self.flexkit_eval_groups.metrics(prefix))
            rows = self.flexkit_eval_groups.validation_rows() if prefix == "eval" else None
            if rows is not None:  # the one validation split: how well the prompt models predict its rows
                output.metrics.update({f"flexkit/selector/{name}/{key}": value for name, found in
                                       self.flexkit_pipeline.validation_calibration(rows).items()
                                       for key, value in found.items()})
        self.flexkit_eval_groups.reset()
        return output

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """TRL's ``log``, with flexkit's ``flexkit/...`` metrics (:func:`~flexkit.pipeline_metrics`:
        the latest generation batch's fed-back pass rates and completions, the selectors' summaries) added while
        training. ``eval_dataset`` is the validation split: an evaluation's ``eval_...`` logs (``eval_reward``,
        ``eval_accuracy/<group>``, ``eval_loss``, ...) go to the selectors (:meth:`~flexkit.Pipeline.evaluation`) as
        ``val_...`` (a ``frontier`` guard reads ``val_accuracy/<group>``); an evaluation of a test set
        (``evaluate(test_dataset, metric_key_prefix="test")``) judges and never reaches them."""
        training = self.model is not None and self.model.training
        if training and self.flexkit_sampler is not None:
            replay = self.flexkit_replay.buffer if self.flexkit_replay is not None else None
            logs = {**logs, **pipeline_metrics(self.flexkit_pipeline, feedback=self._flexkit_feedback,
                                               rollouts=self._flexkit_rollouts, replay=replay,
                                               run_rollouts=self._flexkit_run_rollouts)}
        super().log(logs, *args, **kwargs)
        if training:
            return
        validation = {VAL_PREFIX + key.removeprefix(EVAL_PREFIX): value for key, value in logs.items()
                      if key.startswith(EVAL_PREFIX)}
        if validation:  # eval_dataset is the validation split; a "test_" evaluation never steers
            self.flexkit_pipeline.evaluation(validation)
