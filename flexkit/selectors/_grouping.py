"""Groups of tasks for selectors that pool evidence: by categorical columns, or by quantile bins of numeric ones.

A pool of 20,000 prompts seen about twice each gives every per-task estimate almost no evidence; the pass rate
of the task's *group* (a level, a source, a difficulty label, a bucket of a numeric feature) is learned from every
rollout of the group. :class:`TaskGroups` maps each task to a group id ``0 .. count-1``:

- **categorical** (``bins = 0``): one group per distinct combination of the named columns' values. A numeric
  column is read as numbers; a column of strings (``source = "gsm8k"``) is read as labels, through the feature
  mapping's ``labels(key)`` (what a taskset's :class:`~flexkit.tasksets._base.LazyFeatures` offers) or, for a plain
  mapping, from the array itself;
- **binned** (``bins = k > 0``): each numeric column is cut at its ``k``-quantiles (estimated on an evenly strided
  sample of at most :data:`QUANTILE_SAMPLE` values, so a column of 10^8 costs no sort) into at most ``k`` bins,
  and a group is one combination of bins: a piecewise-constant pass-rate model over continuous features, which
  shrinks per-task estimates the way a clean level column does.

Group ids follow the sorted order of the distinct values (of the bin numbers), so they depend only on the data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError, TasksetError

#: Most values read to estimate a column's quantile edges (an evenly strided sample above that).
QUANTILE_SAMPLE = 1 << 20
#: Longest column grouped in one ``np.unique`` (longer ones: distinct values per chunk, then positions).
GROUP_CHUNK = 1 << 23
#: Most groups a grouping may make (beyond that, pooling gives each group too little evidence to help).
MAX_GROUPS = 1 << 16
#: Float64 represents every integer below this exactly; a categorical column of larger numbers is read as labels.
EXACT_INTEGERS = float(1 << 53)
#: Distinct non-integer values a column may hold as group labels (``bins = 0``); more is a measurement to bin.
MAX_FRACTIONAL_LABELS = 32


def bins_field() -> Any:
    """The ``bins`` config field of a selector that groups tasks (0: by distinct values; k: k quantile bins)."""
    return field(default=0, ge=0, le=256,
                 doc="0: group by the columns' distinct values; k > 0: cut each numeric column into k quantile bins.")


def uniform_fraction_field() -> Any:
    """The ``uniform_fraction`` config field: the share of each batch drawn uniformly, whatever the estimates."""
    return field(default=0.0, ge=0, le=1,
                 doc="Share of each batch drawn uniformly from the pool, whatever the estimates.")


@runtime_checkable
class LabelledFeatures(Protocol):
    """A feature mapping that can also return a column's raw values as labels (strings or numbers)."""

    def labels(self, key: str) -> np.ndarray:
        """Every task's value under ``key`` as an array of labels."""
        ...


class TaskGroups:
    """Each task's group id (``int32``, ``0 .. count-1``) and a readable name per group.

    Args:
        group: the group id of every task.
        names: one name per group (e.g. ``"level=3"`` or ``"weak_pass_rate∈[0.12, 0.31)"``).
        parents: each group's parent (``int32``, ``0 .. max``): the code of its first column's value (its level
            when grouped by ``["level", "carries"]``); ``None``: one parent, the whole pool.
        first_values: each group's value of its first column, as text (``"3"`` for ``level=3``; a bin's range for
            binned columns); ``None``: none (one group for the whole pool).
    """

    def __init__(self, group: np.ndarray, names: Sequence[str], parents: np.ndarray | None = None,
                 first_values: Sequence[str] | None = None) -> None:
        self.group = group
        self.names = tuple(names)
        self.parents = np.zeros(len(self.names), dtype=np.int32) if parents is None else parents
        self.first_values = tuple(first_values) if first_values is not None else None

    @property
    def count(self) -> int:
        """Number of groups."""
        return len(self.names)

    def sizes(self) -> np.ndarray:
        """Tasks per group."""
        return np.bincount(self.group, minlength=self.count)

    @classmethod
    def from_features(cls, features: Mapping[str, np.ndarray], keys: Sequence[str], size: int, *, bins: int = 0,
                      owner: str = "selector") -> TaskGroups:
        """Groups of ``size`` tasks from the columns ``keys`` of ``features`` (see the module docstring).

        Raises :class:`~flexkit.errors.TasksetError` naming ``owner`` and the column when a column is missing, has
        the wrong length or is not numeric while ``bins > 0``, and :class:`~flexkit.errors.ConfigError` for a column
        named twice, a column of measured values without ``bins`` and a grouping of more than :data:`MAX_GROUPS`
        groups.
        """
        repeated = sorted({key for key in keys if list(keys).count(key) > 1})
        if repeated:
            raise ConfigError(f"{owner}: feature_keys names {', '.join(map(repr, repeated))} more than once: name "
                              "each column once")
        codes: list[np.ndarray] = []
        names: list[list[str]] = []
        for key in keys:
            if bins > 0:
                column = _numeric_column(features, key, size, owner)
                code, labels = _bin_codes(column, bins, key)
            else:
                column = _any_column(features, key, size, owner)
                code, labels = _category_codes(column, key)
                _refuse_measurements(column, len(labels), key, owner)
            codes.append(code)
            names.append(labels)
        first = [label.removeprefix(f"{keys[0]}=") for label in names[0]] if keys else []
        group, digits = _combine(codes, [len(n) for n in names])
        if len(digits) > MAX_GROUPS:
            raise ConfigError(f"{owner}: grouping by {list(keys)} makes {len(digits)} groups, more than "
                              f"{MAX_GROUPS}; use fewer columns or bins")
        readable = [", ".join(names[i][d] for i, d in enumerate(row)) for row in digits.tolist()]
        return cls(group, readable, digits[:, 0].astype(np.int32) if len(keys) > 1 else None,
                   [first[d] for d in digits[:, 0].tolist()])


