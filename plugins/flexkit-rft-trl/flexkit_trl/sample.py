"""The pipeline's ``[sample]`` stage on each TRL generation batch, as per-sample weights in GRPO's loss.

After TRL scores a generation batch (rewards gathered from every process, group-normalised advantages), the
adapter builds a :class:`~flexkit.RolloutBatch` of the whole generation batch (every process builds the same
one, from gathered tensors, so every pipeline copy stays identical): ``token_level_scores`` (each completion's
weighted reward sum, one per row), ``response_mask`` (the completion mask, × TRL's ``tool_mask``),
``advantages`` (TRL's, broadcast over the completion tokens), ``old_log_probs`` when TRL computed them,
``uid`` (the prompt's group: ``num_generations`` rows in a row), ``taskset_id`` and ``index``. The stage runs on it
(:meth:`Pipeline.apply_sample_stage <flexkit.Pipeline.apply_sample_stage>`); a mix action goes to the scheduler,
and a keep or weights action becomes (B, T) token weights (:meth:`SampleStage.token_weights
<flexkit.SampleStage.token_weights>`), which enter the loss the way verl's ``rollout_is_weights`` do
(:func:`weighted_inputs`):

* each row's advantage is multiplied by its token weights: GRPO's per-token loss ``−min(r·A, clip(r)·A)`` is
  linear in ``A ≥ 0`` scaling, so this is the weighted clipped surrogate (``w · ℓ``);
* the tokens with weight 0 leave the loss mask (TRL's ``tool_mask``, the mask of the tokens its loss, KL term,
  entropy bonus and metrics count): a dropped group gets exactly zero gradient, its KL term included, as
  :func:`flexkit.keep_mask` prescribes for regularisers.

Dropped rows stay in the batch (their denominators count as TRL's ``loss_type`` counts them), so keeping a
fraction ``f`` of the tokens scales a ``grpo`` step by about ``f``, as flexkit's ``"token-mean"`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from flexkit import RolloutBatch

__all__ = ["stage_batch", "weighted_inputs"]


def stage_batch(*, rewards: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
                num_generations: int, taskset_ids: np.ndarray, indices: np.ndarray,
                old_log_probs: torch.Tensor | None = None) -> RolloutBatch:
    """The :class:`~flexkit.RolloutBatch` of one whole generation batch (see the module docstring): ``rewards``
    (B,) (NaN, unscored: 0), ``advantages`` (B,), ``response_mask`` (B, T), the rows' task ids."""
    mask = response_mask.to(torch.float32)
    fields: dict[str, Any] = {
        "token_level_scores": torch.nan_to_num(rewards.to(torch.float32), nan=0.0),
        "response_mask": mask,
        "advantages": advantages.to(torch.float32)[:, None] * mask,
        "uid": np.arange(len(rewards), dtype=np.int64) // num_generations,
        "taskset_id": np.asarray(taskset_ids, dtype=np.int64),
        "index": np.asarray(indices, dtype=np.int64),
    }
    if old_log_probs is not None:
        fields["old_log_probs"] = old_log_probs.to(torch.float32)
    return RolloutBatch.from_dict(fields)


def weighted_inputs(output: dict[str, Any], weights: torch.Tensor) -> None:
    """Multiply this process's (B, T) token ``weights`` into ``output``'s advantages and drop their zeros from the
    loss mask (``tool_mask``), in place (see the module docstring)."""
    advantages = output["advantages"]
    weights = weights.to(device=advantages.device, dtype=torch.float32)
    per_row = advantages if advantages.dim() == 2 else advantages[:, None]
    output["advantages"] = per_row * weights.to(per_row.dtype)
    keep = (weights > 0).to(output["completion_mask"].dtype)
    tool_mask = output.get("tool_mask")
    output["tool_mask"] = keep if tool_mask is None else tool_mask * keep.to(tool_mask.dtype)

