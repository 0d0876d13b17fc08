"""Rollout replay in ``flexkit run``: each update also trains on informative groups that recent steps generated.

After DOTS (Sun et al. 2025, "Improving Data Efficiency for LLM Reinforcement Fine-tuning Through
Difficulty-targeted Online Data Selection and Rollout Replay", arXiv 2506.05316): a group of answers whose rewards
differ carries a gradient, and one step later it still carries nearly the same one, so training on it again
costs no generation. With ``[replay]`` (:class:`~flexkit.config.models.ReplayConfig`), each step:

1. rolls out ``[run] batch_size`` fresh tasks and computes their advantages, as without replay;
2. appends up to ``groups`` stored groups, newest first, each generated at most ``max_age`` steps before, to
   the batch the update trains on (:meth:`ReplayBuffer.extend`); every row of that batch gets ``replay_age``,
   the steps since it was generated (0: fresh). Replayed rows keep their advantages and their
   ``old_log_probs``, the log-probabilities of the policy that generated them, so the trainer's clipped
   importance ratio accounts for the policy having moved since (a trainer declares that it does with
   :attr:`flexkit.trainer.Trainer.supports_replay`);
3. after the update, stores the fresh batch's informative groups (a group with a non-zero advantage on a
   response token; a group whose answers all got the same reward has none under GRPO) and forgets the groups
   too old to be replayed again (:meth:`ReplayBuffer.store`).

Only fresh answers count as rollouts (``flexkit/run/rollouts``); ``flexkit/replay/groups`` and
``flexkit/replay/responses`` count what each update replayed. The buffer is part of the run's checkpoint, so a
resumed run replays what an uninterrupted one does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexkit.dynamic_sampling import concat_rows
from flexkit.errors import CheckpointError, SampleError
from flexkit.sample.batch import RolloutBatch

__all__ = ["REPLAY_AGE", "REPLAY_KEY", "ReplayBuffer"]

#: The training batch's per-row field: steps since the row was generated (0: generated this step).
REPLAY_AGE = "replay_age"
#: The run checkpoint's key (under ``extra``) of the buffer's state.
REPLAY_KEY = "replay"


def _check_batch(batch: Any, step: int) -> RolloutBatch:
    """``batch`` when it is a :class:`RolloutBatch` with the fields replay reads, else a ``SampleError``."""
    if not isinstance(batch, RolloutBatch):
        raise SampleError(f"[replay]: step {step}'s rollout batch is a {type(batch).__name__}; replay needs a "
                          "flexkit.RolloutBatch (the trainer's Rollout.batch)")
    batch.require(["advantages", "response_mask", "uid", "old_log_probs"], who="[replay]")
    return batch


def _informative_rows(batch: RolloutBatch) -> np.ndarray:
    """The rows of ``batch``'s groups that have a non-zero advantage on a response token."""
    adv = batch["advantages"].detach()
    mask = batch["response_mask"].detach()
    if adv.ndim == 1:
        adv = adv[:, None]
    row_has = ((adv != 0) & (mask != 0)).any(dim=1).cpu().numpy()
    gid, groups = batch.group_index()
    group_has = np.zeros(groups, dtype=bool)
    np.logical_or.at(group_has, gid, row_has)
    return np.flatnonzero(group_has[gid])


