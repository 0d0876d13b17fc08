"""``FlexkitTrainerMixin``: flexkit in verl's legacy ``RayPPOTrainer`` (``trainer.use_v1=false``, verl 0.9.x).

verl calls ``self._update_actor(batch)`` once per step with the finished batch (rewards, ``uid``, advantages,
verl's own ``rollout_is_weights``); the mixin feeds the rewards back and weights the tokens there::

    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    trainer = Trainer(config, ..., train_dataset=IndexedDataset(ds), train_sampler=FlexkitSampler(pipe, ds))

It also checks the verl config against the pipeline when verl builds the dataloader
(:func:`~flexkit_verl.checks.check_trainer_config`), restores the sampler from ``data.pt`` after verl's
``_load_checkpoint`` (which skips that file at epoch boundaries), and adds ``flexkit/...`` metrics to the actor
update's metrics, which verl logs with the step. Steps in critic warm-up (no actor update) give no feedback.
With ``[replay]`` each actor update also trains on the stored groups of earlier steps (:mod:`flexkit_verl.replay`),
and the buffer is saved with verl's checkpoint (``global_step_<N>/flexkit_replay.pt``) and restored on resume.
Each validation's metrics reach the selectors (:meth:`~flexkit.Pipeline.evaluation`): verl's own
(``val-core/<data_source>/...``) and, as the v1 adapter and ``flexkit run`` report them, ``val_accuracy`` and
``val_accuracy/<group>`` per value of the grouping column (:mod:`flexkit_verl.legacy_validation`), which the
quickstart's ``frontier`` guard (``guard_metric = "val_accuracy/{}"``) reads.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Protocol, runtime_checkable

from flexkit import Pipeline, TasksetScheduler, pipeline_metrics
from flexkit.host import pipeline_needs, unmet_needs
from flexkit_verl.checks import check_trainer_config
from flexkit_verl.groups import ValidationGroups, dataset_columns, validation_columns
from flexkit_verl.keys import config_get
from flexkit_verl.legacy_validation import LegacyValidation
from flexkit_verl.replay import VerlReplay
from flexkit_verl.replay_checks import replay_issues
from flexkit_verl.resume import loader_sampler, restore_after_load, save_with_replay
from flexkit_verl.sampler import FlexkitSampler
from flexkit_verl.support import LEGACY_SUPPORT
from flexkit_verl.weights import apply_token_weights


@runtime_checkable
class _HasMetaInfo(Protocol):
    """An actor update's output, as far as the mixin reads it: verl's ``DataProto`` (``meta_info["metrics"]``)."""

    meta_info: Any


class FlexkitTrainerMixin:
    """Before each actor update: :meth:`FlexkitSampler.update` with the batch, then
    :func:`~flexkit_verl.apply_token_weights` when the pipeline has a ``[sample]`` table.

    The pipeline is the training sampler's; set ``flexkit_pipeline`` to use another (e.g. a sample stage
    without a flexkit sampler).
    """

    flexkit_pipeline: Pipeline | None = None
    #: The ``[replay]`` buffer (:mod:`flexkit_verl.replay`), built with the dataloader when the pipeline has one.
    flexkit_replay: VerlReplay | None = None
    #: Each validation's ``val_accuracy`` and ``val_accuracy/<group>``
    #: (:class:`~flexkit_verl.legacy_validation.LegacyValidation`), built with the dataloader.
    flexkit_validation: LegacyValidation | None = None
    #: verl's attributes, which ``RayPPOTrainer`` sets as it goes (``processor`` before the dataloaders, for a
    #: multimodal model; ``train_dataloader`` when it builds them; ``global_steps`` in ``fit`` and on resume): their
    #: values before then.
    processor: Any = None
    train_dataloader: Any = None
    val_dataset: Any = None
    global_steps: int = 0

    def _flexkit_sampler(self) -> FlexkitSampler | None:
        return loader_sampler(self.train_dataloader)

    def _flexkit_source(self, sampler: FlexkitSampler | None) -> Pipeline | TasksetScheduler | None:
        """What takes evaluations and reports metrics: ``flexkit_pipeline``, else the sampler's pipeline, else its
        scheduler (a sampler over a bare scheduler)."""
        pipeline = self.flexkit_pipeline or (sampler.pipeline if sampler is not None else None)
        return pipeline if pipeline is not None else (sampler.scheduler if sampler is not None else None)

    def _create_dataloader(self, *args: Any, **kwargs: Any) -> Any:
        """verl's dataloaders, then :func:`~flexkit_verl.checks.check_trainer_config` (``ConfigError``)."""
        result = super()._create_dataloader(*args, **kwargs)  # type: ignore[misc]
        sampler = self._flexkit_sampler()
        pipeline = sampler.pipeline if sampler is not None else self.flexkit_pipeline
        val_columns = dataset_columns(self.val_dataset)
        if pipeline is not None:
            steps = len(self.train_dataloader) if sampler is not None else None
            config = self.config  # type: ignore[attr-defined]
            multimodal = self.processor is not None
            if sampler is None:  # a sample stage alone: only the loss modes and replay matter
                from flexkit_verl.checks import loss_mode_issues

                issues = loss_mode_issues(config, pipeline, v1=False)
                issues += unmet_needs(pipeline_needs(pipeline), LEGACY_SUPPORT)  # what this trainer does not honour
                issues += replay_issues(config, pipeline, multimodal=multimodal)
                if issues:
                    from flexkit import ConfigError

                    raise ConfigError(issues, source="verl config vs flexkit pipeline")
            else:
                check_trainer_config(config, pipeline, steps_per_epoch=steps, v1=False, multimodal=multimodal,
                                     val_columns=val_columns)
            replay = pipeline.config.replay
            if replay is not None:
                self.flexkit_replay = VerlReplay(replay.groups, replay.max_age, mini_batch=int(
                    config_get(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 1)))
        source = self._flexkit_source(sampler)
        if source is not None:
            self.flexkit_validation = LegacyValidation(ValidationGroups(validation_columns(source, val_columns)))
        if sampler is not None:  # this trainer drives the sampler (checked above; a bare scheduler's guard here)
            sampler.declare_host(LEGACY_SUPPORT)
        return result

    def _save_checkpoint(self) -> Any:
        """verl's checkpoint with the ``[replay]`` buffer in its folder
        (:func:`~flexkit_verl.resume.save_with_replay`)."""
        save = super()._save_checkpoint  # type: ignore[misc]
        config = self.config  # type: ignore[attr-defined]
        return save_with_replay(save, self.flexkit_replay, config, self.global_steps)

    def _load_checkpoint(self) -> Any:
        """verl's checkpoint load, then the flexkit sampler from ``data.pt`` even where verl skipped it, and the
        ``[replay]`` buffer."""
        result = super()._load_checkpoint()  # type: ignore[misc]
        config = self.config  # type: ignore[attr-defined]
        restore_after_load(self.train_dataloader, self.flexkit_replay, config, self.global_steps)
        return result

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """verl's validation plus ``val_accuracy`` and ``val_accuracy/<group>`` from its rewards
        (:attr:`flexkit_validation`), all handed to the selectors (:meth:`~flexkit.Pipeline.evaluation`) and
        returned for verl to log; a ``merged=True`` call returns raw results to merge, not metrics, and is passed
        through alone."""
        validation = self.flexkit_validation
        if validation is not None:
            validation.start()
        try:
            result = super()._validate(*args, **kwargs)  # type: ignore[misc]
        finally:
            groups = validation.finish() if validation is not None else {}
        merged = kwargs.get("merged", args[0] if args else False)
        source = self._flexkit_source(self._flexkit_sampler())
        if source is not None and not merged and isinstance(result, dict):
            result = {**result, **groups}
            source.evaluation(result)
        return result

    def _get_gen_batch(self, batch: Any) -> Any:
        """verl's generation batch; during a validation, each row's prompt and grouping columns noted first (verl
        pops the columns here), to pool its reward by."""
        if self.flexkit_validation is not None:
            self.flexkit_validation.note(batch.non_tensor_batch)
        return super()._get_gen_batch(batch)  # type: ignore[misc]

    def _maybe_log_val_generations(self, inputs: Any, outputs: Any, scores: Any) -> Any:
        """The validation's rewards, one per response in batch order, to :attr:`flexkit_validation`; then verl's
        own logging of them."""
        if self.flexkit_validation is not None:
            self.flexkit_validation.score(scores)
        return super()._maybe_log_val_generations(inputs, outputs, scores)  # type: ignore[misc]

    def _update_actor(self, batch: Any) -> Any:
        """Feed the batch back, weight its tokens, add the replayed groups (``[replay]``), run the trainer's own
        actor update, add flexkit's metrics."""
        sampler = self._flexkit_sampler()
        payload = sampler.update(batch) if sampler is not None else None
        pipeline = self.flexkit_pipeline or (sampler.pipeline if sampler is not None else None)
        if pipeline is not None and pipeline.has_sample_stage:
            apply_token_weights(pipeline, batch, step=int(self.global_steps),
                                index_key=sampler.index_key if sampler is not None else "flexkit_index")
        output = super()._update_actor(self._with_replay(batch))  # type: ignore[misc]
        source = self._flexkit_source(sampler)
        metrics = output.meta_info.get("metrics") if isinstance(output, _HasMetaInfo) else None
        if source is not None and isinstance(metrics, dict):
            rollouts = len(batch) if isinstance(batch, Sized) else None
            replay = self.flexkit_replay.buffer if self.flexkit_replay is not None else None
            total = sampler.rollouts if sampler is not None else None
            metrics.update({k: [v] for k, v in pipeline_metrics(source, feedback=payload, rollouts=rollouts,
                                                                replay=replay, run_rollouts=total).items()})
        return output

    def _with_replay(self, batch: Any) -> Any:
        """``batch`` followed by the groups ``[replay]`` replays this step (:meth:`VerlReplay.train_batch`), balanced
        across data-parallel ranks as verl balances a batch (``trainer.balance_batch``), with its
        ``global_token_num``; ``batch`` itself without replay or with nothing to replay."""
        if self.flexkit_replay is None:
            return batch
        train = self.flexkit_replay.train_batch(batch, step=int(self.global_steps))
        if train is batch:
            return batch
        if config_get(self.config, "trainer.balance_batch", False):  # type: ignore[attr-defined]
            self._balance_batch(train, metrics={})  # type: ignore[attr-defined]
        train.meta_info["global_token_num"] = train.batch["attention_mask"].sum(dim=-1).tolist()
        return train
