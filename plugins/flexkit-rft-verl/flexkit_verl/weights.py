"""The sample stage on a verl ``DataProto``: scores, keep/reweight, and ``rollout_is_weights``.

verl's policy losses multiply the per-token loss by ``data.batch["rollout_is_weights"]`` when present (its
rollout-correction importance weights). :func:`apply_token_weights` runs the pipeline's sample stage on the
batch and stores ``existing × stage weights`` there, or the stage weights alone when verl computed none, so
verl's own weights survive and a dropped sample contributes zero gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexkit import FeedbackError, Mix, Pipeline, RolloutBatch
from flexkit_verl.dataset import INDEX_KEY, dataset_indices


def to_rollout_batch(data: Any, *, pipeline: Pipeline | None = None, index_key: str = INDEX_KEY) -> RolloutBatch:
    """A :class:`~flexkit.RolloutBatch` over a ``DataProto``'s tensors (not copied) and non-tensor fields.

    With ``pipeline`` and dataset indices in the batch (see :class:`~flexkit_verl.IndexedDataset`), a missing
    ``taskset_id`` field is derived from them (for per-taskset actuators).
    """
    fields: dict[str, Any] = {k: data.batch[k] for k in data.batch.keys()}  # noqa: SIM118 - iterating a TensorDict walks rows
    fields.update(data.non_tensor_batch)
    batch = RolloutBatch.from_dict(fields)
    if pipeline is not None and "taskset_id" not in batch:
        try:
            indices = dataset_indices(data.non_tensor_batch, index_key)
        except FeedbackError:  # no dataset indices: per-taskset actuators will say what they miss
            return batch
        offsets = np.concatenate([[0], np.cumsum(pipeline.scheduler.sizes)])
        batch["taskset_id"] = np.searchsorted(offsets, indices, side="right") - 1
    return batch


def apply_token_weights(
    pipeline: Pipeline, data: Any, *, step: int, timing: str | None = None, index_key: str = INDEX_KEY
) -> Any:
    """Run ``pipeline``'s sample stage on ``data`` (a ``DataProto``) and write the token weights.

    Keep / reweight stages: ``data.batch[weights_key]`` (``rollout_is_weights`` unless the ``[sample]`` table
    says otherwise) becomes ``existing × weights`` (the existing tensor's dtype), or the weights alone when
    absent; returns them. Mix stages hand their proportions to the scheduler (next batches) and return
    ``None`` without touching the batch, as does a ``timing`` the stage does not run at.
    """
    stage = pipeline.sample_stage
    batch = to_rollout_batch(data, pipeline=pipeline, index_key=index_key)
    action = pipeline.apply_sample_stage(batch, step=step, timing=timing)
    if action is None or isinstance(action, Mix):
        return None
    weights = stage.token_weights(batch, step=step)
    existing = data.batch.get(stage.weights_key) if stage.weights_key in data.batch.keys() else None  # noqa: SIM118
    if existing is not None:
        weights = weights.to(dtype=existing.dtype, device=existing.device)
    data.batch[stage.weights_key] = weights
    return weights