class ReplayBuffer:
    """The groups a run may replay, with the step that generated each row (see the module docstring)."""

    def __init__(self, groups: int, max_age: int) -> None:
        self.groups = groups
        self.max_age = max_age
        self._rows: RolloutBatch | None = None
        self._born = np.empty(0, dtype=np.int64)
        #: What the latest :meth:`extend` added: groups and responses.
        self.last_groups = 0
        self.last_responses = 0

    @property
    def stored_groups(self) -> int:
        """Groups held now."""
        return 0 if self._rows is None else self._rows.group_index()[1]

    def extend(self, batch: RolloutBatch, step: int) -> RolloutBatch:
        """``batch`` (the step's fresh rows, ``replay_age`` 0) followed by up to ``groups`` stored groups that
        ``step`` may replay, newest first (``replay_age`` = ``step`` − the step that generated them). Adds
        ``replay_age`` to ``batch`` itself."""
        batch = _check_batch(batch, step)
        batch[REPLAY_AGE] = np.zeros(batch.batch_size, dtype=np.int64)
        self.last_groups = self.last_responses = 0
        if self._rows is None:
            return batch
        age = step - self._born
        gid, _ = self._rows.group_index()
        eligible = np.flatnonzero((age >= 1) & (age <= self.max_age))
        if not eligible.size:
            return batch
        newest = eligible[np.argsort(-self._born[eligible], kind="stable")]  # row order kept within a step
        groups_in_order = gid[newest][np.sort(np.unique(gid[newest], return_index=True)[1])]
        chosen = groups_in_order[:self.groups]
        picked = np.zeros(int(gid.max()) + 1, dtype=bool)
        picked[chosen] = True
        rows = newest[picked[gid[newest]]]
        replayed = concat_rows([self._rows], [rows])
        replayed[REPLAY_AGE] = age[rows]
        self.last_groups, self.last_responses = len(chosen), len(rows)
        try:
            return concat_rows([batch, replayed], [np.arange(batch.batch_size), np.arange(replayed.batch_size)])
        except SampleError as exc:
            raise SampleError(f"[replay]: step {step}'s batch cannot be joined with the stored groups: {exc}") from None

    def store(self, batch: RolloutBatch, step: int) -> None:
        """Keep ``batch``'s informative groups (generated at ``step``) and forget the groups no later step may
        replay (older than ``max_age`` steps from the next one)."""
        rows = _informative_rows(_check_batch(batch, step))
        keep_old = np.flatnonzero(step + 1 - self._born <= self.max_age) if self._rows is not None else None
        parts: list[RolloutBatch] = []
        selections: list[np.ndarray] = []
        born: list[np.ndarray] = []
        if self._rows is not None and keep_old is not None and keep_old.size:
            parts.append(self._rows)
            selections.append(keep_old)
            born.append(self._born[keep_old])
        if rows.size:
            fresh = concat_rows([batch], [rows])
            if REPLAY_AGE in fresh:
                fresh = RolloutBatch.from_dict({k: fresh[k] for k in fresh if k != REPLAY_AGE})
            parts.append(fresh)
            selections.append(np.arange(fresh.batch_size))
            born.append(np.full(fresh.batch_size, step, dtype=np.int64))
        if not parts:
            self._rows, self._born = None, np.empty(0, dtype=np.int64)
            return
        try:
            self._rows = concat_rows(parts, selections)
        except SampleError as exc:
            raise SampleError(f"[replay]: step {step}'s groups cannot be stored with the earlier ones: {exc}") from None
        self._born = np.concatenate(born)

    # -- checkpoint state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The stored rows as arrays (``columns``; ``tensors`` names the fields that are torch tensors) and the
        step that generated each row (``born``)."""
        columns: dict[str, np.ndarray] = {}
        tensors: list[str] = []
        if self._rows is not None:
            for name in self._rows:
                value = self._rows[name]
                if hasattr(value, "detach"):
                    tensors.append(name)
                    value = value.detach().cpu().numpy()
                columns[name] = np.array(value)
        return {"born": self._born.copy(), "columns": columns, "tensors": tensors}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output; :class:`~flexkit.errors.CheckpointError` when it does not fit."""
        if not isinstance(state, Mapping) or not {"born", "columns", "tensors"} <= set(state):
            raise CheckpointError("the [replay] buffer's state is missing or damaged (a table with 'born', "
                                  "'columns' and 'tensors')")
        born, columns, tensors = state["born"], state["columns"], state["tensors"]
        if (not isinstance(born, np.ndarray) or born.ndim != 1 or born.dtype.kind not in "iu"
                or not isinstance(columns, Mapping) or not isinstance(tensors, list)
                or not all(isinstance(n, str) and n in columns for n in tensors)
                or not all(isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == len(born)
                           for v in columns.values())
                or (len(born) and "uid" not in columns)):
            raise CheckpointError("the [replay] buffer's state is damaged: 'born' must be integer steps, one per "
                                  "stored row, and every column one value per row")
        if not len(born):
            self._rows, self._born = None, np.empty(0, dtype=np.int64)
            return
        import torch

        rows = RolloutBatch()
        for name, value in columns.items():
            rows[name] = torch.from_numpy(np.array(value)) if name in tensors else np.array(value)
        self._rows, self._born = rows, born.astype(np.int64)
