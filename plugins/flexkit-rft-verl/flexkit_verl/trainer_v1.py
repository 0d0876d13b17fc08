"""``FlexkitV1TrainerMixin``: task selection with feedback in verl's v1 ``PPOTrainer`` (``trainer.use_v1=true``).

verl 0.9.x builds the v1 training dataloader in ``PPOTrainer._init_dataloader`` with ``create_rl_sampler``,
which takes no sampler class from the config; the mixin runs verl's method, then wraps the dataset in
:class:`~flexkit_verl.IndexedDataset` and rebuilds the loader with a :class:`~flexkit_verl.FlexkitSampler`
over the replay buffer's pipeline (same batch size, workers and collate function as verl's). Feedback arrives
through flexkit's replay buffer (:mod:`flexkit_verl.replay_buffer`), which the mixin requires. After verl's
``_load_checkpoint`` it restores the sampler from ``data.pt`` itself (:func:`~flexkit_verl.resume.restore_sampler`).
Each validation's metrics reach the selectors (:meth:`~flexkit.Pipeline.evaluation`): verl's own
(``val-core/<data_source>/acc/mean@1``, ...) and, computed by the replay buffer from the same validation's
rewards, ``val_accuracy`` and ``val_accuracy/<group>`` per value of each selector's first ``feature_keys``
column (:mod:`flexkit_verl.groups`), so a ``frontier`` guard with ``guard_metric = "val_accuracy/{}"`` works as
under ``flexkit run``; they are in the returned metrics too, so verl logs them. With ``[replay]`` each actor update
also trains on the stored groups of earlier updates (:mod:`flexkit_verl.tq_replay`); the buffer is saved with verl's
checkpoint (``global_step_<N>/flexkit_replay.pt``) and restored on resume.

Use :func:`flexkit_trainer_class` on the class ``trainer.v1.trainer_mode`` names (the task runner of
:mod:`flexkit_verl.main_ppo` does).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flexkit import ConfigError, Pipeline, pipeline_metrics
from flexkit_verl.checks import check_trainer_config
from flexkit_verl.dataset import IndexedDataset
from flexkit_verl.groups import ValidationGroups, dataset_columns, validation_columns
from flexkit_verl.keys import config_get
from flexkit_verl.resume import restore_after_load, save_with_replay
from flexkit_verl.sampler import FlexkitSampler
from flexkit_verl.support import support_for, trainer_mixin_builds
from flexkit_verl.tq_replay import TransferQueueReplay


class FlexkitV1TrainerMixin:
    """Mixed in before a v1 ``PPOTrainer`` class: the flexkit sampler in the training dataloader, construction
    checks (:func:`~flexkit_verl.checks.check_trainer_config`), ``[replay]`` and exact resume."""

    #: The ``[replay]`` buffer (:mod:`flexkit_verl.tq_replay`), built with the dataloader when the pipeline has one.
    flexkit_replay: TransferQueueReplay | None = None

    @property
    def flexkit_buffer(self) -> Any:
        """flexkit's replay buffer (a :class:`~flexkit_verl.replay_buffer.FlexkitSampling`), which verl built from
        ``trainer.v1.sampler.custom_sampler``; :class:`~flexkit.ConfigError` when it is another class."""
        from flexkit_verl.replay_buffer import FlexkitSampling

        buffer = self.replay_buffer  # verl's attribute (None before verl builds it)
        if not isinstance(buffer, FlexkitSampling):
            raise ConfigError("trainer.v1.sampler.custom_sampler must be flexkit's replay buffer "
                              "(path=pkg://flexkit_verl.replay_buffer, name=FlexkitReplayBuffer or "
                              f"FlexkitReplayBufferAsync), got {type(buffer).__name__}")
        return buffer

    @property
    def flexkit_pipeline(self) -> Pipeline:
        """The pipeline of flexkit's replay buffer."""
        pipeline: Pipeline = self.flexkit_buffer.pipeline
        return pipeline

    def _build_replay_buffer(self) -> Any:
        """verl's replay buffer, told that this trainer replays (:func:`~flexkit_verl.support.trainer_mixin_builds`:
        flexkit's buffer accepts ``[replay]`` only then)."""
        with trainer_mixin_builds():
            return super()._build_replay_buffer()  # type: ignore[misc]

    def _init_dataloader(self) -> None:
        """verl's dataloaders, then the training loader rebuilt around a :class:`FlexkitSampler`."""
        from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]

        pipeline = self.flexkit_pipeline
        super()._init_dataloader()  # type: ignore[misc]
        dataset = IndexedDataset(self.train_dataset)
        sampler = FlexkitSampler(pipeline, dataset)
        val_columns = dataset_columns(self.val_dataset)
        check_trainer_config(self.config, pipeline, steps_per_epoch=self.steps_per_epoch, v1=True,
                             val_columns=val_columns, multimodal=self.processor is not None)
        replay = pipeline.config.replay
        if replay is not None:
            self.flexkit_replay = TransferQueueReplay(replay.groups, replay.max_age, mini_batch=int(
                config_get(self.config, "actor_rollout_ref.actor.ppo_mini_batch_size", 1)))
        sampler.declare_host(support_for(v1=True))  # checked above, and by the replay buffer without this mixin
        self.flexkit_buffer.validation = ValidationGroups(validation_columns(pipeline, val_columns))
        verl_loader = self.train_dataloader
        self.train_dataset = dataset
        self.train_dataloader = StatefulDataLoader(
            dataset=dataset, batch_size=verl_loader.batch_size, num_workers=verl_loader.num_workers,
            drop_last=verl_loader.drop_last, collate_fn=verl_loader.collate_fn, sampler=sampler)
        self.train_dataloader_it = None
        self.replay_buffer.attach_sampler(sampler)

    def _update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
        """verl's actor update on ``batch`` followed by the groups ``[replay]`` replays
        (:meth:`~flexkit_verl.tq_replay.TransferQueueReplay.train_meta`), whose keys are cleared after it, and
        flexkit's metrics with what it replayed; returns ``batch`` (the fresh trajectories), as verl's step
        expects."""
        replay = self.flexkit_replay
        if replay is None:
            return super()._update_actor(batch, metrics)  # type: ignore[misc]
        import transfer_queue as tq  # type: ignore[import-untyped]

        update = (int(self.global_steps) - 1) * int(self.parameter_sync_step) + int(self.local_trigger_step) + 1
        train, replayed = replay.train_meta(tq, batch, update, unit=self._flexkit_batch_multiple())
        try:
            if replayed:  # verl's balance across data-parallel ranks (the joined batch divides: nothing is upsampled)
                train = self._balance_batch(  # type: ignore[attr-defined]  # verl's
                    train, metrics=metrics, logging_prefix="flexkit/replay/global_seqlen")
            super()._update_actor(train, metrics)  # type: ignore[misc]
        finally:
            if replayed:
                tq.kv_clear(keys=replayed, partition_id=batch.partition_id)
        metrics.update(pipeline_metrics(self.flexkit_pipeline, replay=replay.buffer))  # flexkit/replay/... among them
        return batch

    def _flexkit_batch_multiple(self) -> int:
        """The batch multiple verl's actor update needs (``_get_required_batch_multiple`` of the actor's
        data-parallel size, read as verl's ``_balance_batch`` reads it)."""
        workers = self.actor_rollout_wg
        if "actor" not in workers._dispatch_info:
            workers._dispatch_info["actor"] = workers._query_dispatch_info("actor")
        dp_size = max(workers._dispatch_info["actor"]) + 1
        multiple: int = self._get_required_batch_multiple(dp_size)  # type: ignore[attr-defined]  # verl's
        return multiple

    def _save_checkpoint(self) -> Any:
        """verl's checkpoint with the ``[replay]`` buffer in its folder
        (:func:`~flexkit_verl.resume.save_with_replay`)."""
        save = super()._save_checkpoint  # type: ignore[misc]
        return save_with_replay(save, self.flexkit_replay, self.config, self.global_steps)

    def _load_checkpoint(self) -> Any:
        """verl's checkpoint load, then the flexkit sampler from ``data.pt`` (whatever verl skipped) and the
        ``[replay]`` buffer."""
        result = super()._load_checkpoint()  # type: ignore[misc]
        restore_after_load(self.train_dataloader, self.flexkit_replay, self.config, self.global_steps)
        return result

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """verl's validation, plus ``val_accuracy`` and ``val_accuracy/<group>`` from its rewards (the replay
        buffer's :attr:`~flexkit_verl.replay_buffer.FlexkitSampling.validation`), all handed to the selectors
        (:meth:`~flexkit.Pipeline.evaluation`) and returned for verl to log."""
        groups: ValidationGroups = self.flexkit_buffer.validation
        groups.reset()
        result = super()._validate(*args, **kwargs)  # type: ignore[misc]
        if isinstance(result, dict):
            result = {**result, **groups.metrics()}
            self.flexkit_pipeline.evaluation(result)
        return result

    # attributes verl's PPOTrainer sets; those it may not have set yet with their values before then
    config: Any
    actor_rollout_wg: Any
    train_dataset: Any
    train_dataloader: Any
    train_dataloader_it: Any
    steps_per_epoch: int
    replay_buffer: Any = None
    val_dataset: Any = None
    processor: Any = None  # set before the dataloaders, for a multimodal model
    global_steps: int = 0  # set in fit and on resume
    parameter_sync_step: int = 1  # local updates per step (the asynchronous modes)
    local_trigger_step: int = 0  # the local update running now
    logger: Any = None  # verl's Tracking, set in fit


@cache
def flexkit_trainer_class(base: type) -> type:
    """``class Flexkit<Base>(FlexkitV1TrainerMixin, base)`` for a v1 trainer class (cached per class)."""
    return type(f"Flexkit{base.__name__}", (FlexkitV1TrainerMixin, base), {"__module__": __name__})
