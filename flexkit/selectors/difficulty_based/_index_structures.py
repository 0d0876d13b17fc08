"""Data structures of ``difficulty_based``'s greedy index (``tau = 0``): a feature grid and the dirty groups.

* :class:`SlabGrid`: static points ``(x_i, y_i)`` in [0, 1]² (the two reference features) sorted by a row of
  ``y`` and, within a row, by ``x``; it lists a superset of the points in a slab ``lo ≤ cx·x + cy·y ≤ hi``
  for any coefficients, touching only the rows' few matching runs.
* :class:`DirtyGroups`: the tasks whose posterior may be far from what their features predict (observed
  recently), kept in groups, one per feedback, each with a copy of the rows needed to score its tasks and a
  bound on how far they are off; a group is released (its tasks become "regular") once that bound, shrinking
  with the global transform's scale, is small.

Both only help find candidates; the selector scores every candidate exactly and proves that no other task
can enter the top k (see :mod:`flexkit.selectors.difficulty_based._index`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from flexkit.selectors.difficulty_based._features import as64
from flexkit.selectors.difficulty_based.tuning import U64

#: Tasks processed per vectorised step when building a grid.
_BUILD_CHUNK = 1 << 20


def grid_bits(n: int) -> int:
    """Bits of rows (and of column buckets) of a grid over ``n`` points: about √n / 2 rows, 2 to 4096."""
    return int(min(max(np.ceil(np.log2(max(np.sqrt(n) / 2.0, 2.0))), 1), 12))


def slab_rows(
    cx: float, cy: float, lo: float, hi: float, y_lo: np.ndarray, y_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (between ``y_lo`` and ``y_hi``) that can hold a point of the slab ``lo ≤ cx·x + cy·y ≤ hi`` (``cx`` > 0),
    with each row's bounds on ``x``, widened by the rounding of the float steps computing them."""
    t_lo, t_hi = cy * y_lo, cy * y_hi
    err = 8.0 * U64 * (abs(lo) + abs(hi) + 2.0 * abs(cy)) / cx
    x_lo = (lo - np.maximum(t_lo, t_hi)) / cx - err
    x_hi = (hi - np.minimum(t_lo, t_hi)) / cx + err
    rows = np.flatnonzero((x_hi >= 0.0) & (x_lo <= 1.0) & (x_lo <= x_hi))
    return rows, x_lo[rows], x_hi[rows]


