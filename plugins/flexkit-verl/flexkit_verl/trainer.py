"""``FlexkitTrainerMixin``: feedback and token weights before each actor update of verl's ``RayPPOTrainer``.

verl 0.9.x calls ``self._update_actor(batch)`` once per step with the finished batch (rewards, ``uid``,
advantages, verl's own ``rollout_is_weights``); the mixin runs there::

    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    trainer = Trainer(config, ..., train_dataset=IndexedDataset(ds), train_sampler=FlexkitSampler(pipe, ds))

Steps in critic warm-up (no actor update) give no feedback.
"""

from __future__ import annotations

from typing import Any

from flexkit.pipeline import Pipeline
from flexkit_verl.sampler import FlexkitSampler
from flexkit_verl.weights import apply_token_weights


class FlexkitTrainerMixin:
    """Before each actor update: :meth:`FlexkitSampler.update` with the batch, then
    :func:`~flexkit_verl.apply_token_weights` when the pipeline has a ``[sample]`` table.

    The pipeline is the training sampler's; set ``flexkit_pipeline`` to use another (e.g. a sample stage
    without a flexkit sampler).
    """

    flexkit_pipeline: Pipeline | None = None

    def _flexkit_sampler(self) -> FlexkitSampler | None:
        loader = getattr(self, "train_dataloader", None)
        sampler = getattr(loader, "sampler", None)
        return sampler if isinstance(sampler, FlexkitSampler) else None

    def _update_actor(self, batch: Any) -> Any:
        """Feed the batch back, weight its tokens, then run the trainer's own actor update."""
        sampler = self._flexkit_sampler()
        if sampler is not None:
            sampler.update(batch)
        pipeline = self.flexkit_pipeline or (sampler.pipeline if sampler is not None else None)
        if pipeline is not None and pipeline.has_sample_stage:
            apply_token_weights(pipeline, batch, step=int(getattr(self, "global_steps", 0)),
                                index_key=sampler.index_key if sampler is not None else "flexkit_index")
        return super()._update_actor(batch)  # type: ignore[misc]
