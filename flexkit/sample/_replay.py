"""Rollout replay in ``flexkit run``: each update also trains on informative groups that recent steps generated.

After DOTS (Sun et al. 2025, "Improving Data Efficiency for LLM Reinforcement Fine-tuning Through
Difficulty-targeted Online Data Selection and Rollout Replay", arXiv 2506.05316): a group of answers whose rewards
differ carries a gradient, and one step later it still carries nearly the same one, so training on it again
costs no generation. With ``[replay]`` (:class:`~flexkit.config._models.ReplayConfig`), each step:

1. rolls out ``[run] batch_size`` fresh tasks and computes their advantages, as without replay;
2. appends up to ``groups`` stored groups, newest first, each generated at most ``max_age`` steps before, to
   the batch the update trains on (:meth:`ReplayBuffer.extend`); every row of that batch gets ``replay_age``,
   the steps since it was generated (0: fresh). Replayed rows keep their advantages and their
   ``old_log_probs``, the log-probabilities of the policy that generated them, so the trainer's clipped
   importance ratio accounts for the policy having moved since (a trainer declares that it does with
   :attr:`flexkit.Trainer.supports_replay`);
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

from flexkit._lazy import is_tensor
from flexkit.errors import CheckpointError, SampleError
from flexkit.sample._batch import PadSide, RolloutBatch

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


def _as_float_array(value: Any) -> np.ndarray:
    """A tensor or array as a float64 numpy array (on the CPU)."""
    if is_tensor(value):
        import torch

        out: np.ndarray = value.detach().to("cpu", torch.float64).numpy()
        return out
    return np.asarray(value, dtype=np.float64)


def _refuse_objects(rows: RolloutBatch, step: int) -> None:
    """A ``SampleError`` naming a field of Python objects: the buffer goes into checkpoints as arrays."""
    for name in rows:
        value = rows[name]
        if isinstance(value, np.ndarray) and value.dtype.kind == "O":
            raise SampleError(f"[replay]: step {step}'s field {name!r} holds Python objects; replay keeps the rows "
                              "it stores in checkpoints as arrays: give that field numbers or strings")


def _informative_rows(batch: RolloutBatch) -> np.ndarray:
    """The rows of ``batch``'s groups that have a non-zero advantage on a response token."""
    if not batch.batch_size:
        return np.empty(0, dtype=np.int64)
    adv = _as_float_array(batch["advantages"])
    mask = _as_float_array(batch["response_mask"])
    adv = adv.reshape(len(adv), -1)
    mask = mask.reshape(len(mask), -1)
    if mask.shape[1] not in (1, adv.shape[1]):
        raise SampleError(f"[replay]: advantages {adv.shape} and response_mask {mask.shape} do not fit")
    row_has = ((adv != 0) & (mask != 0)).any(axis=1)
    gid, groups = batch.group_index()
    group_has = np.zeros(groups, dtype=bool)
    np.logical_or.at(group_has, gid, row_has)
    return np.flatnonzero(group_has[gid])


def _newest_groups(born: np.ndarray, gid: np.ndarray, rows: np.ndarray, limit: int) -> np.ndarray:
    """Of ``rows``, those of the first ``limit`` groups when rows are taken newest step first (row order kept
    within a step), in that order."""
    newest = rows[np.argsort(-born[rows], kind="stable")]
    in_order = gid[newest][np.sort(np.unique(gid[newest], return_index=True)[1])]
    picked = np.zeros(int(gid.max()) + 1 if gid.size else 0, dtype=bool)
    picked[in_order[:limit]] = True
    chosen: np.ndarray = newest[picked[gid[newest]]]
    return chosen


def _on_devices_of(rows: RolloutBatch, like: RolloutBatch) -> RolloutBatch:
    """``rows`` with each tensor field on the device of the same field of ``like`` (a resumed buffer is on the
    CPU; a GPU trainer's fresh batch is not)."""
    for name in rows:
        value, target = rows[name], like.get(name)
        if is_tensor(value) and is_tensor(target) and value.device != target.device:
            rows[name] = value.to(target.device)
    return rows


