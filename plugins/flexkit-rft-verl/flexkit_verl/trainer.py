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
Each validation's metrics (``val-core/<data_source>/acc/mean@1``, ...) reach the selectors
(:meth:`~flexkit.Pipeline.evaluation`), so a ``frontier`` guard can read them (``guard_metric =
"val-core/{}/acc/mean@1"`` with the tasks grouped by their ``data_source``).
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Protocol, runtime_checkable

from flexkit import Pipeline, TasksetScheduler, pipeline_metrics
from flexkit_verl.checks import check_trainer_config
from flexkit_verl.resume import checkpoint_folder, loader_sampler, restore_sampler
from flexkit_verl.sampler import FlexkitSampler
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
    #: verl's attributes, which ``RayPPOTrainer`` sets as it goes (``train_dataloader`` when it builds the
    #: dataloaders, ``global_steps`` in ``fit`` and on resume): their values before then.
    train_dataloader: Any = None
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
        if pipeline is not None:
            steps = len(self.train_dataloader) if sampler is not None else None
            config = self.config  # type: ignore[attr-defined]
            if sampler is None:  # a sample stage alone: only the loss modes matter
                from flexkit_verl.checks import loss_mode_issues

                issues = loss_mode_issues(config, pipeline, v1=False)
                if issues:
                    from flexkit import ConfigError

                    raise ConfigError(issues, source="verl config vs flexkit pipeline")
            else:
                check_trainer_config(config, pipeline, steps_per_epoch=steps, v1=False)
        return result

    def _load_checkpoint(self) -> Any:
        """verl's checkpoint load, then the flexkit sampler from ``data.pt`` even where verl skipped it."""
        result = super()._load_checkpoint()  # type: ignore[misc]
        restore_sampler(self.train_dataloader, checkpoint_folder(self.config, self.global_steps))  # type: ignore[attr-defined]
        return result

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """verl's validation, then its metrics to the selectors (:meth:`~flexkit.Pipeline.evaluation`); a
        ``merged=True`` call returns raw results to merge, not metrics, and is passed through alone."""
        result = super()._validate(*args, **kwargs)  # type: ignore[misc]
        merged = kwargs.get("merged", args[0] if args else False)
        source = self._flexkit_source(self._flexkit_sampler())
        if source is not None and not merged and isinstance(result, dict):
            source.evaluation(result)
        return result

    def _update_actor(self, batch: Any) -> Any:
        """Feed the batch back, weight its tokens, run the trainer's own actor update, add flexkit's metrics."""
        sampler = self._flexkit_sampler()
        payload = sampler.update(batch) if sampler is not None else None
        pipeline = self.flexkit_pipeline or (sampler.pipeline if sampler is not None else None)
        if pipeline is not None and pipeline.has_sample_stage:
            apply_token_weights(pipeline, batch, step=int(self.global_steps),
                                index_key=sampler.index_key if sampler is not None else "flexkit_index")
        output = super()._update_actor(batch)  # type: ignore[misc]
        source = self._flexkit_source(sampler)
        metrics = output.meta_info.get("metrics") if isinstance(output, _HasMetaInfo) else None
        if source is not None and isinstance(metrics, dict):
            rollouts = len(batch) if isinstance(batch, Sized) else None
            total = sampler.rollouts if sampler is not None else None
            metrics.update({k: [v] for k, v in pipeline_metrics(source, feedback=payload, rollouts=rollouts,
                                                                run_rollouts=total).items()})
        return output
