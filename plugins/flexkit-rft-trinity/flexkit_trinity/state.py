"""A flexkit selector's state as plain JSON, for Trinity-RFT's explorer checkpoint.

Trinity-RFT (0.6) saves each taskset reader's ``state_dict()`` with ``json.dump`` into
``<checkpoint_job_dir>/<explorer name>_meta.json`` (its ``StateManager.save_explorer``). A flexkit selector's state
holds numpy arrays (posteriors, scores) and big RNG integers, so :func:`encode` turns it into JSON values with
flexkit's own checkpoint encoding (:func:`flexkit.split_arrays`): the tree keeps its shape, each
array becomes ``{"__ndarray__": "a<k>"}`` and all arrays travel together as one
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

from flexkit import StateMismatchError, join_arrays, split_arrays

__all__ = ["FORMAT", "decode", "encode"]

#: Version of the encoding, stored with it.
FORMAT = 1


def encode(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (plain data and numpy arrays) as a JSON-serialisable dict ``{"format", "tree", "arrays"}``."""
    tree, arrays = split_arrays(state)
    buffer = io.BytesIO()
    if arrays:
        np.savez_compressed(buffer, allow_pickle=False, **arrays)
    return {"format": FORMAT, "tree": tree, "arrays": base64.b64encode(buffer.getvalue()).decode("ascii")}


def decode(blob: Mapping[str, Any]) -> Any:
    """The state :func:`encode` produced (after a JSON round trip); :class:`flexkit.StateMismatchError` (a
    ``ValueError``) if ``blob`` is not one."""
    if not isinstance(blob, Mapping) or blob.get("format") != FORMAT or "tree" not in blob:
        raise StateMismatchError(f"not a flexkit selector state of format {FORMAT}")
    try:
        raw = base64.b64decode(blob.get("arrays", ""), validate=True)
    except (ValueError, TypeError) as exc:  # not base64 text (binascii.Error is a ValueError)
        raise StateMismatchError(str(exc)) from None
    arrays: dict[str, np.ndarray] = {}
    if raw:
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (zipfile.BadZipFile, OSError, ValueError) as exc:  # numpy refusing damaged bytes
            raise StateMismatchError(f"the selector state's arrays are unreadable: {exc}") from None
    try:
        return join_arrays(blob["tree"], arrays)
    except KeyError as exc:  # join_arrays: the tree names an array the blob lacks
        raise StateMismatchError(f"the selector state names array {exc} that it does not hold") from None
