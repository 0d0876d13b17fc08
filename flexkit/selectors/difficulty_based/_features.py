"""``difficulty_based``'s two reference features, kept in their own dtype.

The selector keeps read-only ``f0``, ``f1`` whatever their dtype (float64, float32, float16, integers or bools:
values in [0, 1]; copies of arrays the caller could still write,
:func:`~flexkit.read_feature_columns`) and converts to float64 only what a step reads: the rows
it gathers or one chunk of a pass (:func:`as64`). Every float64 computation therefore sees exactly the values a
float64 copy would hold, so float32 input picks the same tasks as float64 input of the same values, bit for bit.

The float32 pass (:mod:`._costs`) reads float32 features: the caller's array itself when its values are all exact
in float32 (:func:`exact_in_float32`: float32, float16, integers, bools); for float64 input a float32 copy (4 bytes
per task and column) up to :data:`~.tuning.FEATURE_MIRROR_MAX` tasks, above it the float64 array itself (each
chunk multiplied in float64 and rounded once to float32, which for values exact in float32 gives the same bits as
the float32 multiply).

:class:`FeaturePair` holds both columns and what the float32 pass reads of them; every part of the selector gets it.
"""

from __future__ import annotations

import numpy as np

from flexkit.selectors.difficulty_based import tuning


def as64(values: np.ndarray) -> np.ndarray:
    """``values`` as float64: the array itself when it already is native float64 (no copy), else a converted copy
    (call it on a gathered batch or one chunk, never on a whole column)."""
    return np.asarray(values, dtype=np.float64)


def exact_in_float32(col: np.ndarray) -> bool:
    """Whether every value of a feature column in [0, 1] is exact in float32 whatever it holds: float32 or
    narrower floats, integers and bools (0 or 1)."""
    kind = col.dtype.kind
    return kind in "biu" or (kind == "f" and col.dtype.itemsize <= 4)


def fast_column(col: np.ndarray, size: int) -> np.ndarray:
    """The column the float32 pass reads: ``col`` itself when its values are exact in float32 or above
    ``tuning.FEATURE_MIRROR_MAX`` tasks, else a float32 copy (float64 input up to that size)."""
    if exact_in_float32(col) or size > tuning.FEATURE_MIRROR_MAX:
        return col
    return col.astype(np.float32)


class FeaturePair:
    """The two reference columns of every task: ``f0`` (a weaker model's pass rates) and ``f1`` (a stronger one's),
    read-only in their own dtype, and ``f0_fast``, ``f1_fast``, what the float32 pass reads (:func:`fast_column`).
    """

    def __init__(self, f0: np.ndarray, f1: np.ndarray) -> None:
        self.f0, self.f1 = f0, f1
        #: Number of tasks.
        self.size = f0.size
        self.f0_fast, self.f1_fast = fast_column(f0, self.size), fast_column(f1, self.size)

    def rows(self, where: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """``f0``, ``f1`` of the tasks ``where`` (indices or one chunk's slice) as float64 (:func:`as64`)."""
        return as64(self.f0[where]), as64(self.f1[where])
