"""Reading a v1 training batch (``KVBatchMeta`` keys in TransferQueue) as flexkit needs it, and writing
per-token weights back.

verl's v1 trainer keeps each trajectory in TransferQueue under ``{uid}_{session}_{index}``, with the dataset
row's fields (``extra_info`` among them, so :class:`~flexkit_verl.IndexedDataset`'s index travels) and the
rollout's (``rm_scores``, ``response_mask``, ...) as jagged tensors.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from flexkit_verl.dataset import INDEX_KEY

#: The fields :func:`read_batch` fetches.
FIELDS = ("uid", "rm_scores", "response_mask", "extra_info")


@runtime_checkable
class _Listable(Protocol):
    """A batch field with ``tolist``: tensordict's ``NonTensorStack`` and ``NonTensorData``, tensors, arrays."""

    def tolist(self) -> Any:
        """The field's values as a (nested) list."""
        ...


@runtime_checkable
class _Wrapped(Protocol):
    """One value of a non-tensor field as tensordict wraps it (``NonTensorData``: the value in ``data``)."""

    data: Any


def as_list(value: Any) -> list[Any]:
    """A non-tensor field of a TransferQueue batch (NonTensorStack, list-like) as a list of Python values."""
    items = value.tolist() if isinstance(value, _Listable) else list(value)
    return [item.data if isinstance(item, _Wrapped) else item for item in items]


def _is_nested(value: Any) -> bool:
    """Whether ``value`` is a nested (jagged) tensor, as TransferQueue returns variable-length fields."""
    return isinstance(value, torch.Tensor) and value.is_nested


def padded(value: Any) -> torch.Tensor:
    """A batch field as a dense tensor: a nested (jagged) one right-padded with zeros."""
    dense: torch.Tensor = value.to_padded_tensor(0) if _is_nested(value) else value
    return dense


def _response_lengths(mask: Any) -> list[int]:
    if _is_nested(mask):
        return [int(n) for n in mask.offsets().diff().tolist()]
    return [int(mask.shape[-1])] * int(mask.shape[0])


def read_batch(tq: Any, keys: list[str], partition_id: str, *, index_key: str = INDEX_KEY) -> dict[str, Any]:
    """``uid``, padded ``token_level_scores`` (from ``rm_scores``) and ``response_mask``, the response
    ``lengths`` and the dataset ``indices`` (``None`` when the rows carry none) of ``keys``."""
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(FIELDS))
    extra = as_list(data["extra_info"]) if "extra_info" in data.keys() else []  # noqa: SIM118
    indices = None
    if extra and all(isinstance(e, dict) and index_key in e for e in extra):
        indices = np.asarray([int(e[index_key]) for e in extra], dtype=np.int64)
    mask = data["response_mask"]
    return {
        "uid": np.asarray(as_list(data["uid"]), dtype=object),
        "token_level_scores": padded(data["rm_scores"]).float(),
        "response_mask": padded(mask).float(),
        "lengths": _response_lengths(mask),
        "indices": indices,
    }


def write_token_weights(tq: Any, keys: list[str], partition_id: str, weights: torch.Tensor, lengths: list[int],
                        *, field: str = "rollout_is_weights") -> None:
    """Store ``weights`` (B, T padded) under ``field`` as jagged per-response tensors, as verl stores its own
    ``rollout_is_weights``; the v1 policy loss multiplies them into the per-token loss."""
    from tensordict import TensorDict  # type: ignore[import-untyped]

    rows = [weights[i, :n].float() for i, n in enumerate(lengths)]
    nested = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=TensorDict({field: nested}, batch_size=len(keys)))


def read_validation(tq: Any, keys: list[str], partition_id: str, columns: list[str]) -> dict[str, Any]:
    """``uid``, each response's reward (``rm_scores`` summed) and the row values of ``columns`` (those the
    trajectories hold) of validation ``keys``."""
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["uid", "rm_scores", *columns])
    present = set(data.keys())
    return {
        "uid": [str(u) for u in as_list(data["uid"])],
        "rewards": padded(data["rm_scores"]).double().sum(-1).tolist(),
        "values": {name: as_list(data[name]) for name in columns if name in present},
    }
