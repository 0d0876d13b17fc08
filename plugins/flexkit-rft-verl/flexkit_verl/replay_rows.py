"""A verl ``DataProto`` as rows the core's :class:`flexkit.host.ReplayBuffer` can store, and stored rows back.

The buffer keeps tensors and numeric or string arrays only (its state goes into checkpoints as arrays), while a
verl batch carries Python objects in ``non_tensor_batch`` (``uid``, ``extra_info``, ``reward_model``,
``raw_prompt``, ``multi_modal_inputs``, ...). :func:`storable_rows` keeps every tensor field under its own name and
every non-tensor field under ``non_tensor:<name>``: numeric arrays as they are, anything else as one JSON string per
row (numpy values as plain numbers and lists). The buffer groups rows by a string ``uid`` made from verl's.
:func:`data_proto` turns stored rows back into a ``DataProto`` with verl's fields (a JSON field comes back as plain
data: lists where the row held numpy arrays). Multimodal inputs are refused: they are not plain data.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from flexkit import RolloutBatch, SampleError
from flexkit.host import REPLAY_AGE

__all__ = ["NON_TENSOR", "data_proto", "json_column", "non_tensor_values", "plain", "storable_rows"]

#: The prefix of a stored non-tensor field's name.
NON_TENSOR = "non_tensor:"


def plain(value: Any) -> Any:
    """A numpy or torch value as plain data, for ``json.dumps(default=plain)``; anything else is a ``TypeError``."""
    if isinstance(value, np.ndarray | torch.Tensor):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__name__}")


def json_column(name: str, values: np.ndarray, step: int) -> np.ndarray:
    """One JSON string per row of a non-numeric non-tensor field (``SampleError``: multimodal inputs, or values
    that are not plain data)."""
    if name == "multi_modal_inputs" and any(bool(v) for v in values):
        raise SampleError(f"[replay]: step {step}'s batch has multimodal inputs (verl's {name!r}); replay stores text "
                          "rollouts only: remove the [replay] table or use a text model")
    try:
        return np.array([json.dumps(v, default=plain) for v in values], dtype=str)
    except (TypeError, ValueError) as exc:
        raise SampleError(f"[replay]: step {step}'s non-tensor field {name!r} holds values replay cannot store "
                          f"({exc}); replay keeps plain data (numbers, strings, lists, dicts): remove the [replay] "
                          "table or leave that field out of the batch") from None


def storable_rows(data: Any, step: int) -> RolloutBatch:
    """``data`` (a ``DataProto``) as a :class:`~flexkit.RolloutBatch` the buffer stores: its tensors (not copied),
    its non-tensor fields under ``non_tensor:<name>`` and ``uid`` as strings."""
    fields: dict[str, Any] = {k: data.batch[k] for k in data.batch.keys()}  # noqa: SIM118 - a TensorDict walks rows
    for name, values in data.non_tensor_batch.items():
        values = np.asarray(values)
        numeric = values.dtype.kind in "biuf"
        fields[NON_TENSOR + name] = values if numeric else json_column(name, values, step)
    if "uid" not in data.non_tensor_batch:
        raise SampleError(f"[replay]: step {step}'s batch has no 'uid' (verl's group of each response)")
    fields["uid"] = np.array([str(u) for u in data.non_tensor_batch["uid"]], dtype=str)
    return RolloutBatch.from_dict(fields)


def non_tensor_values(value: Any) -> np.ndarray:
    """A stored non-tensor field as verl holds it: a numeric array, or an object array of the decoded JSON."""
    if isinstance(value, torch.Tensor):  # a numeric array of two or more dimensions comes back as a tensor
        out: np.ndarray = value.cpu().numpy()
        return out
    values = np.asarray(value)
    if values.dtype.kind in "biuf":
        return values
    decoded = np.empty(len(values), dtype=object)
    decoded[:] = [json.loads(str(v)) for v in values]
    return decoded


def data_proto(rows: RolloutBatch) -> Any:
    """Stored rows (:func:`storable_rows`, as the buffer hands them back) as a verl ``DataProto``: the tensors, and
    the non-tensor fields under their verl names (the buffer's own ``uid`` and ``replay_age`` are left out)."""
    from verl import DataProto

    tensors: dict[str, torch.Tensor] = {}
    non_tensors: dict[str, np.ndarray] = {}
    for name in rows:
        if name.startswith(NON_TENSOR):
            non_tensors[name.removeprefix(NON_TENSOR)] = non_tensor_values(rows[name])
        elif name not in ("uid", REPLAY_AGE):
            tensors[name] = rows[name]
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={})
