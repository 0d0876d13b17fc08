"""``difficulty_based``'s sampling for ``tau > 0``: exact draws without replacement ∝ ``exp(−cost/τ)``.

Sequential sampling without replacement from softmax(score/τ), in up to three stages, each continuing from the
tasks the previous one picked (each draw is exact whichever stage makes it):

1. rejection from uniform proposals, accepting task ``i`` with probability ``exp(−cost_i/τ)`` (cost ≥ 0):
   O(k / acceptance) float64 work and no pass over N at all. With tau = 1 the acceptance is at least e^-1
   (cost ≤ 1), so this stage finishes the batch all but surely, unless the batch is over a quarter of N (then
   stage 2 runs instead);
2. when that needs too many proposals: one float32 pass (:mod:`._costs`) builds an envelope
   ``w_i = exp(−min((cost_i − c_min)/τ, 80))`` with block sums, proposals are drawn from it and accepted with
   the exact float64 ratio (the float32 error is covered by the factor ``exp(margin/τ)``);
3. when τ is so small that even that stalls (or below :data:`~.tuning.COST32_MARGIN`, where the float32
   envelope is too loose to try): the Gumbel top-k restricted to the tasks within ``τ·(ln N + 45)`` of the
   r-th smallest cost (float64 Gumbel noise for those only; a task outside the window would be drawn with
   probability below e^-40).

When the float32 pass cannot be trusted, stages 2–3 are replaced by the float64 pass with Gumbel noise over all
tasks. The random stream therefore differs from a plain "Gumbel noise for every task" implementation, while the
distribution is the same; every draw is a deterministic function of the saved state, so resuming is exact. A
batch comes in drawing order, which is the order of the Gumbel top-k: the same distribution including the order.
"""

from __future__ import annotations

import math

import numpy as np

from flexkit.selectors.difficulty_based import tuning
from flexkit.selectors.difficulty_based._costs import Coef32, CostEngine
from flexkit.selectors.difficulty_based._topk import RunningBest, round_up32, smallest_k
from flexkit.selectors.difficulty_based.tuning import U32


