"""Pipeline state in a form ``torch.load(..., weights_only=True)`` accepts, and back.

A pipeline's state holds numpy arrays and numpy scalars (selector posteriors, RNG states). ``torch.save`` pickles
them, but ``torch.load``'s default ``weights_only=True`` refuses numpy objects. :func:`to_portable` turns numeric
arrays into tensors (other arrays into flat lists) under a marker key, numpy scalars into Python scalars, tuples into
lists; :func:`from_portable` restores the arrays with their dtypes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: The key marking an encoded numpy array.
ARRAY_KEY = "__flexkit_ndarray__"


def to_portable(obj: Any) -> Any:
    """``obj`` with numpy arrays encoded as ``{ARRAY_KEY: tensor_or_list, "dtype": str, "shape": list}``."""
    import torch

    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        try:
            data: Any = torch.from_numpy(arr.copy())
        except TypeError:  # object, string or other dtypes torch lacks
            data = arr.ravel().tolist()
        return {ARRAY_KEY: data, "dtype": arr.dtype.str if arr.dtype != object else "object", "shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Mapping):
        return {k: to_portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_portable(v) for v in obj]
    return obj


def from_portable(obj: Any) -> Any:
    """Undo :func:`to_portable`: encoded arrays become numpy arrays of their saved dtype and shape."""
    import torch

    if isinstance(obj, Mapping):
        if ARRAY_KEY in obj:
            data = obj[ARRAY_KEY]
            dtype = np.dtype(object) if obj["dtype"] == "object" else np.dtype(obj["dtype"])
            if isinstance(data, torch.Tensor):
                arr = data.numpy().astype(dtype, copy=True)
            elif dtype.kind == "O":
                arr = np.empty(len(data), dtype=object)
                arr[:] = data
            else:
                arr = np.asarray(data, dtype=dtype)
            return arr.reshape(obj["shape"])
        return {k: from_portable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_portable(v) for v in obj]
    return obj