def slab_keys(
    cx: float, cy: float, lo: float, hi: float, y_lo: np.ndarray, y_hi: np.ndarray, bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`slab_rows` with each row's bounds on ``x`` quantised to ``bits``-bit keys (inclusive, floor)."""
    rows, x_lo, x_hi = slab_rows(cx, cy, lo, hi, y_lo, y_hi)
    scale, top = float(1 << bits), (1 << bits) - 1
    q_lo = (np.maximum(x_lo, 0.0) * scale).astype(np.int64)  # floor (x ≥ 0)
    q_hi = (np.minimum(x_hi, 1.0) * scale).astype(np.int64)
    np.minimum(q_lo, top, out=q_lo)
    np.minimum(q_hi, top, out=q_hi)
    return rows, q_lo, q_hi


class SlabGrid:
    """Points ``(x_i, y_i)`` in [0, 1]² sorted by ``(row, x)``, with ``2^row_bits`` rows of equal height in
    ``y``; ``x`` is quantised to ``32 − row_bits`` bits so that a point's key is one uint32. A table of the
    first position of each of a row's ``2^col_bits`` buckets of ``x`` finds a row's run in O(1).

    Memory: 8 bytes per point (keys and positions) plus the table (4 bytes per bucket, about 1 per point).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, *, row_bits: int, col_bits: int) -> None:
        n = x.size
        if n >= 2**31:
            raise ValueError(f"SlabGrid holds fewer than 2^31 points, got {n}")
        if not 1 <= col_bits <= 32 - row_bits or not 1 <= row_bits <= 16:
            raise ValueError(f"bad grid shape: row_bits={row_bits}, col_bits={col_bits}")
        rows, key_bits = 1 << row_bits, 32 - row_bits
        self.rows, self.key_bits, self.col_shift = rows, key_bits, key_bits - col_bits
        keys = np.empty(n, dtype=np.uint32)
        for start in range(0, n, _BUILD_CHUNK):
            sl = slice(start, min(start + _BUILD_CHUNK, n))
            row = np.minimum((as64(y[sl]) * rows).astype(np.uint32), rows - 1)  # y·2^r is exact: floor(y·rows)
            col = np.minimum((as64(x[sl]) * float(1 << key_bits)).astype(np.uint32), (1 << key_bits) - 1)
            keys[sl] = (row << np.uint32(key_bits)) | col
        # Sort (key, point) pairs packed in one uint64 (a plain sort is much faster than an argsort).
        packed = keys.astype(np.uint64)
        del keys
        packed <<= np.uint64(32)
        packed |= np.arange(n, dtype=np.uint64)
        packed.sort()
        #: The keys in increasing order and the point each belongs to (ties: smaller point first).
        self.keys = (packed >> np.uint64(32)).astype(np.uint32)
        self.order = (packed & np.uint64(0xFFFFFFFF)).astype(np.int32)
        del packed
        #: ``starts[j·2^col_bits + c]``: position of the first point of bucket ``c`` of row ``j``, or later
        #: (one more entry: n).
        counts = np.bincount(self.keys >> np.uint32(self.col_shift), minlength=rows << col_bits)
        self.starts = np.zeros(counts.size + 1, dtype=np.int32)
        np.cumsum(counts, out=self.starts[1:])
        self._cols_log2 = col_bits
        #: About how many points beyond a slab its runs hold (two partial buckets per row, evenly spread points).
        self.bucket_slack = 2 * (n >> col_bits) + 2 * rows
        self._y_lo = np.arange(rows) / rows
        self._y_hi = (np.arange(rows) + 1.0) / rows

    def runs(self, cx: float, cy: float, lo: float, hi: float) -> Runs:
        """The runs of positions to read for the slab ``lo ≤ cx·x + cy·y ≤ hi`` (``cx`` must be positive): per
        row that can hold a point of it, its buckets' positions and the row's key bounds (inclusive)."""
        rows, q_lo, q_hi = slab_keys(cx, cy, lo, hi, self._y_lo, self._y_hi, self.key_bits)
        row_base = rows << self._cols_log2
        start = self.starts[row_base + (q_lo >> self.col_shift)]
        stop = self.starts[row_base + (q_hi >> self.col_shift) + 1]
        base = rows.astype(np.int64) << self.key_bits
        return Runs(start, stop, base | q_lo, base | q_hi)

    def points(self, runs: Runs) -> np.ndarray:
        """The points (int64, in key order) of ``runs`` whose quantised key lies in their row's bounds: every
        point of the slab in real arithmetic and a few near it."""
        start, stop, key_lo, key_hi = runs
        lens = stop - start
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        offsets = np.cumsum(lens) - lens
        pos = np.arange(total, dtype=np.int64) + np.repeat(start - offsets, lens)
        key = self.keys[pos]
        keep = (key >= np.repeat(key_lo, lens)) & (key <= np.repeat(key_hi, lens))
        points: np.ndarray = self.order[pos[keep]].astype(np.int64)
        return points


class Runs(NamedTuple):
    """Per row of a :class:`SlabGrid`, the positions ``start:stop`` to read and the key bounds to keep."""

    start: np.ndarray
    stop: np.ndarray
    key_lo: np.ndarray
    key_hi: np.ndarray


def positions_to_read(runs: tuple[np.ndarray, ...]) -> int:
    """The positions that the runs of either grid make a reader visit (:class:`Runs`,
    :class:`~._compact_grid.CompactRuns`: both start with ``start`` and ``stop``): an upper bound on the points in
    their slab."""
    start, stop = runs[0], runs[1]
    return int((stop - start).sum())


class Group(NamedTuple):
    """Tasks observed by one feedback: a bound on their residuals and where their entries are stored."""

    bound: float
    start: int
    stop: int


class DirtyGroups:
    """The tasks scored one by one at every greedy selection ("dirty"), in groups; every other task is
    "regular": its residual is at most :attr:`bound` (in the units the caller chose).

    Each group holds one entry per task (its index and scoring rows); a task's newest entry speaks for it and
    marks older ones stale. The entries lie one after the other in buffers (a queue: added at the end, released
    from the front, moved back to the start when the end is reached), so the dirty tasks are read as one run,
    with a flag per entry saying whether it is the newest of its task. Memory: 4 bytes per task (``stamp``:
    the serial number of the task's newest held entry, or −1 for a regular task) plus the buffers; with
    ``compact``, one bit per task (held or not) instead, and a task observed again while held finds its older
    entry by a search of the held entries (O(held) per feedback).
    """

    #: Entry serial numbers stay below this (stamps are int32); the caller rebuilds before (:attr:`exhausted`).
    SERIAL_LIMIT = 2**31 - 1 - 2**26

    def __init__(self, size: int, columns: int, *, compact: bool = False) -> None:
        #: Per task, the serial number of its newest held entry, or −1 (None when ``compact``: a bit per task says
        #: whether it is held, :meth:`regular`).
        self.stamp: np.ndarray | None = None if compact else np.full(size, -1, dtype=np.int32)
        self._held_bits = np.zeros((size + 7) // 8 if compact else 0, dtype=np.uint8)
        self.groups: deque[Group] = deque()
        #: Residual bound of every regular task.
        self.bound = 0.0
        self._idx = np.empty(0, dtype=np.int64)
        self._newest = np.empty(0, dtype=bool)
        self._rows = [np.empty(0) for _ in range(columns)]
        self._head = self._tail = 0
        self._base = 0  # serial number of the entry at buffer position 0

    @property
    def exhausted(self) -> bool:
        """Whether the serial numbers ran out (rebuild from scratch; needs about 2^31 observations)."""
        return self._base + self._tail >= self.SERIAL_LIMIT

    def regular(self, idx: np.ndarray) -> np.ndarray:
        """Per task of ``idx`` (int64), whether it is regular (held by no group)."""
        if self.stamp is not None:
            regular: np.ndarray = self.stamp[idx] < 0
            return regular
        bits = self._held_bits[idx >> 3] >> (idx & 7).astype(np.uint8)
        regular = (bits & 1) == 0
        return regular

    @property
    def held(self) -> int:
        """Entries in all groups: tasks counted once per group holding them."""
        return self._tail - self._head

    def add(self, idx: np.ndarray, bound: float, rows: tuple[np.ndarray, ...]) -> None:
        """A new group: the tasks ``idx`` (no repeats, fewer than 2^26), their residual ``bound`` and scoring
        ``rows``."""
        size = idx.size
        if self._tail + size > self._idx.size:
            self._make_room(size)
        if self.stamp is not None:
            older = self.stamp[idx]
            self._newest[older[older >= 0] - self._base] = False  # held entries of these tasks are now stale
        else:
            again = idx[~self.regular(idx)]
            if again.size:  # their held entries are now stale: find them among the held entries
                live = slice(self._head, self._tail)
                self._newest[live][np.isin(self._idx[live], again)] = False
            np.bitwise_or.at(self._held_bits, idx >> 3, np.left_shift(1, idx & 7).astype(np.uint8))
        sl = slice(self._tail, self._tail + size)
        self._idx[sl] = idx
        self._newest[sl] = True
        for column, values in zip(self._rows, rows, strict=True):
            column[sl] = values
        if self.stamp is not None:
            self.stamp[idx] = np.arange(self._base + sl.start, self._base + sl.stop, dtype=np.int32)
        self.groups.append(Group(bound, sl.start, sl.stop))
        self._tail += size

    def _make_room(self, size: int) -> None:
        held, head = self.held, self._head
        capacity = max(self._idx.size, 2 * (held + size), 1024)
        if capacity > self._idx.size:  # grow (the held part moves to the start of the new buffers)
            idx, newest = np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=bool)
            rows = [np.empty(capacity) for _ in self._rows]
        else:  # move the held part to the start
            idx, newest, rows = self._idx, self._newest, self._rows
        idx[:held] = self._idx[head : self._tail]
        newest[:held] = self._newest[head : self._tail]
        for new, old in zip(rows, self._rows, strict=True):
            new[:held] = old[head : self._tail]
        self._idx, self._newest, self._rows = idx, newest, rows
        self.groups = deque(Group(g.bound, g.start - head, g.stop - head) for g in self.groups)
        self._head, self._tail, self._base = 0, held, self._base + head

    def tasks(self, group: Group) -> np.ndarray:
        """The tasks ``group`` speaks for (those no newer group holds)."""
        return self._idx[group.start : group.stop][self._newest[group.start : group.stop]]

    def release(self, limit: float, max_held: int) -> None:
        """Release the oldest groups while their bound is at most ``limit`` or more than ``max_held`` entries
        are held; their tasks that no newer group holds become regular and raise :attr:`bound`."""
        groups = self.groups
        while groups and (groups[0].bound <= limit or self.held > max_held):
            group = groups.popleft()
            done = self.tasks(group)
            if self.stamp is not None:
                self.stamp[done] = -1
            else:
                np.bitwise_and.at(self._held_bits, done >> 3, np.invert(np.left_shift(1, done & 7).astype(np.uint8)))
            if not group.bound <= self.bound:  # (a NaN bound propagates)
                self.bound = group.bound
            self._head = group.stop

    def rescale(self, new_bound: Callable[[float], float]) -> None:
        """Map every residual bound (the regular tasks' and each group's) through ``new_bound``."""
        self.bound = new_bound(self.bound)
        self.groups = deque(g._replace(bound=new_bound(g.bound)) for g in self.groups)

    def refresh_rows(self, rows_of: Callable[[np.ndarray], tuple[np.ndarray, ...]]) -> None:
        """Recompute the held entries' scoring rows as ``rows_of(indices)``."""
        sl = slice(self._head, self._tail)
        for column, values in zip(self._rows, rows_of(self._idx[sl]), strict=True):
            column[sl] = values

    def held_rows(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Every held entry: its task, whether it is the task's newest, and its scoring rows (views of the
        buffers: read them, never write)."""
        sl = slice(self._head, self._tail)
        return self._idx[sl], self._newest[sl], [column[sl] for column in self._rows]