def _any_column(features: Mapping[str, np.ndarray], key: str, size: int, owner: str, *,
                labels: bool = True) -> np.ndarray:
    """The column ``key`` as numbers when it holds numbers, else (with ``labels``) as labels."""
    try:
        column = np.asarray(features[key])
    except KeyError:
        raise TasksetError(f"{owner}: feature column {key!r} is missing") from None
    except Exception:  # a taskset refuses a non-numeric column: read it as labels when it can
        if not labels or not isinstance(features, LabelledFeatures):
            raise  # the taskset's own error names the row and the value (NaN, a string, ...)
        column = np.asarray(features.labels(key))
    if column.shape != (size,):
        raise TasksetError(f"{owner}: feature column {key!r} has shape {column.shape}, expected ({size},)")
    if labels and np.issubdtype(column.dtype, np.floating) and column.size:
        if np.isnan(column).any():
            raise TasksetError(f"{owner}: feature column {key!r} contains NaN, which is no group label")
        infinite = np.isinf(column)
        if infinite.any():
            row = int(np.argmax(infinite))
            raise TasksetError(f"{owner}: feature column {key!r} holds an infinite value ({column[row]} at row {row}), "
                               "which is no group label")
        if np.abs(column).max() >= EXACT_INTEGERS:  # float64 no longer tells neighbouring integers (ids) apart
            if not isinstance(features, LabelledFeatures):
                raise TasksetError(
                    f"{owner}: feature column {key!r} holds numbers of magnitude 2**53 or more, which float64 cannot "
                    f"tell apart; pass them as integers (int64) or strings to group by them")
            column = np.asarray(features.labels(key))
    return column


def _refuse_measurements(column: np.ndarray, distinct: int, key: str, owner: str) -> None:
    """Refuse a column of non-integer numbers with more than :data:`MAX_FRACTIONAL_LABELS` distinct values
    (``distinct``) as group labels: a measured value (a difficulty score, a length ratio), each value its own group
    of a few tasks, which pools no evidence; ``bins`` is what such a column needs."""
    if distinct <= MAX_FRACTIONAL_LABELS or not np.issubdtype(column.dtype, np.floating):
        return
    if (column != np.round(column)).any():
        raise ConfigError(f"{owner}: feature column {key!r} holds {distinct} distinct non-integer numbers over "
                          f"{len(column)} tasks, about {len(column) / distinct:.1f} tasks a group: a measured value, "
                          "not a label that pools tasks; set bins = k (such as bins = 8) to cut it into k quantile "
                          "groups, or group by a label column")


def _numeric_column(features: Mapping[str, np.ndarray], key: str, size: int, owner: str) -> np.ndarray:
    column = _any_column(features, key, size, owner, labels=False)
    if not np.issubdtype(column.dtype, np.number) or np.issubdtype(column.dtype, np.complexfloating):
        raise TasksetError(f"{owner}: bins need numeric feature columns; {key!r} has dtype {column.dtype}")
    if (np.issubdtype(column.dtype, np.floating) and column.size
            and not (np.isfinite(column.min()) and np.isfinite(column.max()))):  # not min + max: it can overflow
        raise TasksetError(f"{owner}: feature column {key!r} contains NaN or infinite values")
    return column


