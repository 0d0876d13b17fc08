"""Crash-safe, checksummed checkpoints of plain-data state: JSON for structure, one ``.npz`` for numpy arrays.

No pickle anywhere: arrays are saved with ``numpy.savez`` and loaded with ``allow_pickle=False``; everything else
is JSON. A checkpoint directory holds ``state.json`` (the commit point, replaced atomically) and the arrays file
it names. ``state.json`` starts with the SHA-256 of the rest of its own bytes, and that rest holds the arrays
file's SHA-256 and size, so every byte of a checkpoint is covered; both are verified before anything is parsed.

Before anything is written, the state is encoded and decoded in memory and must come back equal (a value that
cannot round-trip raises :class:`StateError` with its key path). Writing then goes, under an exclusive lock on
``.checkpoint.lock`` (writers of one directory take turns; the kernel drops the lock of a killed writer):
remove what earlier interrupted saves left (temp files, arrays files ``state.json`` does not name); arrays to a
new uniquely named file, fsync, fsync the directory; ``state.json`` to a temp file, fsync, rename over the old
one, fsync the directory; then the older arrays file is removed. A crash at any moment leaves either the
previous checkpoint or the new one loadable, never a mix, and at most one interrupted save's files beside it.
A write error (a full or read-only disk) removes the new files and leaves the previous checkpoint as it was.
Readers take no lock: one that finds its arrays file replaced by a newer commit reads ``state.json`` again.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from flexkit._files import O_NONBLOCK, fsync_dir
from flexkit.errors import CheckpointError, KeyPath, StateError, format_key_path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, one writer per directory is on the caller
    fcntl = None  # type: ignore[assignment]  # no such module on Windows

__all__ = ["FORMAT_VERSION", "LOCK_FILE", "MAX_DEPTH", "META_KEY", "STATE_FILE", "check_state", "format_key_path",
           "join_arrays", "load_state", "remove_leftovers", "save_state", "split_arrays"]

#: Layout version of ``state.json``: 2 adds the checksums (version 1 checkpoints are refused with a clear error).
FORMAT_VERSION = 2
STATE_FILE = "state.json"
LOCK_FILE = ".checkpoint.lock"
#: The first key of a :class:`StateError`'s key path inside the checkpoint's metadata (not its state).
META_KEY = "<meta>"
#: Deepest nesting of mappings and lists a checkpointed state may have.
MAX_DEPTH = 100
_ARRAYS_NAME = re.compile(r"arrays-[0-9a-f]{32}\.npz")
_HEX64 = re.compile(rb"[0-9a-f]{64}")
_LOAD_ATTEMPTS = 10
#: ``state.json`` starts with these bytes, the SHA-256 (hex) of everything after ``_HEADER_END``, then that rest.
_HEADER = b'{"format_version": 2, "sha256": "'
_HEADER_END = b'", '


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- encoding -------------------------------------------------------------------------------------------------


def _encode(obj: Any, arrays: dict[str, np.ndarray], path: KeyPath) -> Any:
    if len(path) > MAX_DEPTH:
        raise StateError(f"nested more than {MAX_DEPTH} levels deep", path[:MAX_DEPTH])
    if isinstance(obj, np.ndarray):
        if isinstance(obj, np.ma.MaskedArray):
            raise StateError("masked arrays cannot be checkpointed (the mask would be lost)", path)
        if obj.dtype.hasobject:
            raise StateError("object arrays cannot be checkpointed (no pickle); use numeric arrays", path)
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {"__ndarray__": key}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays, path)
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) for k in obj) and "__ndarray__" not in obj and "__items__" not in obj:
            return {k: _encode(v, arrays, (*path, k)) for k, v in obj.items()}
        return {"__items__": [[_encode(k, arrays, (*path, k)), _encode(v, arrays, (*path, k))]
                              for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, arrays, (*path, i)) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise StateError(f"cannot checkpoint a {type(obj).__name__} ({_short(obj)}): state must be plain data "
                     "(None, bool, int, float, str, lists, dicts) and numpy arrays", path)


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
    """A decoded mapping key: lists (tuples before saving) become tuples again, at every depth."""
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _same(original: Any, loaded: Any, path: KeyPath) -> None:
    """Raise :class:`StateError` at the first place where ``loaded`` (saved and read back) differs from
    ``original`` (tuples may come back as lists, numpy scalars as Python numbers)."""
    if isinstance(original, np.ndarray):
        return  # stored in the arrays file as they are
    if isinstance(original, np.generic):
        original = original.item()
    if isinstance(original, Mapping):
        if not isinstance(loaded, dict) or len(loaded) != len(original):
            raise StateError("its keys do not load back as distinct keys (e.g. 1 and 1.0, or True and 1)", path)
        for key, value in original.items():
            if key not in loaded:
                raise StateError(f"the key {_short(key)} does not load back as itself", path)
            _same(value, loaded[key], (*path, key))
        return
    if isinstance(original, (list, tuple)):
        if not isinstance(loaded, list) or len(loaded) != len(original):
            raise StateError(f"{_short(original)} does not load back as a list of the same length", path)
        for i, (a, b) in enumerate(zip(original, loaded, strict=True)):
            _same(a, b, (*path, i))
        return
    if isinstance(original, float) and isinstance(loaded, float) and math.isnan(original) and math.isnan(loaded):
        return
    kinds = (bool, float)
    if original != loaded or any(isinstance(original, k) != isinstance(loaded, k) for k in kinds):
        raise StateError(f"{_short(original)} loads back as {_short(loaded)}", path)


def _locate_unserialisable(obj: Any, path: KeyPath) -> KeyPath | None:
    """The key path of the first leaf of ``obj`` that ``json.dumps`` refuses (e.g. an int of 5,000 digits)."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            for part in (key, value):
                found = _locate_unserialisable(part, (*path, key))
                if found is not None:
                    return found
        return None
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found = _locate_unserialisable(value, (*path, i))
            if found is not None:
                return found
        return None
    if isinstance(obj, np.ndarray):
        return None
    try:
        json.dumps(obj.item() if isinstance(obj, np.generic) else obj)
    except (TypeError, ValueError, OverflowError):
        return path
    return None


