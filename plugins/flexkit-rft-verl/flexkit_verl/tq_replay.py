"""``[replay]`` in verl's v1 trainer: each actor update also trains on the informative groups of the last
``max_age`` updates, weighed against the policy that generated them.

After DOTS (Sun et al. 2025, arXiv 2506.05316), as in the legacy trainer (:mod:`flexkit_verl.replay`, whose
selection, buffer and checkpoint file this shares). :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` calls
:meth:`TransferQueueReplay.train_meta` in ``_update_actor``, which verl's v1 step calls once per update with the
batch's ``KVBatchMeta`` after ``_compute_old_log_prob`` and ``_compute_advantage`` have written their fields:

1. **The update's informative groups with a non-zero weight are read whole** from TransferQueue and stored
   (:mod:`flexkit_verl.tq_rows`): first ``uid``, ``advantages``, ``response_mask`` and ``rollout_is_weights`` of
   every fresh trajectory (verl's padding rows left out), then every field of the groups to store:
   ``old_log_probs`` from the policy that generated them (or ``rollout_log_probs`` in verl's bypass mode),
   ``advantages``, ``rollout_is_weights``, ``ref_log_prob``, token ids, ``extra_info``, ... and their tags.
2. **The stored groups it may replay** (newest first, cut to whole mini-batches of
   ``actor_rollout_ref.actor.ppo_mini_batch_size`` groups) are written back to TransferQueue under new keys
   (``flexkit-replay-<update>-<i>_0_0``), padded to verl's required batch multiple with zero-weight copies (a v1
   group can hold fewer or more than ``rollout.n`` trajectories), appended to the batch the actor trains on, and
   the joined batch is balanced across data-parallel ranks by verl's own ``_balance_batch``. They skip verl's
   ``_compute_old_log_prob`` and ``_compute_advantage``, which ran before: a replayed row keeps the
   ``old_log_probs`` and advantages of its own step, so its ratio in PPO's clipped loss is π_now / π_generating,
   the importance weight ``flexkit run`` uses. verl's step then gets the fresh batch back (its metrics and
   ``kv_clear`` see fresh trajectories only), and the replayed keys are cleared after the update.
3. An "update" is one call of ``_step_once``: ``global_steps`` in the synchronous mode, and in the asynchronous
   ones each of a step's ``parameter_sync_step`` local updates; ``max_age`` counts updates.

Only fresh responses count as rollouts; ``flexkit/replay/groups`` and ``flexkit/replay/responses`` count what each
update replayed. The buffer is saved beside verl's checkpoint (``global_step_<N>/flexkit_replay.pt``) and restored
on resume, so a resumed run replays what an uninterrupted one does.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from flexkit import RolloutBatch, SampleError
from flexkit_verl.replay import VerlReplay
from flexkit_verl.replay_rows import NON_TENSOR
from flexkit_verl.tq_rows import TAGS, put_rows, read_rows, storable_positions

__all__ = ["REPLAY_KEY_PREFIX", "TransferQueueReplay"]

#: The start of every TransferQueue key a replayed trajectory is written under.
REPLAY_KEY_PREFIX = "flexkit-replay-"


class TransferQueueReplay(VerlReplay):
    """The ``[replay]`` buffer of one v1 verl trainer and its TransferQueue side (see the module docstring)."""

    def train_meta(self, tq: Any, batch: Any, update: int, *, unit: int = 1) -> tuple[Any, list[str]]:
        """What update ``update`` trains on: ``batch`` (a ``KVBatchMeta``) followed by the replayed trajectories,
        written to ``tq`` under new keys and padded to a multiple of ``unit`` rows (verl's required batch
        multiple) with zero-weight copies; and those keys, for the caller to clear after the update (``batch``
        itself and no keys when nothing is replayed)."""
        fresh = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not fresh:
            return batch, []
        weights = "rollout_is_weights" if "rollout_is_weights" in (batch.fields or ()) else None
        storable = storable_positions(tq, [batch.keys[i] for i in fresh], batch.partition_id, weights=weights)
        # every field of the groups to store; with none, of one trajectory (of a group not stored) for the fields
        read = [fresh[p] for p in storable] if storable.size else fresh[:1]
        rows, jagged = read_rows(tq, [batch.keys[i] for i in read], batch.partition_id, [batch.tags[i] for i in read],
                                 update)
        self.buffer.padding.update(dict.fromkeys(jagged, "right"))
        replayed = self.replay_rows(rows, update)
        if replayed is None:
            return batch, []
        _check_fields(replayed, batch.fields, update)
        replayed = _padded_to(replayed, unit)
        new_keys = [f"{REPLAY_KEY_PREFIX}{update}-{i}_0_0" for i in range(replayed.batch_size)]
        tags = put_rows(tq, replayed, new_keys, batch.partition_id)
        meta = type(batch)(keys=[*batch.keys, *new_keys], tags=[*batch.tags, *tags], partition_id=batch.partition_id,
                           fields=batch.fields, extra_info=batch.extra_info)
        return meta, new_keys


#: Token-level fields a padding row carries as zeros (no loss, no gradient), where present.
_ZEROED = ("response_mask", "loss_mask", "advantages", "returns", "rollout_is_weights")


def _padded_to(rows: RolloutBatch, unit: int) -> RolloutBatch:
    """``rows`` followed by copies of its first row, up to a multiple of ``unit`` rows (a group of a v1 batch can
    hold fewer or more than ``rollout.n`` trajectories), each copy's mask, advantages and weights zeroed and its tag
    marked ``is_padding`` as verl marks its own padding rows."""
    pad = -rows.batch_size % max(unit, 1)
    if not pad:
        return rows
    padded = RolloutBatch.concat_rows([rows], [np.r_[np.arange(rows.batch_size), np.zeros(pad, dtype=np.int64)]])
    for name in _ZEROED:
        if name in padded:
            padded[name][rows.batch_size:] = 0
    tags = np.array(padded[TAGS], dtype=object)
    for i in range(rows.batch_size, padded.batch_size):
        tags[i] = json.dumps({**json.loads(str(tags[i])), "is_padding": True})
    padded[TAGS] = np.array(tags.tolist(), dtype=str)
    return padded


def _check_fields(rows: RolloutBatch, fields: list[str] | None, update: int) -> None:
    """A ``SampleError`` when the stored rows lack a field the update's batch names (verl reads every one)."""
    missing = [f for f in fields or () if f not in rows and NON_TENSOR + f not in rows]
    if missing:
        raise SampleError(f"[replay]: update {update}'s batch has fields the stored trajectories lack ({missing}); "
                          "replay needs the same fields every update: remove the [replay] table")
