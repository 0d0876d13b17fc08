"""Crash-safe checkpoints of plain-data state: JSON for structure, one ``.npz`` for numpy arrays.

No pickle anywhere: arrays are saved with ``numpy.savez`` and loaded with ``allow_pickle=False``; everything else
is JSON. A checkpoint directory holds ``state.json`` (the commit point, replaced atomically) and the arrays file
it names. Writing goes, under an exclusive lock on ``.checkpoint.lock`` (writers of one directory take turns;
the kernel drops the lock of a killed writer): remove what earlier interrupted saves left (temp files, arrays
files ``state.json`` does not name); arrays to a new uniquely named file, fsync, fsync the directory;
``state.json`` to a temp file, fsync, rename over the old one, fsync the directory; then the older arrays file
is removed. A crash at any moment leaves either the previous checkpoint or the new one loadable, never a mix,
and at most one interrupted save's files beside it. Readers take no lock: one that finds its arrays file
replaced by a newer commit reads ``state.json`` again.
"""

from __future__ import annotations

import json
import os
import re
import uuid
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from flexkit.errors import CheckpointError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, one writer per directory is on the caller
    fcntl = None  # type: ignore[assignment]

#: Layout version of ``state.json``.
FORMAT_VERSION = 1
STATE_FILE = "state.json"
LOCK_FILE = ".checkpoint.lock"
_ARRAYS_NAME = re.compile(r"arrays-[0-9a-f]{32}\.npz")
_LOAD_ATTEMPTS = 10


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


@contextmanager
def _writer_lock(root: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the directory's lock file (released when the holder exits or dies)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # pragma: no cover - e.g. a read-only directory: the save fails below with a clear error
        yield
        return
    try:
        with suppress(OSError):  # filesystems without flock: as without the lock
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _committed_arrays(root: Path) -> str | None:
    """The arrays file ``state.json`` names (``None``: no ``state.json``); raises ``ValueError`` when unreadable."""
    try:
        name = json.loads((root / STATE_FILE).read_text(encoding="utf-8"))["arrays"]
    except FileNotFoundError:
        return None
    except (OSError, KeyError, TypeError, RecursionError) as exc:  # JSON errors are ValueErrors already
        raise ValueError(str(exc)) from None
    if not isinstance(name, str):
        raise ValueError("no arrays file name")
    return name


def _remove_stale(root: Path, keep: str | None, *, arrays: bool = True) -> None:
    """Remove temp files and (with ``arrays``) every arrays file but ``keep``."""
    for stale in root.glob(f".{STATE_FILE}.*.tmp"):
        stale.unlink(missing_ok=True)
    if arrays:
        for stale in root.glob("arrays-*.npz"):
            if stale.name != keep:
                stale.unlink(missing_ok=True)


def save_state(directory: str | os.PathLike[str], state: Mapping[str, Any], *, meta: Mapping[str, Any]) -> Path:
    """Atomically write ``state`` (plain data + numpy arrays) and ``meta`` (e.g. a fingerprint) to ``directory``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    body = {"format_version": FORMAT_VERSION, "meta": _encode(dict(meta), arrays), "state": _encode(state, arrays)}
    arrays_name = f"arrays-{uuid.uuid4().hex}.npz"
    body["arrays"] = arrays_name
    with _writer_lock(root):
        # Leftovers of interrupted saves go first, so a crash loop cannot pile them up; the committed
        # checkpoint's arrays stay (when state.json is unreadable, no arrays file is touched).
        try:
            _remove_stale(root, _committed_arrays(root))
        except ValueError:
            _remove_stale(root, None, arrays=False)
        arrays_path = root / arrays_name
        with open(arrays_path, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(root)  # the arrays file's directory entry is durable before anything points at it
        tmp = root / f".{STATE_FILE}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / STATE_FILE)
        _fsync_dir(root)
        _remove_stale(root, arrays_name)
    return root / STATE_FILE


def _read_body(root: Path) -> dict[str, Any]:
    path = root / STATE_FILE
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint in {root} (missing {STATE_FILE})") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(body, dict) or body.get("format_version") != FORMAT_VERSION:
        version = body.get("format_version") if isinstance(body, dict) else None
        raise CheckpointError(f"checkpoint {path} has format version {version!r}; this flexkit reads {FORMAT_VERSION}")
    name = body.get("arrays")
    if not isinstance(name, str) or not _ARRAYS_NAME.fullmatch(name) or not {"state", "meta"} <= set(body):
        raise CheckpointError(f"checkpoint {path} is malformed (expected state, meta and an arrays-<hex>.npz name)")
    return body


def load_state(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a checkpoint written by :func:`save_state`; returns ``(state, meta)``.

    Only reads: JSON and ``numpy.load(allow_pickle=False)`` of the arrays file in ``directory`` that
    ``state.json`` names. Anything malformed raises :class:`~flexkit.errors.CheckpointError`.
    """
    root = Path(directory)
    for attempt in range(_LOAD_ATTEMPTS):
        body = _read_body(root)
        try:
            with np.load(root / body["arrays"], allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            break
        except FileNotFoundError as exc:
            # A writer committed a newer checkpoint and removed this one's arrays after we read state.json.
            if attempt + 1 < _LOAD_ATTEMPTS and _read_body(root)["arrays"] != body["arrays"]:
                continue
            raise CheckpointError(f"cannot read checkpoint arrays in {root}: {exc}") from None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise CheckpointError(f"cannot read checkpoint arrays in {root}: {type(exc).__name__}: {exc}") from None
    try:
        state, meta = _decode(body["state"], arrays), _decode(body["meta"], arrays)
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {root / STATE_FILE} is malformed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {root / STATE_FILE} is malformed: state and meta must be tables")
    return state, meta
