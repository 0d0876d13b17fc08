"""``[replay]`` inside ``FlexkitGRPOTrainer``: each generation batch also trains on the informative groups of the
last ``max_age`` generation batches, weighed against the policy that generated them.

After DOTS (Sun et al. 2025, arXiv 2506.05316): a group whose rewards differ still carries nearly the same
gradient a step later, so training on it again costs no generation. The rows are kept in the core's
:class:`flexkit.host.ReplayBuffer`, with the ``[replay]`` config and checkpointed state of ``flexkit run``. For each
training generation batch, after TRL's rewards and advantages (and the pipeline's ``[sample]`` stage):

1. **Behaviour log-probabilities.** TRL's loss takes its importance ratio against ``old_per_token_logps`` and, when
   generation and optimisation are aligned, skips them (the ratio is then 1). A replayed row needs the
   log-probabilities of the policy that generated it, so the adapter computes them for every fresh row (one forward
   pass without gradient, the one TRL makes when they are not aligned) and keeps them with the row: its ratio in a
   later batch is ``π_now / π_generating``, clipped by TRL's ``epsilon`` as any off-policy token is.
2. **The batch.** TRL's per-row tensors become a :class:`~flexkit.RolloutBatch` (``response_mask``: the loss mask,
   ``completion_mask × tool_mask``; ``advantages`` (B, T); ``old_log_probs``; ``uid``: ``num_generations`` rows in a
   row; every other per-row tensor under TRL's name, the prompt's padded on the left when widths differ, the
   others on the right, under a zero mask). :meth:`ReplayBuffer.train_batch <flexkit.host.ReplayBuffer.train_batch>`
   appends the stored groups this batch may replay (newest first) and stores its own informative ones, and the
   result goes back to TRL with ``num_items_in_batch`` (the ``dapo``/``cispo`` normaliser) counted over every row.
   Replayed rows keep the advantages and loss weights they were generated with (a group the sample stage dropped
   has none and is never stored).
3. **Whole slices.** TRL cuts the generation batch into ``steps_per_generation`` equal slices and drops the rows
   beyond them; the adapter leaves out the oldest replayed rows that would not fit, so nothing it hands TRL is
   dropped (a replayed group can lose some rows; each row keeps its own advantage).

Only fresh completions count as rollouts; ``flexkit/replay/groups`` and ``flexkit/replay/responses`` count what each
generation batch replayed. Each micro-batch holds its share of the replayed rows too, so a step's memory grows with
``groups``. Refused at construction: more than one process (each would keep its own buffer of its own rows; not
tested). Refused on the first batch: image inputs (their tensors are not one row per completion).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from flexkit import RolloutBatch, SampleError
from flexkit.host import REPLAY_AGE, PadSide, ReplayBuffer

__all__ = ["IMAGE_FIELDS", "PADDING", "GenerationReplay"]

#: TRL's per-row tensors and the side their padding goes on when two generation batches' widths differ.
PADDING: dict[str, PadSide] = {
    "prompt_ids": "left", "prompt_mask": "left",
    "completion_ids": "right", "completion_mask": "right", "tool_mask": "right",
    "ref_per_token_logps": "right", "sampling_per_token_logps": "right", "importance_sampling_ratio": "right",
}
#: TRL's image inputs (not one row per completion): refused with replay.
IMAGE_FIELDS = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "spatial_shapes", "image_sizes",
                "token_type_ids", "mm_token_type_ids", "image_position_ids", "num_images", "num_tiles")
#: TRL's names of the behaviour log-probabilities and the normaliser, and the core's.
OLD_LOGPS, NORMALISER, OLD_LOG_PROBS = "old_per_token_logps", "num_items_in_batch", "old_log_probs"


def loss_mask(output: Mapping[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss counts: ``completion_mask``, times ``tool_mask`` when there is one."""
    mask: torch.Tensor = output["completion_mask"]
    tool_mask = output.get("tool_mask")
    return mask if tool_mask is None else mask * tool_mask


class GenerationReplay:
    """The ``[replay]`` buffer of one ``FlexkitGRPOTrainer`` and the conversion of TRL's generation batch (see the
    module docstring)."""

    def __init__(self, groups: int, max_age: int, *, num_generations: int, steps_per_generation: int) -> None:
        self.buffer = ReplayBuffer(groups, max_age, padding=PADDING)
        self.num_generations = num_generations
        self.steps_per_generation = steps_per_generation

    def train_inputs(self, output: dict[str, Any], *, step: int) -> dict[str, Any]:
        """TRL's scored generation batch ``output`` (with ``old_per_token_logps``), followed by the replayed rows
        generation batch ``step`` trains on; ``output``'s informative groups are stored for later ones."""
        images = [name for name in IMAGE_FIELDS if output.get(name) is not None]
        if images:
            raise SampleError(f"[replay]: FlexkitGRPOTrainer replays text completions only; this batch has image "
                              f"inputs ({', '.join(images)}): remove the [replay] table")
        if output.get(OLD_LOGPS) is None:
            raise SampleError("[replay]: the generation batch has no old_per_token_logps (the generating policy's "
                              "log-probabilities a replayed row is weighed against)")
        fresh = _as_batch(output, self.num_generations)
        trained = self.buffer.train_batch(fresh, step)
        total = trained.batch_size
        replayed = total - fresh.batch_size
        cut = min(total % self.steps_per_generation, replayed)  # rows TRL's even split would drop, oldest first
        if cut:
            trained = RolloutBatch.concat_rows([trained], [np.arange(total - cut)], padding=PADDING)
        ages = np.asarray(trained[REPLAY_AGE])  # what went to TRL (the buffer's counts, less the rows left out)
        self.buffer.last_responses = int((ages > 0).sum())
        self.buffer.last_groups = len(np.unique(np.asarray(trained["uid"])[ages > 0]))
        return _as_inputs(trained, output)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state (:meth:`flexkit.host.ReplayBuffer.state_dict`)."""
        return self.buffer.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.buffer.load_state_dict(state)


def _as_batch(output: Mapping[str, Any], num_generations: int) -> RolloutBatch:
    """TRL's per-row tensors of ``output`` as a :class:`RolloutBatch` with the fields the buffer reads."""
    mask = loss_mask(output)
    rows = mask.shape[0]
    advantages: torch.Tensor = output["advantages"]
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand(-1, mask.shape[1])
    fields: dict[str, Any] = {
        name: value for name, value in output.items()
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and name not in (OLD_LOGPS, "advantages")
    }
    fields.update({
        "advantages": advantages.to(torch.float32).clone(),
        "response_mask": mask.to(torch.float32),
        OLD_LOG_PROBS: output[OLD_LOGPS],
        "uid": np.arange(rows, dtype=np.int64) // num_generations,
    })
    return RolloutBatch.from_dict(fields)


def _as_inputs(trained: RolloutBatch, output: Mapping[str, Any]) -> dict[str, Any]:
    """``trained`` in TRL's layout: ``output``'s fields in ``output``'s order (TRL reads the batch size from the
    first), each per-row one with every row of ``trained``."""
    inputs: dict[str, Any] = {}
    for name, value in output.items():
        if name == OLD_LOGPS:
            inputs[name] = trained[OLD_LOG_PROBS]
        elif isinstance(value, torch.Tensor) and value.dim() >= 1:
            inputs[name] = trained[name]
        else:
            inputs[name] = value
    normaliser = output.get(NORMALISER)
    if isinstance(normaliser, torch.Tensor):
        inputs[NORMALISER] = loss_mask(inputs).sum().to(normaliser.dtype)
    return inputs
