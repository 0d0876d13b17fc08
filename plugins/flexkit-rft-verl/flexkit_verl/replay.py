"""``[replay]`` in verl's legacy ``RayPPOTrainer``: each actor update also trains on the informative groups of the
last ``max_age`` steps, weighed against the policy that generated them.

After DOTS (Sun et al. 2025, arXiv 2506.05316): a group whose rewards differ still carries nearly the same gradient
a step later, so training on it again costs no generation. The rows are kept in the core's
:class:`flexkit.host.ReplayBuffer`, with the ``[replay]`` config and checkpointed state of ``flexkit run``.
:class:`~flexkit_verl.FlexkitTrainerMixin` calls :meth:`VerlReplay.train_batch` in ``_update_actor``, which verl
calls once per step with the finished batch (after the feedback and the ``[sample]`` stage's weights):

1. **The stored rows keep what verl computed when they were generated**: ``old_log_probs`` (verl recomputes them
   with the policy that just generated the responses: the behaviour policy), ``advantages``, ``rollout_is_weights``
   (verl's rollout-correction weights times the stage's), ``ref_log_prob`` and every other field. A replayed row's
   ratio in PPO's clipped loss is then π_now / π_generating, the importance weight ``flexkit run`` uses.
2. **Which groups**: the step's groups with a non-zero advantage on a response token
   (:meth:`ReplayBuffer.store <flexkit.host.ReplayBuffer.store>`) among those whose ``rollout_is_weights`` (when
   present) are non-zero on a response token: a group with no weight (verl's rollout correction can reject whole
   responses) carries no gradient and is never stored. flexkit's config refuses ``[replay]`` with a keep or
   reweight ``[sample]`` stage that has no ``[sample.refill]`` (which verl does not run), as ``flexkit run`` does;
   a mix stage works with it.
3. **Whole mini-batches**: verl's actor trains ``ppo_mini_batch_size × rollout.n`` rows per optimizer step and
   asserts that the batch divides into them, so the replayed groups (newest first) are cut to a multiple of
   ``ppo_mini_batch_size`` groups, the oldest left out (the construction checks require ``[replay] groups`` ≥
   ``ppo_mini_batch_size``). Each replayed mini-batch is one more optimizer step in the verl step (verl steps its
   LR scheduler once per ``update_actor`` call, so the schedule is unchanged).

Only fresh responses count as rollouts; ``flexkit/replay/groups`` and ``flexkit/replay/responses`` count what each
update replayed. The buffer is saved as ``global_step_<N>/flexkit_replay.pt`` beside verl's checkpoint (tensors and
plain data, read back with ``torch.load(weights_only=True)``), so a resumed run replays what an uninterrupted one
does; the file leaves a folder when verl deletes that folder's actor checkpoint (:func:`prune_replay_files`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from flexkit import CheckpointError, RolloutBatch
from flexkit.host import ReplayBuffer
from flexkit_verl.replay_rows import data_proto, storable_rows

__all__ = ["REPLAY_FILE", "VerlReplay", "prune_replay_files"]

#: The buffer's file in verl's ``global_step_<N>`` folder.
REPLAY_FILE = "flexkit_replay.pt"


def _live_groups(rows: RolloutBatch) -> np.ndarray:
    """The rows of the groups whose ``rollout_is_weights`` are non-zero on a response token (every row without
    weights)."""
    weights = rows.get("rollout_is_weights")
    if weights is None:
        return np.arange(rows.batch_size)
    live = ((weights != 0) & (rows["response_mask"] != 0)).any(dim=1).cpu().numpy()
    gid, groups = rows.group_index()
    group_live = np.zeros(groups, dtype=bool)
    np.logical_or.at(group_live, gid, live)
    return np.flatnonzero(group_live[gid])


def _whole_groups(uids: np.ndarray, unit: int) -> np.ndarray:
    """The rows of the first groups (in order of first appearance) that make a multiple of ``unit`` groups."""
    _, first = np.unique(uids, return_index=True)
    order = uids[np.sort(first)]
    kept = order[: len(order) // unit * unit]
    return np.flatnonzero(np.isin(uids, kept))


class VerlReplay:
    """The ``[replay]`` buffer of one legacy verl trainer and the conversion of its batches (see the module
    docstring)."""

    def __init__(self, groups: int, max_age: int, *, mini_batch: int) -> None:
        """Keep up to ``groups`` groups for ``max_age`` steps; replay them in multiples of ``mini_batch`` groups
        (``actor_rollout_ref.actor.ppo_mini_batch_size``)."""
        self.buffer = ReplayBuffer(groups, max_age)
        self.mini_batch = mini_batch

    def replay_rows(self, fresh: RolloutBatch, step: int) -> RolloutBatch | None:
        """The stored groups that update ``step`` trains on again, newest first and cut to whole mini-batches of
        groups (``None``: none); then ``fresh``'s informative groups with a non-zero weight are stored for later
        updates. Sets the buffer's ``last_groups`` and ``last_responses`` to what is replayed."""
        # the stored groups alone: extend's fresh part is none of fresh's rows (they are not copied), only its fields
        replayed = self.buffer.extend(RolloutBatch.concat_rows([fresh], [np.arange(0)]), step)
        rows = _whole_groups(np.asarray(replayed["uid"]), self.mini_batch)
        self.buffer.store(RolloutBatch.concat_rows([fresh], [_live_groups(fresh)]), step)
        self.buffer.last_responses = len(rows)
        self.buffer.last_groups = len(np.unique(np.asarray(replayed["uid"])[rows]))
        return RolloutBatch.concat_rows([replayed], [rows]) if rows.size else None

    def train_batch(self, data: Any, step: int) -> Any:
        """What step ``step``'s actor update trains on: ``data`` (the step's finished ``DataProto``), followed by
        the stored groups it may replay in whole mini-batches (``data`` itself when there are none); ``data``'s
        informative groups are stored for later steps."""
        rows = self.replay_rows(storable_rows(data, step), step)
        if rows is None:
            return data
        from verl import DataProto

        return DataProto.concat([data, data_proto(rows)])

    # -- checkpoint ---------------------------------------------------------------------------------------

    def save(self, folder: str) -> None:
        """Write the buffer to ``folder/flexkit_replay.pt`` (tensors and plain data only)."""
        os.makedirs(folder, exist_ok=True)
        torch.save(_portable(self.buffer.state_dict()), os.path.join(folder, REPLAY_FILE))

    def load(self, folder: str) -> None:
        """Restore the buffer from ``folder/flexkit_replay.pt``; :class:`~flexkit.CheckpointError` when the file is
        missing, is not tensors and plain data (nothing in it runs), or does not hold a buffer."""
        path = os.path.join(folder, REPLAY_FILE)
        if not os.path.exists(path):
            raise CheckpointError(f"{folder} holds no {REPLAY_FILE}: it was saved without [replay], so the replay "
                                  "buffer cannot resume from it; remove [replay] to resume this run, or start a new "
                                  "one (trainer.resume_mode=disable)")
        try:
            saved = torch.load(path, weights_only=True)
        except Exception as exc:  # UnpicklingError for anything but tensors and plain data; damaged files
            raise CheckpointError(f"cannot restore the [replay] buffer from {path}: torch.load(weights_only=True) "
                                  f"refused it ({type(exc).__name__}); flexkit never unpickles arbitrary objects "
                                  "from a checkpoint") from None
        self.buffer.load_state_dict(_from_portable(saved, path))


