"""The selector protocol: what picks task indices inside one taskset.

Names follow Trinity-RFT's task-selection module (``get_indices``, ``feedback``, ``state_dict``,
``load_state_dict``). A selector is built by its registered factory as
``factory(config, size=..., seed=..., features=...)``; subclass :class:`Selector` to get argument checks,
feedback validation and RNG state handling for free.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from flexkit.errors import FeedbackError

#: What to do with a feedback value outside [0, 1]: clip it into range, or reject the payload.
OutOfRange = Literal["clip", "error"]

Seed = int | np.random.SeedSequence


class Selector(abc.ABC):
    """Base class of selectors.

    Subclasses implement :meth:`_select` (and :meth:`_update` if they learn from feedback) and extend
    :meth:`state_dict` / :meth:`load_state_dict` with their own state (calling ``super()``). State is plain
    data: JSON-serialisable values and numpy arrays, never pickled objects.

    Args:
        config: the selector's attrs config instance (validated).
        size: number of tasks in the taskset (indices are ``0 .. size-1``).
        seed: an int or a ``numpy.random.SeedSequence``; the selector's random stream derives from it only.
        features: feature columns by name (numpy arrays of length ``size``), in the order the config names
            them; a lazy mapping is fine, only the columns a selector reads are loaded.
    """

    #: Whether :meth:`get_indices` can return the same index twice in one batch.
    allows_repeats: bool = False

    def __init__(
        self,
        config: Any,
        *,
        size: int,
        seed: Seed = 0,
        features: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"a selector needs a taskset with at least one task, got size={size!r}")
        self.config = config
        self.size = int(size)
        self.rng = np.random.default_rng(seed)
        self.features: Mapping[str, np.ndarray] = features if features is not None else {}

    # -- the protocol -------------------------------------------------------------------------------------

    def get_indices(
        self, batch_size: int, return_extra_info: bool = False
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """The indices of the next ``batch_size`` tasks (an int64 array).

        With ``return_extra_info=True`` returns ``(indices, info)`` where ``info`` explains the choice
        (for example scores and predicted success rates).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not self.allows_repeats and batch_size > self.size:
            raise ValueError(
                f"{type(self).__name__} draws without repeats within a batch, so batch_size ({batch_size}) "
                f"cannot exceed the taskset size ({self.size})"
            )
        indices, info = self._select(int(batch_size), return_extra_info)
        indices = np.asarray(indices, dtype=np.int64)
        return (indices, info) if return_extra_info else indices

    def feedback(
        self,
        indices: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        *,
        out_of_range: OutOfRange = "clip",
    ) -> None:
        """Update the selector with observed values (e.g. mean reward per task) for ``indices``.

        The payload is checked first (see :func:`validate_feedback`); when it is rejected nothing changes.
        """
        idx, vals = validate_feedback(indices, values, self.size, out_of_range=out_of_range)
        if idx.size:
            self._update(idx, vals)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this selector is (RNG state included)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict` of a selector built with the same config and size."""
        self.rng.bit_generator.state = _plain(state["rng"])

    # -- for subclasses ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        """Pick ``batch_size`` indices; return them with an info dict (may be empty when not asked for)."""

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:  # noqa: B027 - optional hook
        """Learn from validated feedback (int64 indices without duplicates, float64 values in [0, 1])."""


def validate_feedback(
    indices: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    size: int,
    *,
    out_of_range: OutOfRange = "clip",
) -> tuple[np.ndarray, np.ndarray]:
    """Check a feedback payload and return it as ``(int64 indices, float64 values)``.

    Rejected with :class:`~flexkit.errors.FeedbackError`: a length mismatch, non-integer or out-of-range or
    duplicate indices, non-numeric, NaN or infinite values. Values outside [0, 1] are clipped into range
    (``out_of_range="clip"``, the default) or rejected (``"error"``).
    """
    try:
        idx = np.asarray(indices)
        vals = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"feedback indices/values are not arrays: {exc}") from None
    if idx.ndim != 1 or vals.ndim != 1:
        raise FeedbackError(f"feedback indices and values must be flat lists, got shapes {idx.shape} and {vals.shape}")
    for name, given in (("indices", indices), ("values", values)):
        # numpy turns a bool inside a list of numbers into 0/1: refuse it as it refuses an array of bools
        if isinstance(given, (list, tuple)) and any(isinstance(x, (bool, np.bool_)) for x in given):
            raise FeedbackError(f"feedback {name} must be numbers, not booleans")
    if len(idx) != len(vals):
        raise FeedbackError(f"feedback has {len(idx)} indices but {len(vals)} values")
    if idx.size == 0:
        return idx.astype(np.int64), vals.astype(np.float64)
    if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
        raise FeedbackError(f"feedback indices must be integers, got {idx.dtype} values such as {idx[0]!r}")
    if vals.dtype == bool or not (np.issubdtype(vals.dtype, np.floating) or np.issubdtype(vals.dtype, np.integer)):
        raise FeedbackError(f"feedback values must be numbers, got {vals.dtype} values such as {vals[0]!r}")
    bad = (idx < 0) | (idx >= size)  # before the cast: uint64 indices past 2^63 would wrap to negative ones
    if bad.any():
        raise FeedbackError(f"feedback index {int(idx[bad][0])} is out of range for a taskset of {size} tasks")
    idx = idx.astype(np.int64)
    vals = vals.astype(np.float64)
    if not np.isfinite(vals).all():
        raise FeedbackError(f"feedback values must be finite, got {vals[~np.isfinite(vals)][0]!r}")
    if np.unique(idx).size != idx.size:
        uniq, counts = np.unique(idx, return_counts=True)
        raise FeedbackError(f"feedback repeats index {int(uniq[counts > 1][0])}; aggregate per task first")
    outside = (vals < 0.0) | (vals > 1.0)
    if outside.any():
        if out_of_range == "error":
            raise FeedbackError(
                f"feedback value {vals[outside][0]!r} is outside [0, 1] (set out_of_range = \"clip\" to clip)"
            )
        vals = np.clip(vals, 0.0, 1.0)
    return idx, vals


def read_feature_columns(
    features: Mapping[str, np.ndarray], keys: Sequence[str], size: int, *, owner: str
) -> list[np.ndarray]:
    """Fetch and check the feature columns ``keys`` (1-D, numeric, length ``size``, no NaN).

    Raises ``ValueError`` naming the selector (``owner``) and the offending key. Only the named columns are
    read, so a lazy mapping loads nothing else. Columns are returned as read-only views (no copy).
    """
    columns = []
    for key in keys:
        try:
            raw = features[key]
        except KeyError:
            try:
                known = ", ".join(repr(k) for k in features)
            except Exception:  # a lazy mapping may not list its keys
                known = "?"
            raise ValueError(f"{owner}: feature column {key!r} is missing (available: {known or 'none'})") from None
        col = np.asarray(raw)
        if col.ndim != 1:
            raise ValueError(f"{owner}: feature column {key!r} must be 1-D, got shape {col.shape}")
        if col.shape[0] != size:
            raise ValueError(f"{owner}: feature column {key!r} has {col.shape[0]} values for {size} tasks")
        if not (np.issubdtype(col.dtype, np.number) or col.dtype == bool) or np.issubdtype(
            col.dtype, np.complexfloating
        ):
            raise ValueError(f"{owner}: feature column {key!r} must be numeric, got dtype {col.dtype}")
        if np.issubdtype(col.dtype, np.floating) and np.isnan(col.min() if col.size else 0.0):
            raise ValueError(f"{owner}: feature column {key!r} contains NaN")
        col = col.view()
        col.flags.writeable = False
        columns.append(col)
    return columns


def _plain(state: Any) -> Any:
    """Turn numpy scalars back into Python ints (bit-generator states must hold Python ints)."""
    if isinstance(state, Mapping):
        return {k: _plain(v) for k, v in state.items()}
    if isinstance(state, np.integer):
        return int(state)
    return state
