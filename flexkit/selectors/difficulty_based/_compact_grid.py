"""The feature grid of ``difficulty_based``'s greedy index for very large tasksets: 4 bytes per point.

:class:`CompactGrid` answers the same questions as :class:`~._index_structures.SlabGrid` (the runs of a slab
``lo ≤ cx·x + cy·y ≤ hi`` and their points) for up to 2^27 points, at half its memory: the points sorted by a
cell (a row of ``y``, then a bucket of ``x``) and, per point, one uint32 holding its index and the next
``fine_bits`` bits of ``x`` below its bucket (5 bits at 10^8 points), sorted by them within a cell. A table of
each cell's first position (4 bytes per cell) finds a row's run; only the first and last bucket of a run need the
fine bits: a large one (strongly correlated features pack a row's points into a bucket or two) is narrowed by a
binary search on them, a small one filtered.

Building it sorts the points a band of rows at a time (one chunked scan of the features per band), so no N-sized
temporary is made beyond the grid itself.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flexkit.selectors.difficulty_based._features import as64
from flexkit.selectors.difficulty_based._index_structures import slab_keys

#: Tasks scanned per vectorised step while building.
_SCAN_CHUNK = 1 << 20
#: A run's first or last bucket holding more points than this is narrowed by a binary search on the fine bits.
_SEARCH_MIN = 64
#: Rows are sorted in bands of at most about this many points (the band's sort keys: 8 bytes per point).
_BAND_POINTS = 1 << 21


class CompactRuns(NamedTuple):
    """Per row of a :class:`CompactGrid`: positions ``start:stop`` to read, where the first bucket ends and the last
    begins, and the fine bits a point of the first bucket must reach (``fine_lo``) or of the last not pass."""

    start: np.ndarray
    stop: np.ndarray
    first_end: np.ndarray
    last_start: np.ndarray
    fine_lo: np.ndarray
    fine_hi: np.ndarray


class CompactGrid:
    """Points ``(x_i, y_i)`` in [0, 1]² in cells of ``2^row_bits`` rows of ``y`` by ``2^col_bits`` buckets of ``x``,
    with ``x`` quantised to ``col_bits + fine_bits`` bits (``fine_bits = 32 − bits of the largest index``).

    Memory: 4 bytes per point plus 4 per cell.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, *, row_bits: int, col_bits: int) -> None:
        n = x.size
        id_bits = max(int(n - 1).bit_length(), 1)
        if id_bits > 31:
            raise ValueError(f"CompactGrid holds at most 2^31 points, got {n}")
        if not 1 <= row_bits <= 16 or not 1 <= col_bits <= 16:
            raise ValueError(f"bad grid shape: row_bits={row_bits}, col_bits={col_bits}")
        rows = 1 << row_bits
        self.rows, self.col_bits = rows, col_bits
        self.fine_bits, self.id_bits = 32 - id_bits, id_bits
        self.q_bits = col_bits + self.fine_bits
        #: ``starts[j·2^col_bits + c]``: position of the first point of bucket ``c`` of row ``j`` (one more: n).
        self.starts = np.zeros((rows << col_bits) + 1, dtype=np.int32 if n < 2**31 else np.int64)
        #: Per position: the fine bits of the point's ``x`` above ``id_bits`` bits of its index.
        self.packed = np.empty(n, dtype=np.uint32)
        counts = np.zeros(rows, dtype=np.int64)
        for start in range(0, n, _SCAN_CHUNK):
            counts += np.bincount(self._row_of(as64(y[start : start + _SCAN_CHUNK])), minlength=rows)
        filled, first = 0, 0
        bounds = np.cumsum(counts)
        while first < rows:  # a band of rows [first, last) with at most about _BAND_POINTS points (at least a row)
            last = max(int(np.searchsorted(bounds, filled + _BAND_POINTS, side="right")), first + 1)
            filled = self._fill_band(x, y, first, min(last, rows), filled)
            first = last
        #: About how many points beyond a slab its runs hold (two partial buckets per row, evenly spread points).
        self.bucket_slack = 2 * (n >> col_bits) + 2 * rows
        self._y_lo = np.arange(rows) / rows
        self._y_hi = (np.arange(rows) + 1.0) / rows

    def _row_of(self, y64: np.ndarray) -> np.ndarray:
        """The row of each ``y`` (float64): ``floor(y·rows)`` (exact), the top row for ``y = 1``."""
        row = (y64 * self.rows).astype(np.int64)
        return np.minimum(row, self.rows - 1, out=row)

    def _fill_band(self, x: np.ndarray, y: np.ndarray, first: int, last: int, filled: int) -> int:
        """Sort the points of rows ``first:last`` into place from position ``filled``; returns the next position."""
        lo = first / self.rows
        hi = last / self.rows if last < self.rows else np.inf  # the top row also holds y = 1
        fine_mask = (1 << self.fine_bits) - 1
        top = (1 << self.q_bits) - 1
        keys = []
        for start in range(0, x.size, _SCAN_CHUNK):
            part = y[start : start + _SCAN_CHUNK]
            if part.dtype.kind == "f" and part.dtype.itemsize < 4:  # lo, hi (multiples of 2^-16) are exact in float32
                part = as64(part)
            ids = np.flatnonzero((part >= lo) & (part < hi))
            if not ids.size:
                continue
            row = self._row_of(as64(part[ids]))
            ids += start
            q = (as64(x[ids]) * float(1 << self.q_bits)).astype(np.int64)  # floor (x ≥ 0; exact scaling)
            np.minimum(q, top, out=q)
            cell = ((row - first) << self.col_bits) | (q >> self.fine_bits)
            low = ((q & fine_mask) << self.id_bits) | ids
            keys.append((cell.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64))
        key = np.concatenate(keys) if keys else np.empty(0, dtype=np.uint64)
        del keys
        key.sort()
        stop = filled + key.size
        self.packed[filled:stop] = key  # the low 32 bits (assignment truncates)
        key >>= np.uint64(32)  # the cells, below 2^32: the same values as int64
        cells = (last - first) << self.col_bits
        per_cell = np.bincount(key.view(np.int64), minlength=cells)
        base = first << self.col_bits
        self.starts[base + 1 : base + cells + 1] = filled + np.cumsum(per_cell)
        return stop

    def runs(self, cx: float, cy: float, lo: float, hi: float) -> CompactRuns:
        """The runs of positions to read for the slab ``lo ≤ cx·x + cy·y ≤ hi`` (``cx`` must be positive)."""
        rows, q_lo, q_hi = slab_keys(cx, cy, lo, hi, self._y_lo, self._y_hi, self.q_bits)
        base = rows << self.col_bits
        b_lo, b_hi = base + (q_lo >> self.fine_bits), base + (q_hi >> self.fine_bits)
        mask = (1 << self.fine_bits) - 1
        starts = self.starts
        start, stop = starts[b_lo].astype(np.int64), starts[b_hi + 1].astype(np.int64)
        first_end, last_start = starts[b_lo + 1], starts[b_hi]
        fine_lo, fine_hi = q_lo & mask, q_hi & mask
        if self.fine_bits:  # narrow the runs whose first or last bucket is large to the points within the fine bounds
            big = np.flatnonzero(first_end - start > _SEARCH_MIN)
            if big.size:
                start[big] = self._search(start[big], first_end[big], fine_lo[big], strict=False)
            big = np.flatnonzero(stop - last_start > _SEARCH_MIN)
            if big.size:
                stop[big] = self._search(np.maximum(last_start[big], start[big]), stop[big], fine_hi[big], strict=True)
            np.maximum(stop, start, out=stop)
        return CompactRuns(start, stop, first_end, last_start, fine_lo, fine_hi)

    def _search(self, lo: np.ndarray, hi: np.ndarray, fine: np.ndarray, *, strict: bool) -> np.ndarray:
        """Per run, the first position in ``lo:hi`` (one bucket, sorted by fine bits) whose fine bits are at least
        ``fine`` (greater than, when ``strict``), or ``hi``: a binary search vectorised over the runs."""
        lo = lo.astype(np.int64)
        count = hi.astype(np.int64) - lo
        np.maximum(count, 0, out=count)
        last = self.packed.size - 1
        while count.any():
            half = count >> 1
            mid = lo + half
            value = (self.packed[np.minimum(mid, last)] >> np.uint32(self.id_bits)).astype(np.int64)
            right = (value <= fine) if strict else (value < fine)
            right &= count > 0
            lo = np.where(right, mid + 1, lo)
            count = np.where(right, count - half - 1, half)
        return lo

    def points(self, runs: CompactRuns) -> np.ndarray:
        """The points (int64) of ``runs`` whose quantised ``x`` lies in their row's bounds: every point of the slab
        in real arithmetic and a few near it."""
        start, stop, first_end, last_start, fine_lo, fine_hi = runs
        lens = (stop - start).astype(np.int64)
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        offsets = np.cumsum(lens) - lens
        pos = np.arange(total, dtype=np.int64) + np.repeat(start - offsets, lens)
        word = self.packed[pos]
        if self.fine_bits:
            fine = (word >> np.uint32(self.id_bits)).astype(np.int64)
            drop = (pos < np.repeat(first_end, lens)) & (fine < np.repeat(fine_lo, lens))
            drop |= (pos >= np.repeat(last_start, lens)) & (fine > np.repeat(fine_hi, lens))
            word = word[~drop]
        points: np.ndarray = (word & np.uint32((1 << self.id_bits) - 1)).astype(np.int64)
        return points
