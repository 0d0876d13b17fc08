"""flexkit in verl's v1 trainer through its own hook: ``trainer.v1.sampler.custom_sampler``.

verl 0.9.x's v1 ``PPOTrainer`` builds its replay buffer from ``custom_sampler.{path,name}`` and calls
``sample(global_steps, partition_id, batch_size)`` once per step, when the batch's rollouts and rewards are in
TransferQueue. The classes here are verl's own buffers plus, for each training batch:

1. feedback: one reward per response (``rm_scores`` summed) grouped by ``uid`` → the trainer's
   :class:`~flexkit_verl.FlexkitSampler` (attached by :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin`);
2. the pipeline's ``[sample]`` stage: keep / reweight become per-token ``rollout_is_weights`` written next to
   the trajectories (the v1 policy loss multiplies them in, so a dropped group gets zero gradient); mix sets
   the scheduler's taskset proportions;
3. ``flexkit/...`` metrics (:func:`flexkit.pipeline_metrics`) in the returned metrics, which the trainer adds to
   the step's metrics and so to its trackers.

For validation batches (``partition_id="val"``, sampled inside verl's ``_validate``) it adds each response's
reward and its row's values in the pipeline's grouping columns to :attr:`FlexkitSampling.validation`
(:class:`~flexkit_verl.groups.ValidationGroups`), from which
:class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` hands the pipeline ``val_accuracy/<group>``.

YAML::

    trainer.v1.sampler.custom_sampler.path=pkg://flexkit_verl.replay_buffer
    trainer.v1.sampler.custom_sampler.name=FlexkitReplayBuffer   # FlexkitReplayBufferAsync in async modes
    +flexkit.pipeline=/abs/path/pipeline.toml

The pipeline comes from ``trainer.v1.sampler.sampler_kwargs`` when it has a ``pipeline`` key (the keys of
:mod:`flexkit_verl.config`), else from the config's ``flexkit`` keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import transfer_queue as tq  # type: ignore[import-untyped]
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from flexkit import ConfigError, Mix, Pipeline, RolloutBatch, pipeline_metrics
from flexkit.host import pipeline_needs, unmet_needs
from flexkit_verl.checks import loss_mode_issues, v1_sampling_issues
from flexkit_verl.config import flexkit_settings, pipeline_from_settings
from flexkit_verl.groups import ValidationGroups, final_outputs, group_columns
from flexkit_verl.sampler import FlexkitSampler
from flexkit_verl.support import buffer_support
from flexkit_verl.tq_batch import read_batch, read_validation, write_token_weights


def _root(node: Any) -> Any:
    """The whole verl config a child node belongs to (``None`` for a plain dict)."""
    from omegaconf import Container

    return node._get_root() if isinstance(node, Container) else None


class FlexkitSampling:
    """What the flexkit replay buffers add to verl's; mixed in before verl's class."""

    pipeline: Pipeline
    flexkit_sampler: FlexkitSampler | None = None
    #: Rewards of the current validation by prompt and group (:func:`~flexkit_verl.groups.group_columns`).
    validation: ValidationGroups

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kwargs_node = kwargs.get("sampler_kwargs")
        root = _root(kwargs_node)
        if isinstance(kwargs_node, Mapping) and "pipeline" in kwargs_node:
            settings, key = flexkit_settings({"flexkit": kwargs_node}), "trainer.v1.sampler.sampler_kwargs"
        else:
            settings, key = flexkit_settings(root) if root is not None else None, "flexkit"
        if settings is None:
            raise ConfigError("flexkit's replay buffer needs a pipeline: set +flexkit.pipeline=/abs/path.toml (or "
                              "+trainer.v1.sampler.sampler_kwargs.pipeline=...)")
        self.pipeline = pipeline_from_settings(settings, key=key)
        self._check_mode(self.trainer_mode)  # type: ignore[attr-defined]  # verl's ReplayBuffer sets it
        self.validation = ValidationGroups(group_columns(self.pipeline))  # ConfigError: a guard no run can feed
        # what the v1 trainer does not honour ([sample.refill]; [replay] without the trainer mixin, which replays)
        issues = unmet_needs(pipeline_needs(self.pipeline), buffer_support())
        if root is not None:
            issues += loss_mode_issues(root, self.pipeline, v1=True) + v1_sampling_issues(root, self.pipeline)
        if issues:
            raise ConfigError(issues, source="verl config vs flexkit pipeline")

    def _check_mode(self, mode: str) -> None:
        wanted = "FlexkitReplayBuffer" if mode == "sync" else "FlexkitReplayBufferAsync"
        if type(self).__name__ != wanted and type(self).__name__ in ("FlexkitReplayBuffer", "FlexkitReplayBufferAsync"):
            raise ConfigError(f"trainer.v1.trainer_mode={mode!r} needs trainer.v1.sampler.custom_sampler.name={wanted}")

    def attach_sampler(self, sampler: FlexkitSampler) -> None:
        """Feed each training batch's rewards back to ``sampler`` (the trainer's dataloader sampler)."""
        self.flexkit_sampler = sampler

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict[str, Any]]:
        """verl's sampling, then feedback, the ``[sample]`` stage and metrics for training batches; for validation
        batches, their rewards by prompt and group (:meth:`observe_validation`)."""
        batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id,  # type: ignore[misc]
                                        batch_size=batch_size)
        if partition_id == "val" and batch.keys:
            self.observe_validation(batch)
        elif batch.keys:
            metrics = {**metrics, **self.process(batch, step=global_steps)}
        return batch, metrics

    def observe_validation(self, batch: Any) -> None:
        """Add one validation ``KVBatchMeta`` (the last output of each session) to :attr:`validation`."""
        keys = list(batch.keys)
        keys = [keys[i] for i in final_outputs(keys)]
        data = read_validation(tq, keys, batch.partition_id, self.validation.names)
        self.validation.add(data["uid"], data["rewards"], data["values"])

    def process(self, batch: Any, *, step: int) -> dict[str, float]:
        """Feedback and the sample stage on one ``KVBatchMeta``; returns the ``flexkit/...`` metrics."""
        keys, pid = list(batch.keys), batch.partition_id
        data = read_batch(tq, keys, pid, index_key=self._index_key())
        rewards = (data["token_level_scores"] * data["response_mask"]).sum(-1).double().numpy()
        payload = None
        if self.flexkit_sampler is not None:
            if data["indices"] is None:
                from flexkit import FeedbackError

                raise FeedbackError("the batch's extra_info carries no dataset index: the trainer's dataset must be "
                                    "wrapped in flexkit_verl.IndexedDataset (FlexkitV1TrainerMixin does it)")
            payload = self.flexkit_sampler.update_groups(data["uid"], data["indices"], rewards)
        if self.pipeline.has_sample_stage:
            self._apply_stage(keys, pid, data, step=step)
        total = self.flexkit_sampler.rollouts if self.flexkit_sampler is not None else None
        metrics: dict[str, float] = pipeline_metrics(self.pipeline, feedback=payload, rollouts=len(keys),
                                                     run_rollouts=total)
        return metrics

    def _index_key(self) -> str:
        return self.flexkit_sampler.index_key if self.flexkit_sampler is not None else "flexkit_index"

    def _apply_stage(self, keys: list[str], pid: str, data: dict[str, Any], *, step: int) -> None:
        fields: dict[str, Any] = {"uid": data["uid"], "token_level_scores": data["token_level_scores"],
                                  "response_mask": data["response_mask"]}
        if data["indices"] is not None:
            sampler = self.flexkit_sampler
            fields["taskset_id"] = sampler.locate(data["indices"])[0] if sampler is not None else None
            if fields["taskset_id"] is None:
                del fields["taskset_id"]
        rollout = RolloutBatch.from_dict(fields)
        action = self.pipeline.apply_sample_stage(rollout, step=step)
        if action is None or isinstance(action, Mix):
            return
        weights = self.pipeline.sample_stage.token_weights(rollout, step=step)
        write_token_weights(tq, keys, pid, weights, data["lengths"], field=self.pipeline.sample_stage.weights_key)


class FlexkitReplayBuffer(FlexkitSampling, ReplayBuffer):
    """verl's synchronous ``ReplayBuffer`` with flexkit (``trainer.v1.trainer_mode=sync``)."""


class FlexkitReplayBufferAsync(FlexkitSampling, ReplayBufferAsync):
    """verl's ``ReplayBufferAsync`` with flexkit (``colocate_async`` / ``separate_async`` modes)."""