def prune_replay_files(checkpoint_dir: str, current: str) -> list[str]:
    """Remove the buffer file from every ``global_step_<N>`` folder of ``checkpoint_dir`` but ``current`` whose actor
    checkpoint verl has deleted (``max_actor_ckpt_to_keep``): such a folder cannot be resumed from, and a buffer can
    be large. Returns the files removed."""
    removed: list[str] = []
    if not os.path.isdir(checkpoint_dir):
        return removed
    for name in sorted(os.listdir(checkpoint_dir)):
        folder = os.path.join(checkpoint_dir, name)
        path = os.path.join(folder, REPLAY_FILE)
        if (name.startswith("global_step_") and os.path.abspath(folder) != os.path.abspath(current)
                and os.path.isfile(path) and not os.path.isdir(os.path.join(folder, "actor"))):
            os.remove(path)
            removed.append(path)
    return removed


def _portable(state: Mapping[str, Any]) -> dict[str, Any]:
    """A :meth:`ReplayBuffer.state_dict` with its arrays as tensors (numbers) or lists (strings), each with its
    numpy dtype and shape, which ``torch.load(weights_only=True)`` reads."""
    columns = {}
    for name, value in state["columns"].items():
        array = np.ascontiguousarray(value)
        data: Any = array.ravel().tolist() if array.dtype.kind == "U" else torch.from_numpy(array.copy())
        columns[name] = {"data": data, "dtype": array.dtype.str, "shape": list(array.shape)}
    return {"born": torch.from_numpy(np.asarray(state["born"], dtype=np.int64).copy()), "columns": columns,
            "tensors": dict(state["tensors"])}


def _from_portable(saved: Any, path: str) -> dict[str, Any]:
    """Undo :func:`_portable`; :class:`~flexkit.CheckpointError` for anything else."""
    try:
        columns = {}
        for name, column in saved["columns"].items():
            dtype = np.dtype(column["dtype"])
            data = column["data"]
            array = data.numpy().astype(dtype) if isinstance(data, torch.Tensor) else np.array(data, dtype=dtype)
            columns[name] = array.reshape(column["shape"])
        return {"born": saved["born"].numpy().astype(np.int64), "columns": columns, "tensors": dict(saved["tensors"])}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path} does not hold a [replay] buffer ({type(exc).__name__}: {exc})") from None
