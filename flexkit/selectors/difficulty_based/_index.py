"""``difficulty_based``'s greedy index: the exact top-k for ``tau = 0`` without a pass over every task.

A global transform is not order-preserving here (``p̂ = α/(α + β)`` mixes the stored values with both
features, in a direction ``(p, q)`` that moves with ``c``), so one sorted array of stored values cannot give
the top k. What does hold: a task never observed since the last fold has ``α̃ = m0 + mp·f0 + mq·f1`` and
``α̃ + β̃ = ms`` for four scalars (the *model*, saved; a fold maps it like every task), so its true
``α = N0 + P·f0 + Q·f1`` and ``α + β = D0`` with ``N0 = a·m0 + b``, ``P = a·mp + p``, ``Q = a·mq + q``,
``D0 = a·ms + s``. Its cost is then ``|P·f0 + Q·f1 − h*| / D0`` with ``h* = target·D0 − N0``: the tasks
nearest the target lie in a *slab* of the feature plane, ``|P·f0 + Q·f1 − h*| ≤ W``.

* The *grid* (:class:`~._index_structures.SlabGrid`, built on first use, 8 bytes per task) sorts the tasks by
  a row of one feature and, within a row, the other; a slab is a run of positions per row, found in O(1) per
  row from a bucket table. It is keyed by the feature with the larger coefficient (a second grid is built if
  the other one comes to dominate by more than 2×).
* An observed task departs from the model by a *residual* ``r = |α̃ − model| + |α̃ + β̃ − ms|``, which the
  transform shrinks with ``a``: it moves a cost by at most about ``2·a·r/D0``. Each feedback's tasks form a
  *dirty group* (:class:`~._index_structures.DirtyGroups`) with a copy of their rows; dirty tasks are scored
  one by one. A group is released once ``a·r`` is small (:data:`~.tuning.RELEASE_EPS`; about 40 feedbacks
  with the default ``lamb``), or early when more than :data:`~.tuning.DIRTY_MAX` tasks (or
  :data:`~.tuning.DIRTY_FRACTION` of them) are held; the largest released residual ``U`` bounds every
  regular task's.
* Selection: the dirty tasks' float64 costs; a slab with at least k regular tasks (searched from the last
  step's width) and their float64 costs; θ = the k-th smallest of all these. Every other regular task costs
  more than ``|P·f0 + Q·f1 − h*|/D0 − eps`` where ``eps`` covers ``U`` (``a·U·(2 + …)/(D0 − a·U)``) and,
  generously, the float rounding of the costs and of the scalars; so the final slab ``W = D0·(θ + eps)``
  holds every task that can reach the top k, which is then taken by (float64 cost, index), bit-identical to
  the float32 pass of :mod:`._costs`. Cost per step: O(dirty + slab tasks + grid rows) ≈ 15,000 float64 costs
  at N = 10^6 with the defaults; feedback adds O(batch). A fold (every ~310 feedbacks with the default
  ``lamb``) scales every residual by ``a``: the bounds are mapped in place (plus the fold's rounding) and the
  dirty rows re-read, O(dirty tasks). After a load the next selection measures the residuals in one float64
  pass.

The index serves tasksets from :data:`~.tuning.INDEX_MIN` to :data:`~.tuning.INDEX_MAX` (2^27) tasks and gives
way to the float32 pass whenever it would read more than :data:`~.tuning.INDEX_BUDGET` of the tasks. Above
:data:`~.tuning.INDEX_DENSE_MAX` (2^25) tasks it takes its compact layout: one
:class:`~._compact_grid.CompactGrid` (4 bytes per task; rebuilt keyed on the other feature only once that
feature's coefficient is :data:`~.tuning.GRID_SWAP` times larger) and a dirty bit per task in place of the
4-byte stamps, about 4.5 bytes per task in all at 10^8 tasks; the slab search estimates its next width from a
sample of a too-wide slab's tasks, so a step reads the features of about the slab's and the dirty tasks only.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._compact_grid import CompactGrid
from flexkit.selectors.difficulty_based._costs import CostEngine
from flexkit.selectors.difficulty_based._features import as64
from flexkit.selectors.difficulty_based._index_structures import DirtyGroups, SlabGrid, grid_bits, positions_to_read
from flexkit.selectors.difficulty_based._posterior import BetaPosteriors
from flexkit.selectors.difficulty_based._task_model import FRESH_MODEL, TaskModel
from flexkit.selectors.difficulty_based._topk import smallest_pairs
from flexkit.selectors.difficulty_based._transform import Transform
from flexkit.selectors.difficulty_based.tuning import U64


class FeatureGrid(Protocol):
    """A feature grid, :class:`SlabGrid` or :class:`CompactGrid`: ``points`` takes the runs that the same grid's
    ``runs`` returned (each grid has its own kind of runs; :func:`positions_to_read` counts either)."""

    bucket_slack: int

    def runs(self, cx: float, cy: float, lo: float, hi: float) -> Any:
        """The runs of rows and columns that hold the slab ``lo <= cx·x + cy·y <= hi``."""
        ...

    def points(self, runs: Any) -> np.ndarray:
        """The points (int64) of ``runs``."""
        ...


class GreedyIndex:
    """The greedy top-k of ``tau = 0`` without a pass (see the module docstring), over the posteriors ``beliefs``,
    scoring candidates with ``costs`` for the selector's ``target``.

    Holds the :class:`TaskModel` of a never-observed task (:attr:`model`, saved), and caches rebuilt from the
    state: the feature grids (built on first use), the dirty groups (None until the first indexed selection and
    after a load) and the slab width the next search starts from (:attr:`width`, :attr:`drift`).
    """

    def __init__(self, beliefs: BetaPosteriors, costs: CostEngine, *, target: float) -> None:
        self.beliefs = beliefs
        self.features = beliefs.features
        self.costs = costs
        self.size = beliefs.size
        self.target = target
        self.model = FRESH_MODEL
        self.grids: dict[bool, FeatureGrid] = {}
        self.groups: DirtyGroups | None = None
        self.width: float | None = None
        self.drift = 0.0

    def reset(self, model: TaskModel | None = None) -> None:
        """Forget the dirty groups and the slab width (the grids only depend on the features: they stay); take
        ``model`` if given (a load)."""
        if model is not None:
            self.model = model
        self.groups, self.width, self.drift = None, None, 0.0

    def model_now(self) -> tuple[float, float, float, float]:
        """The model in true units: a never-observed task has α = N0 + P·f0 + Q·f1 and α + β = D0 (real
        arithmetic on the stored floats; computed here in float64)."""
        transform = self.beliefs.transform
        a, (m0, mp, mq, ms) = transform.scale, self.model
        b = transform.alpha_shift
        return a * m0 + b, a * mp + transform.f0_slope, a * mq + transform.f1_slope, a * ms + b + transform.beta_shift

    def _release_limit(self) -> float:
        """A group is released when its residual bound (in α̃ units) is at most this: then it shifts a regular
        task's cost by about ``RELEASE_EPS`` at most."""
        d0 = self.model_now()[3]
        return 0.5 * tuning.RELEASE_EPS * d0 / self.beliefs.transform.scale

    def _residual_bound(self, alpha_t: np.ndarray, total: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> np.ndarray:
        """Per task, an upper bound on ``|α̃ − (m0 + mp·f0 + mq·f1)| + |α̃ + β̃ − ms|`` (real arithmetic; the
        float error of computing it is added), from the rows ``α̃``, ``α̃ + β̃`` (rounded), ``f0``, ``f1``."""
        m0, mp, mq, ms = self.model
        r = f0 * mp
        r += f1 * mq
        r += m0
        np.subtract(alpha_t, r, out=r)
        np.abs(r, out=r)
        d = total - ms
        np.abs(d, out=d)
        r += d
        np.abs(alpha_t, out=d)
        d += np.abs(total)
        d += abs(m0) + abs(mp) + abs(mq) + abs(ms)
        d *= 8.0 * U64
        r += d
        r *= 1.0 + 16.0 * U64
        return r

    def _group_rows(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What a dirty group keeps to score its tasks: ``α̃``, ``α̃ + β̃``, ``f0``, ``f1`` (copies)."""
        f0, f1 = self.features.rows(idx)
        alpha_t, beta_t = self.beliefs.store.values(idx, f0, f1)
        beta_t += alpha_t
        return alpha_t, beta_t, f0, f1

    def _dirty_max(self) -> int:
        return max(tuning.DIRTY_MAX, int(tuning.DIRTY_FRACTION * self.size))

    def observe(self, indices: np.ndarray, rows: tuple[np.ndarray, ...]) -> None:
        """Feedback rewrote the rows ``indices`` (now ``rows``, as :meth:`_group_rows` gives them): they form a
        new dirty group; release the groups that have decayed enough (or the oldest, beyond
        :meth:`_dirty_max` tasks). Nothing while no groups are held."""
        groups = self.groups
        if groups is None:
            return
        if groups.exhausted:
            self.groups = None
            return
        groups.add(indices, float(self._residual_bound(*rows).max()), rows)
        groups.release(self._release_limit(), self._dirty_max())

    def folded(self, transform: Transform) -> None:
        """``transform`` was just folded into the stored values: map the model, the groups' residual bounds and
        re-read their rows."""
        old_model = self.model
        self.model = old_model.folded(transform)
        if self.groups is None:
            return
        m0, mp, mq, ms = old_model
        a, b, b_beta = transform.scale, transform.alpha_shift, transform.beta_shift
        # A residual r becomes a·r plus the rounding of the fold (six float steps on α and on β, each within
        # u of a partial sum at most a·(|model| + 2r) + |b| + |b_β| + |p| + |q|) and of the new model.
        size = abs(m0) + abs(mp) + abs(mq) + abs(ms)
        loose = abs(b) + abs(b_beta) + abs(transform.f0_slope) + abs(transform.f1_slope) + abs(b + b_beta)

        def rescaled(bound: float) -> float:
            return (a * bound + 32.0 * U64 * (a * (size + 2.0 * bound) + loose)) * (1.0 + 8.0 * U64)

        self.groups.rescale(rescaled)
        self.groups.refresh_rows(self._group_rows)

    def rebuild_groups(self) -> DirtyGroups:
        """One pass over all tasks: the regular tasks' residual bound, and one dirty group of the tasks
        above the release limit (at most :meth:`_dirty_max`, the largest)."""
        groups = DirtyGroups(self.size, 4, compact=self.size > tuning.INDEX_DENSE_MAX)
        limit = self._release_limit()
        hot_idx: list[np.ndarray] = []
        hot_bound: list[np.ndarray] = []
        held, regular, most = 0, 0.0, self._dirty_max()
        chunk = tuning.CHUNK
        alpha, total = np.empty(min(chunk, self.size)), np.empty(min(chunk, self.size))
        for start in range(0, self.size, chunk):
            sl = slice(start, min(start + chunk, self.size))
            alpha_t, total_t = alpha[: sl.stop - start], total[: sl.stop - start]
            self.beliefs.store.slice_into(start, sl.stop, alpha_t, total_t)
            total_t += alpha_t
            bound = self._residual_bound(alpha_t, total_t, *self.features.rows(sl))
            hot = ~(bound <= limit)  # NaN (never from a state this class made) stays dirty
            if not hot.all():
                regular = max(regular, float(bound[~hot].max()))
            if hot.any():
                hot_idx.append(np.flatnonzero(hot) + start)
                hot_bound.append(bound[hot])
                held += hot_idx[-1].size
            if held > 2 * most or (held > most and sl.stop == self.size):  # keep the largest
                idx, bnd = np.concatenate(hot_idx), np.concatenate(hot_bound)
                drop = bnd.size - most
                cut = np.argpartition(bnd, drop - 1)
                regular = max(regular, float(bnd[cut[:drop]].max()))
                hot_idx, hot_bound, held = [idx[cut[drop:]]], [bnd[cut[drop:]]], most
        groups.bound = regular
        if held:
            idx, bnd = np.concatenate(hot_idx), np.concatenate(hot_bound)
            idx.sort()
            groups.add(idx, float(bnd.max()), self._group_rows(idx))
            groups.release(limit, self._dirty_max())
        return groups

    def _grid(self, by_f0: bool) -> FeatureGrid:
        """The feature grid keyed by ``f0`` (rows of ``f1``) or the other way round, built on first use: a
        :class:`SlabGrid` up to ``tuning.INDEX_DENSE_MAX`` tasks, a :class:`CompactGrid` above (one at a time)."""
        grid: FeatureGrid | None = self.grids.get(by_f0)
        if grid is None:
            x, y = self._key_columns(by_f0)
            bits = grid_bits(self.size)
            if self.size > tuning.INDEX_DENSE_MAX:
                self.grids.clear()  # drop the other one first: never two at once
                grid = CompactGrid(x, y, row_bits=bits, col_bits=max(bits - 1, 1))
            else:
                grid = SlabGrid(x, y, row_bits=bits, col_bits=bits)
            self.grids[by_f0] = grid
        return grid

    def _key_columns(self, by_f0: bool) -> tuple[np.ndarray, np.ndarray]:
        """The grid's key feature and the other one: ``(f0, f1)`` when keyed by ``f0``, else ``(f1, f0)``."""
        features = self.features
        return (features.f0, features.f1) if by_f0 else (features.f1, features.f0)

    def _grid_key(self, cp: float, cq: float) -> bool:
        """Whether to key the grid on ``f0``: on the feature with the larger coefficient, but a grid already built
        serves while its key's coefficient is at least half the other (each grid costs a sort of all tasks to
        build), above ``tuning.INDEX_DENSE_MAX`` tasks while it is at least ``1/tuning.GRID_SWAP`` of it."""
        by_f0 = abs(cp) >= abs(cq)
        if by_f0 not in self.grids and (not by_f0) in self.grids:
            ratio = 2.0 if self.size <= tuning.INDEX_DENSE_MAX else tuning.GRID_SWAP
            by_f0 = by_f0 if max(abs(cp), abs(cq)) > ratio * min(abs(cp), abs(cq)) else not by_f0
        return by_f0

    def select(self, k: int) -> np.ndarray | None:
        """The greedy top-k (as the float32 pass gives it, bit for bit) without a pass over all tasks, or None
        when the index would not be cheaper (the caller then runs the pass).

        A regular task's cost is within ``eps`` of ``|P·f0 + Q·f1 − h*| / D0`` (the model plus its residual
        bound, and float error); dirty tasks are scored one by one. The slab ``|P·f0 + Q·f1 − h*| ≤ W`` is
        widened until it holds k tasks; its tasks are scored exactly, giving the k-th best cost θ; then every
        regular task in ``|P·f0 + Q·f1 − h*| ≤ D0·(θ + eps)`` is scored, and no task outside can beat θ."""
        if self.groups is None:
            self.groups = self.rebuild_groups()
        groups = self.groups
        n0, cp, cq, d0 = self.model_now()
        transform = self.beliefs.transform
        a_bound = transform.scale * groups.bound
        den_min = d0 - a_bound
        scale = abs(n0) + abs(cp) + abs(cq) + abs(d0)
        if not (den_min > 0.0 and max(abs(cp), abs(cq)) > 64.0 * U64 * scale):
            return None
        # eps: the residual (model), the float evaluation of a cost (generously), and the float scalars above.
        loose = (abs(transform.alpha_shift) + abs(transform.f0_slope) + abs(transform.f1_slope)
                 + abs(transform.alpha_shift + transform.beta_shift))
        a, (m0, mp, mq, ms) = transform.scale, self.model
        scalars = a * (abs(m0) + abs(mp) + abs(mq) + abs(ms)) + loose + abs(self.target * d0 - n0)
        eps = a_bound * (1.0 + (d0 + 2.0 * a_bound) / d0) / den_min
        eps += 32.0 * U64 * (8.0 + 8.0 * loose / den_min) + 16.0 * U64 * scalars / den_min
        eps *= 1.01
        by_f0 = self._grid_key(cp, cq)
        cx, cy = (cp, cq) if by_f0 else (cq, cp)
        h_star = self.target * d0 - n0
        sign = 1.0 if cx > 0 else -1.0
        cx, cy, h_star = sign * cx, sign * cy, sign * h_star
        grid = self._grid(by_f0)
        budget = max(int(tuning.INDEX_BUDGET * self.size), 4 * k)
        dirty, dirty_cost = self._dirty_costs(groups)
        found = self._slab_search(
            by_f0, cx, cy, h_star, min(k, self.size - dirty.size), budget, groups, dirty.size
        )
        if found is None:
            return None
        cand, width = found
        if dirty.size + cand.size > budget:
            return None
        cost = np.concatenate([dirty_cost, self.costs.cost64(cand)])
        theta = float(np.partition(cost, k - 1)[k - 1])
        need = d0 * (theta + eps) * (1.0 + 16.0 * U64)
        if need > width:  # the final slab: every regular task that can still beat theta
            runs = grid.runs(cx, cy, h_star - need, h_star + need)
            if positions_to_read(runs) + dirty.size > budget:
                return None
            cand = grid.points(runs)
            cand = cand[groups.regular(cand)]
            cost = np.concatenate([dirty_cost, self.costs.cost64(cand)])
        # The next selection starts a little wider than this one needed (its best tasks move a little).
        if self.width is not None:
            self.drift = abs(need + 4.0 * d0 * eps - self.width)
        self.width = need + 4.0 * d0 * eps
        idx, key = smallest_pairs(np.concatenate([dirty, cand]), cost, k)
        return idx[np.lexsort((idx, key))]

    def _dirty_costs(self, groups: DirtyGroups) -> tuple[np.ndarray, np.ndarray]:
        """The dirty tasks and their exact costs (from the rows the groups keep)."""
        idx, mine, rows = groups.held_rows()
        cost = self.costs.cost64_rows(*rows)
        return idx[mine], cost[mine]

    def _slab_search(
        self, by_f0: bool, cx: float, cy: float, h_star: float, k: int, budget: int, groups: DirtyGroups, held: int
    ) -> tuple[np.ndarray, float] | None:
        """A slab ``|cx·x + cy·y − h*| ≤ W`` (x = f0 when ``by_f0``, else f1) holding at least ``k`` regular tasks
        (``groups.regular``; ``held`` tasks are dirty) and, where ties allow, at most ``tuning.SLAB_TARGET`` × ``k``.
        The search starts from the last selection's width (the best tasks move little between steps), widens
        while too few are inside (doubling steps while none is, else extrapolating from their distances), jumps
        to the distance of the 2k-th nearest when too many are, and bisects otherwise. Returns the slab's
        regular tasks and ``W``, or None when no such slab fits the budget."""
        if k == 0:  # every task is dirty
            return np.empty(0, dtype=np.int64), 0.0
        grid = self._grid(by_f0)
        x, y = self._key_columns(by_f0)
        h_min, h_max = min(cy, 0.0), cx + max(cy, 0.0)  # the range of cx·x + cy·y over [0, 1]²
        gap = max(h_star - h_max, h_min - h_star, 0.0)
        # The first widening step: about 4k tasks' worth of width where tasks are dense, or the last change.
        step = max((cx + abs(cy)) * 4.0 * k / self.size, self.drift)
        width = max(self.width if self.width is not None else gap + step, gap)
        # Widths known to hold fewer than k regular tasks (lo), at least k or more than the budget allows (hi), and
        # runs much longer than wanted, not read yet (soft): those are bisected first and read only once the
        # bracket is narrow (a slab packed with dirty tasks, or huge buckets of equal features, has long runs).
        lo, hi, soft = 0.0, math.inf, math.inf
        target = tuning.SLAB_TARGET
        cap = 4 * target * k + held + grid.bucket_slack
        force = False
        best: tuple[np.ndarray, float] | None = None
        cand: np.ndarray | None  # None: bisect
        for _ in range(tuning.SLAB_STEPS):
            runs = grid.runs(cx, cy, h_star - width, h_star + width)
            size = positions_to_read(runs)
            if size > budget:
                hi = width
            elif size > cap and not force:
                soft = width
            else:
                force = False
                cand = grid.points(runs)
                if cand.size > held + target * k:  # more regular tasks than wanted whatever the dirty ones hold
                    best, hi = (np.empty(0, dtype=np.int64), width), width  # its tasks are read if it stays best
                    jump = _kth_distance(x, y, cand, cx, cy, h_star, 2 * k) * (1.0 + 1e-9)
                    if lo < jump < hi:
                        width = jump
                        continue
                    cand = None  # bisect below
                else:
                    cand = cand[groups.regular(cand)]
                if cand is None:
                    pass
                elif cand.size < k:
                    lo = width
                    if soft <= width:
                        soft = math.inf
                    if cand.size and min(hi, soft) == math.inf:  # extrapolate from the tasks found so far
                        near = float(np.abs(as64(x[cand]) * cx + as64(y[cand]) * cy - h_star).min())
                        grow = (width - near) * min((2 * k - cand.size) / cand.size, 4.0)
                        width += max(grow, step)
                        continue
                else:
                    best, hi = (cand, width), width
                    if cand.size <= target * k:
                        break
                    jump = _kth_distance(x, y, cand, cx, cy, h_star, 2 * k) * (1.0 + 1e-9)
                    if lo < jump < hi:
                        width = jump
                        continue
            top = min(hi, soft)
            if top == math.inf:
                width, step = lo + step, 2.0 * step
            elif top == soft and soft - lo <= 0.01 * soft:
                width, force = soft, True
            elif top - lo <= 1e-9 * top:
                break
            else:
                width = 0.5 * (lo + top)
        if best is not None and not best[0].size:  # the narrowest slab found was only counted: read its tasks
            cand = grid.points(grid.runs(cx, cy, h_star - best[1], h_star + best[1]))
            best = (cand[groups.regular(cand)], best[1])
        return best


def _kth_distance(
    x: np.ndarray, y: np.ndarray, cand: np.ndarray, cx: float, cy: float, h_star: float, rank: int
) -> float:
    """About the ``rank``-th smallest ``|cx·x + cy·y − h*|`` over the tasks ``cand`` (more than ``rank``): exact up to
    ``tuning.DISTANCE_SAMPLE`` tasks, else from an evenly strided sample of that many (a width to try next, so an
    estimate is enough, and it spares reading the features of many tasks at random)."""
    stride = max(cand.size // tuning.DISTANCE_SAMPLE, 1)
    part = cand[::stride] if stride > 1 else cand
    dist = as64(x[part]) * cx
    dist += as64(y[part]) * cy
    dist -= h_star
    np.abs(dist, out=dist)
    i = min(max(-(-rank // stride) - 1, 0), dist.size - 1)
    return float(np.partition(dist, i)[i])
