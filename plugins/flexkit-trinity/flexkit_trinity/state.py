"""A flexkit selector's state as plain JSON, for Trinity-RFT's explorer checkpoint.

Trinity-RFT (0.6) saves each taskset reader's ``state_dict()`` with ``json.dump`` into
``<checkpoint_job_dir>/<explorer name>_meta.json`` (its ``StateManager.save_explorer``). A flexkit selector's state
holds numpy arrays (posteriors, scores) and big RNG integers, so :func:`encode` turns it into JSON values: the
tree keeps its shape, each array becomes ``{"__ndarray__": "a<k>"}`` and all arrays travel together as one
compressed ``.npz`` written with ``allow_pickle=False`` and base64-encoded. :func:`decode` inverts it exactly
(float64 bits, dtypes and shapes kept). No pickle anywhere.
"""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["FORMAT", "decode", "encode"]

#: Version of the encoding, stored with it.
FORMAT = 1

_ARRAY = "__ndarray__"
_ITEMS = "__items__"


def encode(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (plain data and numpy arrays) as a JSON-serialisable dict ``{"format", "tree", "arrays"}``."""
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(state, arrays)
    buffer = io.BytesIO()
    if arrays:
        np.savez_compressed(buffer, allow_pickle=False, **arrays)
    return {"format": FORMAT, "tree": tree, "arrays": base64.b64encode(buffer.getvalue()).decode("ascii")}


def decode(blob: Mapping[str, Any]) -> Any:
    """The state :func:`encode` produced (after a JSON round trip); ``ValueError`` if ``blob`` is not one."""
    if not isinstance(blob, Mapping) or blob.get("format") != FORMAT or "tree" not in blob:
        raise ValueError(f"not a flexkit selector state of format {FORMAT}")
    raw = base64.b64decode(blob.get("arrays", ""), validate=True)
    arrays: dict[str, np.ndarray] = {}
    if raw:
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ValueError(f"the selector state's arrays are unreadable: {exc}") from None
    return _decode(blob["tree"], arrays)


def _encode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("object arrays cannot be saved without pickle")
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {_ARRAY: key}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays)
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and _ARRAY not in obj and _ITEMS not in obj:
            return {k: _encode(v, arrays) for k, v in obj.items()}
        return {_ITEMS: [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, arrays) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot save a {type(obj).__name__} in a selector state (plain data and numpy arrays only)")


def _decode(obj: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_ARRAY}:
            return arrays[obj[_ARRAY]]
        if set(obj) == {_ITEMS}:
            return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in obj[_ITEMS]}
        return {k: _decode(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    return obj


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key