class ReplayBuffer:
    """The groups a run may replay, with the step that generated each row (see the module docstring)."""

    def __init__(self, groups: int, max_age: int, *, padding: Mapping[str, PadSide] | None = None) -> None:
        """Keep up to ``groups`` groups for ``max_age`` steps; ``padding`` names the tensor fields besides the
        token-level ones whose widths may change from step to step, and the side their padding goes on
        (:meth:`RolloutBatch.concat_rows`: a host's left-padded prompts, ``{"prompt_ids": "left", ...}``)."""
        self.groups = groups
        self.max_age = max_age
        self.padding: dict[str, PadSide] = dict(padding or {})
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
        ``replay_age`` to ``batch`` itself (a field of that name already there is a ``SampleError``)."""
        batch = _check_batch(batch, step)
        if REPLAY_AGE in batch:
            raise SampleError(f"[replay]: step {step}'s rollout batch already has a field {REPLAY_AGE!r}; replay "
                              "writes that field (steps since each row was generated): rename the trainer's")
        batch[REPLAY_AGE] = np.zeros(batch.batch_size, dtype=np.int64)
        self.last_groups = self.last_responses = 0
        if self._rows is None:
            return batch
        age = step - self._born
        gid, _ = self._rows.group_index()
        eligible = np.flatnonzero((age >= 1) & (age <= self.max_age))
        if not eligible.size:
            return batch
        rows = _newest_groups(self._born, gid, eligible, self.groups)
        replayed = _on_devices_of(RolloutBatch.concat_rows([self._rows], [rows], padding=self.padding), batch)
        replayed[REPLAY_AGE] = age[rows]
        self.last_groups, self.last_responses = len(np.unique(gid[rows])), len(rows)
        try:
            return RolloutBatch.concat_rows([batch, replayed],
                                            [np.arange(batch.batch_size), np.arange(replayed.batch_size)],
                                            padding=self.padding)
        except SampleError as exc:
            raise SampleError(f"[replay]: step {step}'s batch cannot be joined with the stored groups (replay "
                              f"needs the same fields, and the same widths outside the token fields, every "
                              f"step): {exc}") from None

    def train_batch(self, batch: RolloutBatch, step: int) -> RolloutBatch:
        """What ``step``'s update trains on (:meth:`extend`), with ``batch``'s informative groups stored for later
        steps (:meth:`store`) before the update can write into it."""
        trained = self.extend(batch, step)
        self.store(batch, step)
        return trained

    def store(self, batch: RolloutBatch, step: int) -> None:
        """Keep copies of ``batch``'s informative groups (generated at ``step``), and of the stored groups a
        later step may still replay: generated at most ``max_age`` steps before the next one, and among the
        newest ``groups`` (no later step draws any other). Call it before the update, so that nothing the
        trainer writes into the batch is kept."""
        batch = _check_batch(batch, step)
        if REPLAY_AGE in batch:  # added by extend: the stored rows leave it out (a view, no copy of the tensors)
            batch = RolloutBatch.from_dict({k: batch[k] for k in batch if k != REPLAY_AGE})
        rows = _informative_rows(batch)
        parts: list[RolloutBatch] = []
        selections: list[np.ndarray] = []
        born: list[np.ndarray] = []
        if self._rows is not None:
            keep_old = np.flatnonzero(step + 1 - self._born <= self.max_age)
            if keep_old.size:
                parts.append(self._rows)
                selections.append(keep_old)
                born.append(self._born[keep_old])
        if rows.size:
            _refuse_objects(batch, step)
            parts.append(batch)
            selections.append(rows)
            born.append(np.full(rows.size, step, dtype=np.int64))
        if not parts:
            self._rows, self._born = None, np.empty(0, dtype=np.int64)
            return
        try:
            joined = RolloutBatch.concat_rows(parts, selections, padding=self.padding)
        except SampleError as exc:
            raise SampleError(f"[replay]: step {step}'s groups cannot be stored with the earlier ones (replay "
                              f"needs the same fields, and the same widths outside the token fields, every "
                              f"step): {exc}") from None
        joined_born = np.concatenate(born)
        gid, _ = joined.group_index()
        keep = np.sort(_newest_groups(joined_born, gid, np.arange(len(joined_born)), self.groups))
        if keep.size < len(joined_born):
            joined, joined_born = RolloutBatch.concat_rows([joined], [keep], padding=self.padding), joined_born[keep]
        self._rows, self._born = joined, joined_born

    # -- checkpoint state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The stored rows as arrays (``columns``), the fields that are torch tensors and their dtypes
        (``tensors``: ``{name: dtype}``; bfloat16 is kept as float32 arrays) and the step that generated each
        row (``born``)."""
        columns: dict[str, np.ndarray] = {}
        tensors: dict[str, str] = {}
        if self._rows is not None:
            for name in self._rows:
                value = self._rows[name]
                if is_tensor(value):
                    import torch

                    tensors[name] = str(value.dtype).removeprefix("torch.")
                    value = value.detach().cpu()
                    value = (value.to(torch.float32) if value.dtype == torch.bfloat16 else value).numpy()
                columns[name] = np.array(value)
        return {"born": self._born.copy(), "columns": columns, "tensors": tensors}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s output; :class:`~flexkit.errors.CheckpointError` when it does not fit."""
        problem = _state_problem(state)
        if problem:
            raise CheckpointError(f"the [replay] buffer's state is damaged: {problem}")
        born, columns, tensors = state["born"], state["columns"], state["tensors"]
        if not len(born):
            self._rows, self._born = None, np.empty(0, dtype=np.int64)
            return
        import torch

        rows = RolloutBatch()
        try:
            for name, value in columns.items():
                if name in tensors:
                    rows[name] = torch.from_numpy(np.array(value)).to(getattr(torch, tensors[name]))
                else:
                    rows[name] = np.array(value)
        except (TypeError, ValueError, RuntimeError, SampleError) as exc:
            raise CheckpointError(f"the [replay] buffer's state is damaged: {exc}") from None
        gid, groups = rows.group_index()
        first = np.full(groups, -1, dtype=np.int64)
        first[gid] = born
        if (first[gid] != born).any():
            raise CheckpointError("the [replay] buffer's state is damaged: a stored group's rows were generated "
                                  "at different steps")
        self._rows, self._born = rows, born.astype(np.int64)


#: The fields every stored row has (the ones replay reads).
_REQUIRED = ("uid", "advantages", "response_mask", "old_log_probs")


def _state_problem(state: Any) -> str | None:
    """What is wrong with a :meth:`ReplayBuffer.state_dict` output read back from a checkpoint (``None``: fine)."""
    if not isinstance(state, Mapping) or not {"born", "columns", "tensors"} <= set(state):
        return "missing, or not a table with 'born', 'columns' and 'tensors'"
    born, columns, tensors = state["born"], state["columns"], state["tensors"]
    if not isinstance(born, np.ndarray) or born.ndim != 1 or born.dtype.kind not in "iu" or (born < 0).any() \
            or (born.size and int(born.max()) > np.iinfo(np.int64).max):
        return "'born' must be steps (integers from 0), one per stored row"
    if not isinstance(columns, Mapping) or not all(
            isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == len(born) for v in columns.values()):
        return "every column must be an array of one value per stored row"
    if not isinstance(tensors, Mapping) or not all(
            isinstance(n, str) and n in columns and isinstance(d, str) and d in _TENSOR_DTYPES
            and columns[n].dtype.kind in "biuf" for n, d in tensors.items()):
        return "'tensors' must name numeric columns with a torch dtype each"
    if len(born) and (missing := [n for n in _REQUIRED if n not in columns]):
        return f"the stored rows lack {', '.join(missing)}"
    if REPLAY_AGE in columns:
        return f"the stored rows hold {REPLAY_AGE!r}, which replay writes itself"
    return None


#: Torch dtypes a stored tensor field may have.
_TENSOR_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                            "bool"})
