"""Trajectories of verl's v1 trainer (TransferQueue keys) as rows the core's :class:`flexkit.host.ReplayBuffer`
can store, and stored rows written back to TransferQueue under new keys.

TransferQueue hands each field back batched: variable-length tensors as jagged nested tensors (``input_ids``,
``responses``, ``response_mask``, ``old_log_probs``, ``advantages``, ...), fixed-size ones as plain tensors, and
Python values (``uid``, ``extra_info``, ``data_source``, ...) as tensordict's ``NonTensorStack``. The buffer keeps
tensors and numeric or string arrays only (its state goes into checkpoints), so :func:`read_rows` keeps

- a jagged field right-padded with zeros, with each row's length in ``length:<name>``;
- a plain tensor as it is;
- a non-tensor field under ``non_tensor:<name>``: numbers as they are, anything else as one JSON string per row
  (:func:`~flexkit_verl.replay_rows.json_column`, which refuses multimodal inputs);
- each row's TransferQueue tags as JSON under ``tags``, and ``uid`` as strings (the buffer's groups).

:func:`put_rows` undoes it: each jagged field cut back to its rows' lengths, so a replayed trajectory reaches the
actor exactly as it was stored.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from flexkit import RolloutBatch, SampleError
from flexkit.host import REPLAY_AGE
from flexkit_verl.replay_rows import NON_TENSOR, json_column, non_tensor_values, plain
from flexkit_verl.tq_batch import as_list, padded

__all__ = ["LENGTH", "TAGS", "put_rows", "read_rows", "storable_positions"]

#: The prefix of the column holding each row's length of a jagged field.
LENGTH = "length:"
#: The column holding each row's TransferQueue tags (JSON).
TAGS = "tags"


def read_rows(tq: Any, keys: list[str], partition_id: str, tags: list[dict[str, Any]], step: int
              ) -> tuple[RolloutBatch, list[str]]:
    """Every field of ``keys`` (their ``tags`` beside them) as storable rows, and the names of the jagged fields
    (whose widths change from step to step: the buffer right-pads them)."""
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id)
    fields: dict[str, Any] = {}
    jagged: list[str] = []
    for name in data.keys():  # noqa: SIM118 - iterating a TensorDict walks rows
        value = data[name]
        if isinstance(value, torch.Tensor) and value.is_nested:
            rows = list(value.unbind())
            fields[LENGTH + name] = np.array([int(r.shape[0]) for r in rows], dtype=np.int64)
            fields[name] = torch.nested.to_padded_tensor(
                torch.nested.as_nested_tensor(rows, layout=torch.jagged), 0) if rows else value
            jagged.append(name)
        elif isinstance(value, torch.Tensor):
            fields[name] = value
        else:
            values = np.empty(len(keys), dtype=object)
            values[:] = as_list(value)
            numeric = bool(len(values)) and all(isinstance(v, int | float | np.number) for v in values)
            fields[NON_TENSOR + name] = np.asarray(values.tolist()) if numeric else json_column(name, values, step)
    if NON_TENSOR + "uid" not in fields:
        raise SampleError(f"[replay]: step {step}'s trajectories have no 'uid' (verl's group of each response)")
    fields["uid"] = np.array([str(u) for u in non_tensor_values(fields[NON_TENSOR + "uid"])], dtype=str)
    fields[TAGS] = np.array([json.dumps(t, default=plain) for t in tags], dtype=str)
    return RolloutBatch.from_dict(fields), jagged


def storable_positions(tq: Any, keys: list[str], partition_id: str, *, weights: str | None) -> np.ndarray:
    """The positions in ``keys`` of the trajectories whose group the buffer may store: one with a non-zero
    advantage on a response token and, with a ``weights`` field (``rollout_is_weights``), a non-zero weight on one.
    Reads only those fields, so that every field is read for the stored groups alone."""
    names = ["uid", "advantages", "response_mask", *([weights] if weights else [])]
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=names)
    uids = np.array([str(u) for u in as_list(data["uid"])])
    mask = padded(data["response_mask"]) != 0
    ok = ((padded(data["advantages"]) != 0) & mask).any(dim=1).numpy()
    _, gid = np.unique(uids, return_inverse=True)
    informative = np.zeros(int(gid.max()) + 1 if gid.size else 0, dtype=bool)
    np.logical_or.at(informative, gid, ok)
    keep = informative[gid]
    if weights and weights in data.keys():  # noqa: SIM118 - iterating a TensorDict walks rows
        live = np.zeros_like(informative)
        np.logical_or.at(live, gid, ((padded(data[weights]) != 0) & mask).any(dim=1).numpy())
        keep &= live[gid]
    positions: np.ndarray = np.flatnonzero(keep)
    return positions


def _values(column: Any) -> list[Any]:
    """A stored non-tensor column as the Python values TransferQueue held."""
    values = non_tensor_values(column)
    return values.tolist() if values.dtype.kind in "biuf" else list(values)


def put_rows(tq: Any, rows: RolloutBatch, keys: list[str], partition_id: str) -> list[dict[str, Any]]:
    """Write stored ``rows`` (:func:`read_rows`, as the buffer hands them back) to TransferQueue under ``keys``,
    each field as verl holds it; returns their tags (as stored)."""
    from tensordict import NonTensorStack, TensorDict  # type: ignore[import-untyped]

    fields: dict[str, Any] = {}
    for name in rows:
        value = rows[name]
        if name in ("uid", TAGS, REPLAY_AGE) or name.startswith(LENGTH):
            continue
        if name.startswith(NON_TENSOR):
            fields[name.removeprefix(NON_TENSOR)] = NonTensorStack(*_values(value))
        elif LENGTH + name in rows:
            lengths = np.asarray(rows[LENGTH + name])
            fields[name] = torch.nested.as_nested_tensor([value[i, : int(n)] for i, n in enumerate(lengths)],
                                                         layout=torch.jagged)
        else:
            fields[name] = value
    tags = [json.loads(str(t)) for t in np.asarray(rows[TAGS])]
    tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=TensorDict(fields, batch_size=len(keys)),
                    tags=tags)
    return tags