class SoftmaxSampler:
    """The ``tau > 0`` sampler (its three stages; see the module docstring): costs from ``costs``, temperature
    ``tau``, randomness from ``rng`` (the selector's generator)."""

    #: Proposals per requested task the rejection stage may spend before the envelope stage.
    rejection_budget: int = 16
    #: Proposals per remaining task the envelope stage may spend before the Gumbel window.
    envelope_budget: int = 64

    def __init__(self, costs: CostEngine, *, tau: float, rng: np.random.Generator) -> None:
        self.costs = costs
        self.size = costs.size
        self.tau = tau
        self.rng = rng

    def sample(self, k: int) -> np.ndarray:
        """``k`` tasks drawn one by one without replacement with probability ∝ exp(−cost/τ), in drawing
        order: the rejection, envelope and Gumbel-window stages of the module docstring."""
        n = self.size
        tau = self.tau
        chosen = np.empty(0, dtype=np.int64)
        if 4 * k <= n:
            chosen = self._sample_rejection(k, tau)
        if chosen.size == k:
            return chosen
        coef = self.costs.fast_coefficients()
        if coef is None:  # the float64 pass with Gumbel noise for every task
            cost = self.costs.exact_costs(with_noise=True, do_sample=False)[0]
            cost[chosen] = np.inf
            return np.concatenate([chosen, smallest_k(cost, k - chosen.size)])
        if tuning.COST32_MARGIN / tau <= tuning.ENVELOPE_MAX_SLACK:  # else the float32 envelope is too loose
            chosen = np.concatenate([chosen, self._sample_envelope(k - chosen.size, chosen, coef, tau)])
            if chosen.size == k:
                return chosen
        return np.concatenate([chosen, self._sample_gumbel_window(k - chosen.size, chosen, coef, tau)])

    def _sample_rejection(self, k: int, tau: float) -> np.ndarray:
        """Stage 1: propose tasks uniformly, accept with probability exp(−cost/τ), skip tasks already drawn.
        Returns up to ``k`` tasks (fewer when the budget runs out)."""
        n = self.size
        budget = self.rejection_budget * k + 64
        chosen = np.empty(0, dtype=np.int64)
        used, rate = 0, 0.5
        while chosen.size < k:
            need = k - chosen.size
            size = min(int(need / rate) + 16, budget - used)
            if size <= 0:
                break
            idx = self.rng.integers(0, n, size=size)
            with np.errstate(over="ignore"):  # cost/τ = inf for a tiny τ: weight 0
                accept = self.rng.random(size) < np.exp(-(self.costs.cost64(idx) / tau))
            used += size
            hits = idx[accept]
            rate = max(hits.size, 1) / size
            chosen = np.concatenate([chosen, _new_in_order(hits, chosen)[:need]])
            if k - chosen.size > rate * (budget - used):  # would not finish within the budget: stop early
                break
        return chosen

    def _sample_envelope(self, r: int, chosen: np.ndarray, coef: Coef32, tau: float) -> np.ndarray:
        """Stage 2: up to ``r`` more tasks, not in ``chosen``, by rejection from the float32 envelope
        ``w = exp(−min((cost32 − c_min)/τ, 80))`` (block sums to draw from it), accepting with the exact
        ratio ``exp(−(cost64 − c_min)/τ) / (E·w)`` where ``E`` covers the float32 error."""
        n, bw = self.size, tuning.ENVELOPE_BLOCK
        nb = -(-n // bw)
        w = np.zeros(nb * bw, dtype=np.float32)  # padding tasks keep weight 0
        self.costs.cost32_all(w[:n], coef)
        w[chosen] = np.inf
        c_min = w[:n].min()  # over the tasks not drawn yet
        w[chosen] = c_min  # finite for the arithmetic below; their weight is set to 0 after it
        scale, clamp = np.float32(-1.0 / tau), np.float32(-tuning.ENVELOPE_CLAMP)
        chunk = tuning.CHUNK
        for start in range(0, n, chunk):
            part = w[start : min(start + chunk, n)]
            part -= c_min
            part *= scale
            np.maximum(part, clamp, out=part)
            np.exp(part, out=part)
        w[chosen] = 0.0
        blocks = w.reshape(nb, bw)
        # Block sums inflated so that each covers the float64 running sum of its weights: then a task is
        # proposed with probability w_i / total exactly (a draw past a block's last weight is rejected).
        inflate = 1.0 + 2.0 * bw * U32
        sums = np.einsum("ij->i", blocks).astype(np.float64) * inflate
        bound = math.exp(tuning.COST32_MARGIN / tau + 1024 * U32)  # E ≥ exact weight / float32 weight
        c_ref = float(c_min)
        budget = self.envelope_budget * r + 256
        got = np.empty(0, dtype=np.int64)
        used, rate = 0, 0.5
        cum = np.cumsum(sums)
        while got.size < r and cum[-1] > 0.0:
            need = r - got.size
            size = min(int(need / rate) + 16, budget - used)
            if size <= 0:
                break
            u = self.rng.random(size) * cum[-1]
            blk = np.minimum(np.searchsorted(cum, u, side="right"), nb - 1)
            res = u - np.where(blk > 0, cum[blk - 1], 0.0)
            rows = np.cumsum(blocks[blk].astype(np.float64), axis=1)
            col = np.count_nonzero(rows <= res[:, None], axis=1)  # first weight whose running sum > res
            inside = col < bw
            idx = np.minimum(blk * bw + np.minimum(col, bw - 1), n - 1)
            exact = np.exp(-((self.costs.cost64(idx) - c_ref) / tau))
            accept = inside & (self.rng.random(size) * bound * w[idx] < exact)
            used += size
            hits = idx[accept]
            rate = max(hits.size, 1) / size
            new = _new_in_order(hits, got)[:need]
            if new.size:
                got = np.concatenate([got, new])
                w[new] = 0.0
                touched = np.unique(new // bw)
                sums[touched] = np.einsum("ij->i", blocks[touched]).astype(np.float64) * inflate
                cum = np.cumsum(sums)
            if r - got.size > rate * (budget - used):
                break
        return got

    def _sample_gumbel_window(self, r: int, chosen: np.ndarray, coef: Coef32, tau: float) -> np.ndarray:
        """Stage 3: the remaining ``r`` tasks (not in ``chosen``) as the Gumbel top-r over the tasks within
        ``τ·(ln N + 45)`` (plus the float32 margins) of the r-th smallest float32 cost, in drawing order."""
        n = self.size
        chunk = tuning.CHUNK
        cost, tmp = self.costs.scratch(0, chunk)
        window = (math.log(n) + tuning.GUMBEL_WINDOW) * tau
        rth = float(self._rth_smallest32(r, chosen, coef, cost, tmp))
        limit = round_up32(rth + 2.0 * tuning.COST32_MARGIN + window)

        def key_of(cand: np.ndarray) -> np.ndarray:  # cost/τ − Gumbel: the top-r of score/τ + Gumbel
            with np.errstate(over="ignore"):  # cost/τ beyond float64 for a tiny τ: inf, drawn last
                return self.costs.cost64(cand) / tau - self.rng.gumbel(size=cand.size)

        best = RunningBest(r, key_of)
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            c = cost[: stop - start]
            self.costs.cost32(start, stop, c, tmp[: stop - start], coef)
            cand = np.flatnonzero(c <= limit)
            if cand.size and chosen.size:
                cand = cand[~np.isin(cand + start, chosen)]
            if cand.size:
                cand += start
                best.offer(cand)
        idx, key = best.result()
        return idx[np.lexsort((idx, key))]

    def _rth_smallest32(
        self, r: int, chosen: np.ndarray, coef: Coef32, cost: np.ndarray, tmp: np.ndarray
    ) -> np.float32:
        """The ``r``-th smallest float32 cost over the tasks not in ``chosen`` (chunk by chunk, keeping the ``r``
        smallest so far: no N-sized array)."""
        n, chunk = self.size, cost.size
        best = np.empty(0, dtype=np.float32)
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            c = cost[: stop - start]
            self.costs.cost32(start, stop, c, tmp[: stop - start], coef)
            if chosen.size:
                c[chosen[(chosen >= start) & (chosen < stop)] - start] = np.inf
            if best.size == r:
                c = c[c < best.max()]
            best = np.concatenate([best, c])
            if best.size > r:
                best = np.partition(best, r - 1)[:r]
        largest: np.float32 = best.max()
        return largest


def _new_in_order(hits: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """``hits`` without repeats (first occurrence kept, order kept) and without the tasks in ``taken``."""
    if hits.size > 1:
        _, first = np.unique(hits, return_index=True)
        if first.size < hits.size:
            hits = hits[np.sort(first)]
    if taken.size and hits.size:
        hits = hits[~np.isin(hits, taken)]
    return hits
