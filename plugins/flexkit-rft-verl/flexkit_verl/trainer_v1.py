"""``FlexkitV1TrainerMixin``: task selection with feedback in verl's v1 ``PPOTrainer`` (``trainer.use_v1=true``).

verl 0.9.x builds the v1 training dataloader in ``PPOTrainer._init_dataloader`` with ``create_rl_sampler``,
which takes no sampler class from the config; the mixin runs verl's method, then wraps the dataset in
:class:`~flexkit_verl.IndexedDataset` and rebuilds the loader with a :class:`~flexkit_verl.FlexkitSampler`
over the replay buffer's pipeline (same batch size, workers and collate function as verl's). Feedback arrives
through flexkit's replay buffer (:mod:`flexkit_verl.replay_buffer`), which the mixin requires. After verl's
``_load_checkpoint`` it restores the sampler from ``data.pt`` itself (:func:`~flexkit_verl.resume.restore_sampler`).
Each validation's metrics (``val-core/<data_source>/acc/mean@1``, ...) reach the selectors
(:meth:`~flexkit.Pipeline.evaluation`), for a ``frontier`` guard (``guard_metric``).

Use :func:`flexkit_trainer_class` on the class ``trainer.v1.trainer_mode`` names (the task runner of
:mod:`flexkit_verl.main_ppo` does).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flexkit import ConfigError, Pipeline
from flexkit_verl.checks import check_trainer_config
from flexkit_verl.dataset import IndexedDataset
from flexkit_verl.resume import checkpoint_folder, restore_sampler
from flexkit_verl.sampler import FlexkitSampler


class FlexkitV1TrainerMixin:
    """Mixed in before a v1 ``PPOTrainer`` class: the flexkit sampler in the training dataloader, construction
    checks (:func:`~flexkit_verl.checks.check_trainer_config`) and exact resume."""

    @property
    def flexkit_pipeline(self) -> Pipeline:
        """The pipeline of flexkit's replay buffer."""
        buffer = getattr(self, "replay_buffer", None)
        pipeline = getattr(buffer, "pipeline", None)
        if not isinstance(pipeline, Pipeline) or not hasattr(buffer, "attach_sampler"):
            raise ConfigError("trainer.v1.sampler.custom_sampler must be flexkit's replay buffer "
                              "(path=pkg://flexkit_verl.replay_buffer, name=FlexkitReplayBuffer or "
                              f"FlexkitReplayBufferAsync), got {type(buffer).__name__}")
        return pipeline

    def _init_dataloader(self) -> None:
        """verl's dataloaders, then the training loader rebuilt around a :class:`FlexkitSampler`."""
        from torchdata.stateful_dataloader import StatefulDataLoader

        pipeline = self.flexkit_pipeline
        super()._init_dataloader()  # type: ignore[misc]
        dataset = IndexedDataset(self.train_dataset)
        sampler = FlexkitSampler(pipeline, dataset)
        check_trainer_config(self.config, pipeline, steps_per_epoch=self.steps_per_epoch, v1=True)
        verl_loader = self.train_dataloader
        self.train_dataset = dataset
        self.train_dataloader = StatefulDataLoader(
            dataset=dataset, batch_size=verl_loader.batch_size, num_workers=verl_loader.num_workers,
            drop_last=verl_loader.drop_last, collate_fn=verl_loader.collate_fn, sampler=sampler)
        self.train_dataloader_it = None
        self.replay_buffer.attach_sampler(sampler)

    def _load_checkpoint(self) -> Any:
        """verl's checkpoint load, then the flexkit sampler from ``data.pt`` (whatever verl skipped)."""
        result = super()._load_checkpoint()  # type: ignore[misc]
        restore_sampler(self.train_dataloader, checkpoint_folder(self.config, getattr(self, "global_steps", 0)))
        return result

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """verl's validation, then its metrics to the selectors (:meth:`~flexkit.Pipeline.evaluation`)."""
        result = super()._validate(*args, **kwargs)  # type: ignore[misc]
        if isinstance(result, dict):
            self.flexkit_pipeline.evaluation(result)
        return result

    # attributes verl's PPOTrainer sets
    config: Any
    train_dataset: Any
    train_dataloader: Any
    train_dataloader_it: Any
    steps_per_epoch: int
    replay_buffer: Any


@cache
def flexkit_trainer_class(base: type) -> type:
    """``class Flexkit<Base>(FlexkitV1TrainerMixin, base)`` for a v1 trainer class (cached per class)."""
    return type(f"Flexkit{base.__name__}", (FlexkitV1TrainerMixin, base), {"__module__": __name__})
