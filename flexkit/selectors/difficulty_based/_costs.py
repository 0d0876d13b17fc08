"""``difficulty_based``'s costs and full passes: float32 mirrors, exact float64 costs, the greedy float32 pass.

All scores are defined in float64 (``cost_i = |p̂_i − target|``, computed from the float64 state with the same
float steps everywhere, :meth:`CostEngine.cost64`). A full pass over N tasks instead runs in float32 on
mirrors kept next to the state (:mod:`._mirrors`): ``D = α̃ − target·(α̃ + β̃)`` and ``S = α̃ + β̃`` (updated for the
batch rows at each feedback, rebuilt on a fold or load), and float32 features: the caller's columns themselves when
their values are exact in float32, else float32 copies up to :data:`~.tuning.FEATURE_MIRROR_MAX` tasks and the
float64 columns above (:mod:`._features`). Dividing the transform by
``a``, ``cost_i = |D_i + (p/a)·f0_i + (q/a)·f1_i + (b − target·s)/a| / (S_i + s/a)`` with ``s = b + b_β``: eight
element-wise operations on cache-sized chunks. Every term is at most a few times ``(α_i + β_i)/a``, so the
float32 value is within :data:`~.tuning.COST32_MARGIN` of the float64 one, and the fast pass only ever *filters*.

For ``tau = 0`` (when the greedy index of :mod:`._index` does not answer), a chunk's tasks whose float32 cost is
within the margin of the running k-th best float64 cost get their float64 cost; a running top-k by (float64
cost, index) is merged from those. The result is bit-identical to a float64 top-k over all tasks, at the price
of one float32 pass. With :data:`~.tuning.THREADS` > 1 (opt-in) the pass above :data:`~.tuning.PARALLEL_MIN`
tasks is split between threads (numpy releases the GIL in its loops); the parts' top-k are merged exactly, so
the result does not depend on the split.

When the float32 pass cannot be trusted (extreme ``m``/``lamb``/``fold_below`` making magnitudes overflow
float32, or a loaded state that breaks the model's invariants: :meth:`CostEngine.fast_coefficients` is
None), the float64 pass (:meth:`CostEngine.exact_costs`) scores every task; ``do_sample`` always uses it
(Thompson draws for every task).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._features import as64
from flexkit.selectors.difficulty_based._mirrors import Float32Mirrors
from flexkit.selectors.difficulty_based._posterior import BetaPosteriors
from flexkit.selectors.difficulty_based._topk import RunningBest, round_up32, smallest_pairs

_POOL: tuple[int, ThreadPoolExecutor] | None = None

#: The fast pass's four float32 coefficients ``(p, q, k, s)`` (:meth:`CostEngine.fast_coefficients`).
Coef32 = tuple[np.float32, np.float32, np.float32, np.float32]


class CostEngine:
    """Every task's cost ``|p̂ − target|`` and the passes over all tasks (see the module docstring).

    Reads the posteriors ``beliefs`` (features, stored values, transform) and their float32 ``mirrors``; draws its
    noise (Gumbel, Thompson) from ``rng``, the selector's generator; keeps float32 chunk buffers per pass part.
    """

    def __init__(
        self, beliefs: BetaPosteriors, mirrors: Float32Mirrors, *, target: float, tau: float,
        rng: np.random.Generator,
    ) -> None:
        self.beliefs = beliefs
        self.features = beliefs.features
        self.mirrors = mirrors
        self.size = beliefs.size
        self.target, self.tau = target, tau
        self.rng = rng
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # float32 chunk buffers per pass part

    def fast_coefficients(self) -> Coef32 | None:
        """The float32 scalars of the fast pass, or None when it cannot be trusted (see the module docstring)."""
        transform = self.beliefs.transform
        a = transform.scale
        if not self.beliefs.trusted or not a > 0.0 or 8.0 * self.beliefs.total_bound() / a >= tuning.FLOAT32_LIMIT:
            return None
        s0 = transform.total_shift
        coef = (transform.f0_slope / a, transform.f1_slope / a, (transform.alpha_shift - self.target * s0) / a, s0 / a)
        p, q, k, s = (np.float32(c) for c in coef)
        return p, q, k, s

    # -- costs ------------------------------------------------------------------------------------------

    def cost32(self, start: int, stop: int, out: np.ndarray, tmp: np.ndarray, coef: Coef32) -> None:
        """Write the float32 cost ``|p̂ − target|`` of tasks ``start:stop`` into ``out`` (``tmp``: scratch)."""
        p, q, k, s = coef
        sl = slice(start, stop)
        offsets, totals = self.mirrors.chunk(start, stop)
        np.multiply(self.features.f0_fast[sl], p, out=tmp, casting="same_kind")
        np.add(offsets, tmp, out=out)
        np.multiply(self.features.f1_fast[sl], q, out=tmp, casting="same_kind")
        out += tmp
        out += k
        np.add(totals, s, out=tmp)
        out /= tmp
        np.abs(out, out=out)

    def cost32_all(self, out: np.ndarray, coef: Coef32) -> None:
        """Write every task's float32 cost into ``out`` (N-sized), chunk by chunk."""
        chunk = tuning.CHUNK
        tmp = np.empty(min(chunk, self.size), dtype=np.float32)
        for start in range(0, self.size, chunk):
            stop = min(start + chunk, self.size)
            self.cost32(start, stop, out[start:stop], tmp[: stop - start], coef)

    def cost64(self, idx: np.ndarray) -> np.ndarray:
        """The exact float64 cost ``|p̂ − target|`` of the tasks ``idx``: the same float steps as the float64
        pass (:meth:`exact_costs`), so the same bits."""
        f0, f1 = self.features.rows(idx)
        alpha_t, beta_t = self.beliefs.store.values(idx, f0, f1)
        beta_t += alpha_t
        return self.cost64_rows(alpha_t, beta_t, f0, f1)

    def cost64_rows(self, alpha_t: np.ndarray, total: np.ndarray, f0: np.ndarray, f1: np.ndarray) -> np.ndarray:
        """:meth:`cost64` of tasks given by their rows ``α̃``, ``α̃ + β̃``, ``f0``, ``f1`` (same float steps)."""
        transform = self.beliefs.transform
        a, s0 = transform.scale, transform.total_shift
        pred = alpha_t * a
        pred += transform.alpha_shift
        tmp = f0 * transform.f0_slope
        pred += tmp
        np.multiply(f1, transform.f1_slope, out=tmp)
        pred += tmp
        den = total * a
        den += s0
        pred /= den
        pred -= self.target
        return np.abs(pred, out=pred)

    # -- passes over all tasks ----------------------------------------------------------------------------

    def exact_costs(self, *, with_noise: bool, do_sample: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """The float64 pass: an N-sized array to minimise, ``|p̂ − target|/τ + log(−log U)`` (Gumbel noise,
        ``with_noise``) or ``|p̂ − target|``; with ``do_sample`` p̂ is a Thompson draw (also returned)."""
        n = self.size
        target, tau = self.target, self.tau
        cost = np.empty(n)
        drawn = np.empty(n) if do_sample else None  # Thompson draws, kept for the info dict
        chunk = tuning.CHUNK
        width = min(chunk, n)
        alpha, beta, tmp = np.empty(width), np.empty(width), np.empty(width)
        transform, store, features = self.beliefs.transform, self.beliefs.store, self.features
        a, b, s0 = transform.scale, transform.alpha_shift, transform.total_shift
        p, q = transform.f0_slope, transform.f1_slope
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            w, sl = stop - start, slice(start, stop)
            al, be, t = alpha[:w], beta[:w], tmp[:w]
            if drawn is not None:
                self.beliefs.slice_into(sl, al, be, t)
                pred = drawn[sl]
                pred[...] = self.rng.beta(al, be)
            else:  # p̂ = α / (α + β) with α + β = a·(α̃ + β̃) + b + b_β: fewer passes than computing β
                store.slice_into(start, stop, t, be)
                be += t
                np.multiply(t, a, out=al)
                al += b
                np.multiply(as64(features.f0[sl]), p, out=t)
                al += t
                np.multiply(as64(features.f1[sl]), q, out=t)
                al += t
                be *= a
                be += s0
                pred = np.divide(al, be, out=al)
            c = cost[sl]
            np.subtract(pred, target, out=c)
            np.abs(c, out=c)
            if with_noise:
                if 1.0 / tau < math.inf:
                    c *= 1.0 / tau
                else:  # a subnormal tau: 0/τ must stay 0, not 0·inf
                    with np.errstate(over="ignore"):
                        c /= tau
                noise = self.rng.random(out=t)  # U in [0, 1)
                with np.errstate(divide="ignore"):  # U == 0 (p = 2^-53) gives +inf cost: never chosen
                    np.log(noise, out=noise)
                    np.negative(noise, out=noise)
                    np.log(noise, out=noise)
                c += noise
        return cost, drawn

    def greedy_fast(self, k: int, coef: Coef32) -> np.ndarray:
        """The ``k`` tasks of smallest float64 cost, ties to the smaller index, best first: one float32 pass
        whose filter lets through every task that can still enter the running top-k (see the module
        docstring); bit-identical to ``smallest_k`` over the float64 costs. With ``tuning.THREADS`` > 1 and at
        least ``tuning.PARALLEL_MIN`` tasks the pass is split into ``THREADS`` contiguous parts run side by
        side (numpy releases the GIL in its loops); the parts' top-k are merged exactly, so the result does
        not depend on the split."""
        n = self.size
        threads = tuning.THREADS
        parts = threads if n >= tuning.PARALLEL_MIN and threads > 1 else 1
        if parts == 1:
            idx, key = self._greedy_part(0, n, k, coef, 0, tuning.CHUNK)
        else:  # larger chunks: fewer calls, so less contention for the GIL between the calls
            chunk = 2 * tuning.CHUNK
            step = -(-n // (parts * chunk)) * chunk
            bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
            futures = [
                _pool().submit(self._greedy_part, lo, hi, k, coef, part, chunk)
                for part, (lo, hi) in enumerate(bounds[1:], start=1)
            ]
            found = [self._greedy_part(*bounds[0], k, coef, 0, chunk)] + [f.result() for f in futures]
            idx, key = smallest_pairs(np.concatenate([i for i, _ in found]), np.concatenate([c for _, c in found]), k)
        return idx[np.lexsort((idx, key))]

    def _greedy_part(
        self, lo: int, hi: int, k: int, coef: Coef32, part: int, chunk: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The (up to) ``k`` best (index, float64 cost) pairs among tasks ``lo:hi``, in no particular order."""
        cost, tmp = self.scratch(part, chunk)
        best = RunningBest(k, self.cost64)
        margin = tuning.COST32_MARGIN
        # A short first chunk: partitioning it for a first threshold is cheap, and the next chunk tightens it.
        first = min(chunk, 64 * k)
        threshold, limit = np.inf, np.float32(np.inf)
        for start in (lo, *range(lo + first, hi, chunk)):
            stop = min(start + (first if start == lo else chunk), hi)
            c = cost[: stop - start]
            self.cost32(start, stop, c, tmp[: stop - start], coef)
            if best.full:
                if best.threshold != threshold:
                    threshold = best.threshold
                    limit = round_up32(threshold + margin)
                cand = np.flatnonzero(c <= limit)
            elif c.size >= k:  # the chunk alone holds k tasks within its k-th smallest float32 cost
                kth = float(np.partition(c, k - 1)[k - 1])
                cand = np.flatnonzero(c <= round_up32(kth + 2.0 * margin))
            else:
                cand = np.arange(c.size)
            if cand.size:
                cand += start
                best.offer(cand)
        return best.result()

    def scratch(self, part: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Two float32 chunk buffers for the pass run by ``part`` (kept between calls: no page faults)."""
        width = min(chunk, self.size)
        bufs = self._buffers.get(part)
        if bufs is None or bufs[0].size != width:
            bufs = self._buffers[part] = (np.empty(width, dtype=np.float32), np.empty(width, dtype=np.float32))
        return bufs


def _pool() -> ThreadPoolExecutor:
    """The worker threads of the parallel pass (created lazily, again after a fork)."""
    global _POOL
    pid = os.getpid()
    if _POOL is None or _POOL[0] != pid:
        workers = max(tuning.THREADS - 1, 1)
        _POOL = (pid, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flexkit-pass"))
    return _POOL[1]
