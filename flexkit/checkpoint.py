"""Crash-safe checkpoints of plain-data state: JSON for structure, one ``.npz`` for numpy arrays.

No pickle anywhere: arrays are saved with ``numpy.savez`` and loaded with ``allow_pickle=False``; everything else
is JSON. A checkpoint directory holds ``state.json`` (the commit point, replaced atomically) and the arrays file
it names. Writing goes: arrays to a new uniquely named file, fsync; ``state.json`` to a temp file, fsync, rename
over the old one, fsync the directory; then older arrays files are removed. A crash at any moment leaves either
the previous checkpoint or the new one loadable, never a mix.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flexkit.errors import CheckpointError

#: Layout version of ``state.json``.
FORMAT_VERSION = 1
STATE_FILE = "state.json"


def _encode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise CheckpointError("object arrays cannot be checkpointed (no pickle); use numeric arrays")
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {"__ndarray__": key}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and "__ndarray__" not in obj and "__items__" not in obj:
            return {k: _encode(v, arrays) for k, v in obj.items()}
        return {"__items__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, arrays) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CheckpointError(f"cannot checkpoint a {type(obj).__name__}: state must be plain data and numpy arrays")


def _decode(obj: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__ndarray__"}:
            return arrays[obj["__ndarray__"]]
        if set(obj) == {"__items__"}:
            return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in obj["__items__"]}
        return {k: _decode(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    return obj


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_state(directory: str | os.PathLike[str], state: Mapping[str, Any], *, meta: Mapping[str, Any]) -> Path:
    """Atomically write ``state`` (plain data + numpy arrays) and ``meta`` (e.g. a fingerprint) to ``directory``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    body = {"format_version": FORMAT_VERSION, "meta": _encode(dict(meta), arrays), "state": _encode(state, arrays)}
    arrays_name = f"arrays-{uuid.uuid4().hex}.npz"
    body["arrays"] = arrays_name
    arrays_path = root / arrays_name
    with open(arrays_path, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    tmp = root / f".{STATE_FILE}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / STATE_FILE)
    _fsync_dir(root)
    for stale in root.glob("arrays-*.npz"):
        if stale.name != arrays_name:
            stale.unlink(missing_ok=True)
    for stale in root.glob(f".{STATE_FILE}.*.tmp"):
        stale.unlink(missing_ok=True)
    return root / STATE_FILE


def load_state(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a checkpoint written by :func:`save_state`; returns ``(state, meta)``."""
    root = Path(directory)
    path = root / STATE_FILE
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint in {root} (missing {STATE_FILE})") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(body, dict) or body.get("format_version") != FORMAT_VERSION:
        version = body.get("format_version") if isinstance(body, dict) else None
        raise CheckpointError(f"checkpoint {path} has format version {version!r}; this flexkit reads {FORMAT_VERSION}")
    try:
        with np.load(root / body["arrays"], allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot read checkpoint arrays in {root}: {exc}") from None
    return _decode(body["state"], arrays), _decode(body["meta"], arrays)
