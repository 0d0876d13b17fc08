"""``difficulty_based``'s two reference features, read from the caller's arrays without copying them.

The selector keeps read-only views of the caller's ``f0``, ``f1`` whatever their dtype (float64, float32, float16,
integers or bools: values in [0, 1]) and converts to float64 only what a step reads: the rows it gathers or one
chunk of a pass (:func:`as64`). Every float64 computation therefore sees exactly the values a float64 copy would
hold, so float32 input picks the same tasks as float64 input of the same values, bit for bit.

The float32 pass (:mod:`.costs`) reads float32 features: the caller's array itself when its values are all exact
in float32 (:func:`exact_in_float32`: float32, float16, integers, bools); for float64 input a float32 copy (4 bytes
per task and column) up to :data:`~.tuning.FEATURE_MIRROR_MAX` tasks, above it the float64 array itself (each
chunk multiplied in float64 and rounded once to float32, which for values exact in float32 gives the same bits as
the float32 multiply).
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