def _category_codes(column: np.ndarray, key: str) -> tuple[np.ndarray, list[str]]:
    """One code per distinct value (sorted), chunked for long columns; labels ``key=value``."""
    if column.dtype == object:  # labels of mixed JSON types: compare them as their JSON text
        column = np.array([json.dumps(v) if not isinstance(v, str) else v for v in column.tolist()], dtype=str)
    if len(column) <= GROUP_CHUNK:
        uniques, inverse = np.unique(column, return_inverse=True)
        code = inverse.reshape(-1).astype(np.int32)
    else:
        chunks = range(0, len(column), GROUP_CHUNK)
        uniques = np.unique(np.concatenate([np.unique(column[s:s + GROUP_CHUNK]) for s in chunks]))
        code = np.empty(len(column), dtype=np.int32)
        for s in chunks:
            code[s:s + GROUP_CHUNK] = np.searchsorted(uniques, column[s:s + GROUP_CHUNK])
    return code, [f"{key}={group_label(v)}" for v in uniques.tolist()]


def as_label(value: Any) -> str | None:
    """``value`` as a group label: a string as it is, a number or bool as its JSON text (``3`` and ``"3"`` are one
    label, and so are ``3`` and ``3.0``: equal numbers are one label, integers exactly at any size; ``True`` is
    ``"true"``); ``None`` for anything else (NaN, lists, tables, null)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, (int, float, bool)) or value != value:  # NaN is no label
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def group_label(value: Any) -> str:
    """``value`` (one task's or row's value in a grouping column) as its group is named, the pool's rule
    (:func:`as_label`: an integral float as an integer, ``3.0`` → ``"3"``; a bool as ``"true"`` / ``"false"``; a
    string as it is); a numpy or torch scalar (a dataset row's) as its Python value; anything else as ``str``
    gives it."""
    item = getattr(value, "item", None)  # a numpy or torch scalar: a foreign object
    if callable(item) and not isinstance(value, (str, bytes, bool, int, float)):
        return group_label(item())
    label = as_label(value)
    return str(value) if label is None else label


def _bin_codes(column: np.ndarray, bins: int, key: str) -> tuple[np.ndarray, list[str]]:
    """Quantile bins of a numeric column: codes ``0 .. b-1`` (``b ≤ bins``: tied edges merge) and labels."""
    step = max(1, len(column) // QUANTILE_SAMPLE)
    sample = np.asarray(column[::step], dtype=np.float64)
    inner = np.unique(np.quantile(sample, np.arange(1, bins) / bins)) if bins > 1 else np.empty(0)
    code = np.empty(len(column), dtype=np.int32)
    for s in range(0, len(column), GROUP_CHUNK):
        code[s:s + GROUP_CHUNK] = np.searchsorted(inner, column[s:s + GROUP_CHUNK], side="right")
    edges = _edge_texts([-np.inf, *inner.tolist(), np.inf])
    labels = [f"{key}∈[{edges[b]}, {edges[b + 1]})" for b in range(len(edges) - 1)]
    return code, labels


def _edge_texts(edges: list[float]) -> list[str]:
    """The bin edges as short texts (3 significant digits), with more digits where that is what tells two edges
    apart (edges are distinct, so 17 digits always do): every bin gets its own name."""
    for digits in range(3, 18):
        texts = [f"{edge:.{digits}g}" for edge in edges]
        if len(set(texts)) == len(texts):
            return texts
    return [repr(edge) for edge in edges]


def _combine(codes: list[np.ndarray], radices: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Group ids of the combinations of per-column codes that occur (sorted), and each group's codes (one row per
    group, one column per code column)."""
    if len(codes) == 1:
        present = np.flatnonzero(np.bincount(codes[0], minlength=radices[0]))
        remap = np.full(radices[0], -1, dtype=np.int32)
        remap[present] = np.arange(len(present), dtype=np.int32)
        return remap[codes[0]], present[:, None]
    combined = np.zeros(len(codes[0]), dtype=np.int64)
    span = 1  # every combined code is below it
    for code, radix in zip(codes, radices, strict=True):
        if span * radix > np.iinfo(np.int64).max:  # renumber the combinations so far (sorted) before int64 overflows
            present, inverse = np.unique(combined, return_inverse=True)
            combined, span = inverse.reshape(-1).astype(np.int64), len(present)
        combined *= radix
        combined += code
        span *= radix
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    return inverse.reshape(-1).astype(np.int32), np.stack([code[first] for code in codes], axis=1)