def _serialise(state: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[bytes, bytes, str]:
    """``state.json``'s bytes, the arrays file's bytes and its name; checks in memory that everything loads back
    equal. Nothing is written."""
    arrays: dict[str, np.ndarray] = {}
    enc_meta = _encode(dict(meta), arrays, (META_KEY,))
    enc_state = _encode(state, arrays, ())
    buf = io.BytesIO()
    try:
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # keys are "a0", "a1", ...: never the allow_pickle option
    except (TypeError, ValueError) as exc:
        raise StateError(f"numpy cannot save the state's arrays: {type(exc).__name__}: {exc}") from None
    blob = buf.getvalue()
    name = f"arrays-{uuid.uuid4().hex}.npz"
    rest = {"arrays": name, "arrays_sha256": hashlib.sha256(blob).hexdigest(), "arrays_size": len(blob),
            "meta": enc_meta, "state": enc_state}
    try:
        text = json.dumps(rest)
        loaded = json.loads(text)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        where = _locate_unserialisable(state, ()) or _locate_unserialisable(dict(meta), (META_KEY,)) or ()
        raise StateError(f"cannot be written as JSON: {type(exc).__name__}: {exc}", where) from None
    try:
        state_back, meta_back = _decode(loaded["state"], arrays), _decode(loaded["meta"], arrays)
    except (TypeError, ValueError, KeyError, RecursionError) as exc:  # pragma: no cover - _same finds it first
        raise StateError(f"does not load back: {type(exc).__name__}: {exc}") from None
    _same(state, state_back, ())
    _same(dict(meta), meta_back, (META_KEY,))
    rest_bytes = text[1:].encode("ascii")  # without the opening brace; json.dumps escapes to ASCII
    digest = hashlib.sha256(rest_bytes).hexdigest().encode("ascii")
    return _HEADER + digest + _HEADER_END + rest_bytes, blob, name


def split_arrays(state: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """The checkpoint's encoding of ``state`` (plain data and numpy arrays): a JSON-ready tree in which each array
    is ``{"__ndarray__": key}`` (and a mapping with non-string keys ``{"__items__": [[k, v], ...]}``), and the
    arrays by key. Raises :class:`StateError` naming the key path of a value that is not plain data. For
    adapters that store a state in a host's own checkpoint (:func:`join_arrays` inverts it)."""
    arrays: dict[str, np.ndarray] = {}
    return _encode(state, arrays, ()), arrays


def join_arrays(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """The state :func:`split_arrays` encoded, from its tree (after a JSON round trip) and arrays; ``KeyError``
    for an array the tree names but ``arrays`` lacks."""
    return _decode(tree, arrays)


def check_state(state: Mapping[str, Any]) -> None:
    """Check, in memory, that ``state`` can be checkpointed and loads back equal; raises :class:`StateError`
    naming the key path of the first value that cannot."""
    _serialise(state, {})


# -- writing --------------------------------------------------------------------------------------------------


@contextmanager
def _writer_lock(root: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the directory's lock file (released when the holder exits or dies)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    try:
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # e.g. a read-only directory: the save fails below with a clear error
        yield
        return
    try:
        with suppress(OSError):  # filesystems without flock: as without the lock
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _committed_arrays(root: Path) -> str | None:
    """The arrays file ``state.json`` names (``None``: no ``state.json``); raises :class:`CheckpointError` when
    unreadable."""
    try:
        name = json.loads(_read_regular(root / STATE_FILE))["arrays"]
    except FileNotFoundError:
        return None
    except CheckpointError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RecursionError) as exc:  # ValueError: JSON's errors
        raise CheckpointError(str(exc)) from None
    if not isinstance(name, str):
        raise CheckpointError("no arrays file name")
    return name


def _remove_stale(root: Path, keep: str | None, *, arrays: bool = True) -> None:
    """Remove temp files and (with ``arrays``) every arrays file but ``keep``."""
    for stale in root.glob(f".{STATE_FILE}.*.tmp"):
        stale.unlink(missing_ok=True)
    if arrays:
        for stale in root.glob("arrays-*.npz"):
            if stale.name != keep:
                stale.unlink(missing_ok=True)


def remove_leftovers(directory: str | os.PathLike[str]) -> None:
    """Remove what interrupted saves left in a checkpoint directory (temp files, arrays files ``state.json`` does
    not name), as the next save would; nothing when ``state.json`` cannot be read but the temp files. For a run
    that will not save again: one killed inside its last save and resumed finished. Errors are ignored (a
    leftover stays until a later save)."""
    root = Path(directory)
    if not root.is_dir():
        return
    with suppress(OSError), _writer_lock(root):
        try:
            _remove_stale(root, _committed_arrays(root))
        except CheckpointError:
            _remove_stale(root, None, arrays=False)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def save_state(directory: str | os.PathLike[str], state: Mapping[str, Any], *, meta: Mapping[str, Any]) -> Path:
    """Atomically write ``state`` (plain data + numpy arrays) and ``meta`` (e.g. a fingerprint) to ``directory``.

    Raises :class:`StateError` (nothing written) when a value cannot be saved and loaded back equal, and
    :class:`~flexkit.errors.CheckpointError` when writing fails (a full or read-only disk): the new files are
    removed and the previous checkpoint is left as it was.
    """
    root = Path(directory)
    data, blob, arrays_name = _serialise(state, meta)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create the checkpoint directory {root}: {_reason(exc)}") from None
    arrays_path = root / arrays_name
    tmp = root / f".{STATE_FILE}.{uuid.uuid4().hex}.tmp"
    with _writer_lock(root):
        try:
            # Leftovers of interrupted saves go first, so a crash loop cannot pile them up; the committed
            # checkpoint's arrays stay (when state.json is unreadable, no arrays file is touched).
            try:
                _remove_stale(root, _committed_arrays(root))
            except CheckpointError:
                _remove_stale(root, None, arrays=False)
            _write_synced(arrays_path, blob)
            fsync_dir(root)  # the arrays file's directory entry is durable before anything points at it
            _write_synced(tmp, data)
            os.replace(tmp, root / STATE_FILE)
        except OSError as exc:
            for partial in (tmp, arrays_path):
                with suppress(OSError):
                    partial.unlink(missing_ok=True)
            kept = "the previous checkpoint is kept" if (root / STATE_FILE).exists() else "nothing was saved"
            raise CheckpointError(f"cannot write the checkpoint to {root}: {_reason(exc)}; {kept}") from None
        try:
            fsync_dir(root)
        except OSError as exc:
            raise CheckpointError(f"the checkpoint in {root} was written, but syncing its directory failed: "
                                  f"{_reason(exc)}") from None
        with suppress(OSError):  # a leftover is removed by the next save
            _remove_stale(root, arrays_name)
    return root / STATE_FILE


# -- reading --------------------------------------------------------------------------------------------------


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, refusing anything that is not a regular file (a FIFO would block)."""
    fd = os.open(path, os.O_RDONLY | O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _sniff_version(data: bytes) -> Any:
    """``format_version`` of a ``state.json`` without the checksum header, or ``None``."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return body.get("format_version") if isinstance(body, dict) else None


def _verify(path: Path, data: bytes) -> None:
    """Check ``state.json``'s checksum header against the rest of its bytes."""
    if not data.startswith(_HEADER):
        version = _sniff_version(data)
        if version == 1:
            raise CheckpointError(
                f"checkpoint {path} has format version 1, written by an older flexkit without checksums; this "
                f"flexkit reads only format {FORMAT_VERSION}: start the run again, or finish it with the flexkit "
                "that wrote it")
        if version is not None and version != FORMAT_VERSION:
            raise CheckpointError(f"checkpoint {path} has format version {version!r}; this flexkit reads "
                                  f"{FORMAT_VERSION}")
        raise CheckpointError(f"cannot read checkpoint {path}: it does not start with its checksum (damaged, or "
                              "not a flexkit checkpoint)")
    start = len(_HEADER)
    digest, sep, rest = data[start:start + 64], data[start + 64:start + 64 + len(_HEADER_END)], \
        data[start + 64 + len(_HEADER_END):]
    if not _HEX64.fullmatch(digest) or sep != _HEADER_END or hashlib.sha256(rest).hexdigest().encode() != digest:
        raise CheckpointError(f"checkpoint {path} is damaged: its SHA-256 checksum does not match its content")


def _read_body(root: Path) -> dict[str, Any]:
    path = root / STATE_FILE
    try:
        data = _read_regular(path)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint in {root} (missing {STATE_FILE})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {_reason(exc)}") from None
    _verify(path, data)
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from None
    if not isinstance(body, dict) or body.get("format_version") != FORMAT_VERSION:
        version = body.get("format_version") if isinstance(body, dict) else None
        raise CheckpointError(f"checkpoint {path} has format version {version!r}; this flexkit reads {FORMAT_VERSION}")
    name, digest, size = body.get("arrays"), body.get("arrays_sha256"), body.get("arrays_size")
    if (not isinstance(name, str) or not _ARRAYS_NAME.fullmatch(name) or not isinstance(digest, str)
            or not _HEX64.fullmatch(digest.encode()) or type(size) is not int or size < 0
            or not {"state", "meta"} <= set(body)):
        raise CheckpointError(f"checkpoint {path} is malformed (expected state, meta, and an arrays-<hex>.npz name "
                              "with its SHA-256 and size)")
    return body


def _read_arrays(root: Path, body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of the file ``body`` names, after checking its size and checksum."""
    path = root / body["arrays"]
    try:
        size = os.stat(path).st_size
        if size != body["arrays_size"]:
            raise CheckpointError(f"cannot read checkpoint arrays in {root}: {path.name} has {size} bytes, the "
                                  f"checkpoint says {body['arrays_size']} (damaged)")
        blob = _read_regular(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint arrays in {root}: {_reason(exc)}") from None
    if hashlib.sha256(blob).hexdigest() != body["arrays_sha256"]:
        raise CheckpointError(f"cannot read checkpoint arrays in {root}: {path.name} is damaged (its SHA-256 "
                              "checksum does not match the checkpoint's)")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except Exception as exc:  # a file with a valid checksum but hostile content: whatever numpy raises
        raise CheckpointError(f"cannot read checkpoint arrays in {root}: {type(exc).__name__}: {exc}") from None


def load_state(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a checkpoint written by :func:`save_state`; returns ``(state, meta)``.

    Only reads: the checksums of ``state.json`` and of the arrays file it names are verified first, then JSON and
    ``numpy.load(allow_pickle=False)``. Anything damaged or malformed raises
    :class:`~flexkit.errors.CheckpointError`.
    """
    root = Path(directory)
    for attempt in range(_LOAD_ATTEMPTS):
        body = _read_body(root)
        try:
            arrays = _read_arrays(root, body)
            break
        except FileNotFoundError as exc:
            # A writer committed a newer checkpoint and removed this one's arrays after we read state.json.
            if attempt + 1 < _LOAD_ATTEMPTS and _read_body(root)["arrays"] != body["arrays"]:
                continue
            raise CheckpointError(f"cannot read checkpoint arrays in {root}: {_reason(exc)}") from None
    try:
        state, meta = _decode(body["state"], arrays), _decode(body["meta"], arrays)
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"checkpoint {root / STATE_FILE} is malformed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {root / STATE_FILE} is malformed: state and meta must be tables")
    return state, meta
