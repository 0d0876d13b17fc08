"""A pass-rate model over the prompts themselves, for pools with no column that groups tasks by difficulty.

A pool seen about twice per task gives per-task estimates almost no evidence, and a grouping column (a level, a
source) is what lets a selector pool it. Without one, the prompt text is the only thing tasks share; this module
learns ``P(pass | prompt)`` from every feedback batch and lets :mod:`flexkit.selectors.frontier` group tasks by
it (``text_key``):

- **features**: the prompt's byte n-grams, ``n = 1 .. ngrams``, signed-hashed into ``D = 2^hash_bits`` buckets
  (Weinberger, Dasgupta, Langford, Smola & Attenberg 2009, "Feature Hashing for Large Scale Multitask
  Learning": a second hash bit gives each n-gram a sign, so collisions cancel in expectation and inner products
  stay unbiased), scaled by ``1 / sqrt(#n-grams)`` so that a long prompt's vector is not longer than a short
  one's, plus a bias feature of 1. Each prompt is read up to :data:`MAX_PROMPT_BYTES` bytes;
- **model**: Bayesian logistic regression, ``P(pass | x) = σ(wᵀx)``, with a diagonal Gaussian posterior
  ``w ~ N(m, diag(1/q))`` updated online by the Laplace approximation of Chapelle & Li 2011 ("An Empirical
  Evaluation of Thompson Sampling", Algorithm 3): for a batch of tasks ``i`` with pass rates ``y_i ∈ [0, 1]``
  (each counted as one Bernoulli observation with a fractional outcome),
  ``w* = argmin ½ Σ_j q_j (w_j − m_j)² + Σ_i [log(1 + e^{z_i}) − y_i z_i]``, ``z = Xw``, then ``m ← w*`` and
  ``q_j ← q_j + Σ_i x_ij² p_i (1 − p_i)``. ``w*`` is found by Newton's method in the batch's own coordinates:
  the Hessian ``diag(q) + Xᵀ S X`` is inverted with the Woodbury identity, a ``b × b`` solve for a chunk of
  ``b ≤`` :data:`UPDATE_CHUNK` tasks (exact, no learning rate);
- **forgetting**: before each feedback batch the evidence in the precision is discounted,
  ``q ← q₀ + γ (q − q₀)`` (``q₀`` the prior precision, ``γ = model_discount``): the posterior widens back toward
  the prior at a constant rate, as a Kalman filter's does under a random walk of the weights, so the model follows
  the policy as it learns (what was hard becomes easy) instead of averaging over the whole run;
- **prediction**: the posterior mean of the pass rate, by the probit approximation of the logistic-Gaussian
  integral (MacKay 1992), ``p̄ = σ(mᵀx / sqrt(1 + π vᵀ/8))`` with ``v = Σ_j x_j² / q_j``.

Cost: hashing a prompt of ``L`` bytes costs ``O(ngrams · L)``; scoring it ``O(its distinct buckets)``; an update
``O(b · nnz + b³)`` per chunk of ``b`` tasks. Memory: the pool's prompt bytes (one byte per byte, plus an 8-byte
offset per task), two floats per bucket, and, for pools whose hashed features fit in :data:`FEATURE_CACHE_BYTES`,
those features (8 bytes per distinct n-gram bucket per task) so that a step hashes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit.errors import StateMismatchError, TasksetError
from flexkit.selectors._estimates import load_array
from flexkit.selectors._grouping import LabelledFeatures

#: Bytes of a prompt that are hashed (its head): bounds the cost of a step whatever the prompts' lengths.
MAX_PROMPT_BYTES = 4096
#: Feedback tasks per Newton solve (a ``b × b`` system; larger feedback batches are taken in sequential chunks,
#: each one an assumed-density update on the posterior the previous left).
UPDATE_CHUNK = 256
#: Pools whose hashed features take at most this many bytes keep them (hashed once); larger ones hash on demand.
FEATURE_CACHE_BYTES = 1 << 26
#: Newton iterations at most per chunk (each with a backtracking line search; convergence takes a handful).
NEWTON_STEPS = 25
#: Tasks hashed per call when a large pool is hashed on demand (bounds the temporary arrays).
HASH_CHUNK = 1 << 15

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a bijective mix of uint64 values whose every output bit depends on every input
    bit (so the top bits make a bucket and the lowest a sign)."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


class PromptTexts:
    """The prompts of a pool as UTF-8 bytes: one flat buffer and each task's offset (``size + 1`` int64)."""

    def __init__(self, texts: Sequence[str] | np.ndarray, owner: str, key: str) -> None:
        encoded: list[bytes] = []
        for row, text in enumerate(np.asarray(texts, dtype=object).tolist()):
            if not isinstance(text, str):
                raise TasksetError(f"{owner}: text column {key!r} must hold strings, got {type(text).__name__} "
                                   f"{text!r:.40} at row {row}")
            encoded.append(text.encode("utf-8")[:MAX_PROMPT_BYTES])
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def nbytes(self) -> int:
        """Memory the prompts take."""
        return int(self.data.nbytes + self.offsets.nbytes)


class HashedFeatures:
    """Signed-hashed byte n-gram features of prompts (module docstring): for tasks ``indices``, sparse rows as
    ``(row, column, value)`` with one entry per distinct bucket of a row (collisions summed), plus the bias
    column ``D``."""

    def __init__(self, texts: PromptTexts, hash_bits: int, ngrams: int) -> None:
        self.texts = texts
        self.hash_bits = int(hash_bits)
        self.ngrams = int(ngrams)
        self.dim = (1 << self.hash_bits) + 1  # the buckets and the bias
        self._cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        lengths = np.diff(texts.offsets)
        grams = int(np.maximum(0, lengths[:, None] - np.arange(self.ngrams)[None, :]).sum()) if len(lengths) else 0
        if 8 * (grams + len(texts)) <= FEATURE_CACHE_BYTES:
            rows, cols, vals = self._hash_chunked(np.arange(len(texts), dtype=np.int64))
            starts = np.searchsorted(rows, np.arange(len(texts) + 1))
            self._cache = (starts, cols.astype(np.int32), vals.astype(np.float32))

    @property
    def cached(self) -> bool:
        """Whether the whole pool's features are kept (hashed once)."""
        return self._cache is not None

    def nbytes(self) -> int:
        """Memory the kept features take (0 when hashed on demand)."""
        return 0 if self._cache is None else int(sum(a.nbytes for a in self._cache))

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, column, value)`` of the tasks ``indices`` (row ``r`` is ``indices[r]``), rows in order."""
        indices = np.asarray(indices, dtype=np.int64)
        if self._cache is None:
            return self._hash_chunked(indices)
        starts, cols, vals = self._cache
        counts = starts[indices + 1] - starts[indices]
        rows = np.repeat(np.arange(len(indices), dtype=np.int64), counts)
        within = np.arange(len(rows), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        where = np.repeat(starts[indices], counts) + within
        return rows, cols[where].astype(np.int64), vals[where].astype(np.float64)

    def _hash_chunked(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_hash` in chunks of :data:`HASH_CHUNK` tasks (bounded temporaries)."""
        parts = [self._hash(indices[s:s + HASH_CHUNK]) for s in range(0, len(indices), HASH_CHUNK)]
        if len(parts) <= 1:
            return parts[0] if parts else self._hash(indices)
        offsets = np.arange(0, len(indices), HASH_CHUNK)
        return (np.concatenate([p[0] + o for p, o in zip(parts, offsets, strict=True)]),
                np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))

    def _hash(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        texts = self.texts
        begin, end = texts.offsets[indices], texts.offsets[indices + 1]
        lengths = end - begin
        rows_all, buckets_all, signs_all = [], [], []
        grams = np.zeros(len(indices), dtype=np.int64)
        for n in range(1, self.ngrams + 1):
            counts = np.maximum(0, lengths - n + 1)
            grams += counts
            total = int(counts.sum())
            if not total:
                continue
            rows = np.repeat(np.arange(len(indices), dtype=np.int64), counts)
            position = (np.repeat(begin, counts) + np.arange(total, dtype=np.int64)
                        - np.repeat(np.cumsum(counts) - counts, counts))
            code = np.full(total, np.uint64(n) << np.uint64(56), dtype=np.uint64)
            for k in range(n):  # n ≤ 7 bytes fit below the order's tag (bits 56..63)
                code ^= texts.data[position + k].astype(np.uint64) << np.uint64(8 * k)
            h = _mix64(code)
            rows_all.append(rows)
            buckets_all.append((h >> np.uint64(64 - self.hash_bits)).astype(np.int64))
            signs_all.append(np.where((h & np.uint64(1)) == np.uint64(1), 1.0, -1.0))
        keys: np.ndarray = np.empty(0, dtype=np.int64)
        summed: np.ndarray = np.empty(0)
        if rows_all:
            rows = np.concatenate(rows_all)
            signs = np.concatenate(signs_all) / np.sqrt(np.maximum(grams, 1))[rows]
            keys, inverse = np.unique(rows * self.dim + np.concatenate(buckets_all), return_inverse=True)
            summed = np.bincount(inverse.reshape(-1), weights=signs, minlength=len(keys))
        count = len(indices)
        every_row = np.concatenate([keys // self.dim, np.arange(count, dtype=np.int64)])
        every_col = np.concatenate([keys % self.dim, np.full(count, self.dim - 1, dtype=np.int64)])  # the bias
        every_val = np.concatenate([summed, np.ones(count)])
        order = np.argsort(every_row, kind="stable")
        return every_row[order], every_col[order], every_val[order]


def _times(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` without BLAS (einsum's own loop): the model's products are small, and a threaded BLAS on
    a busy machine makes them many times slower (measured: a 64-task update in 96 ms instead of 2 ms)."""
    out: np.ndarray = np.einsum("ij,j->i", matrix, vector)
    return out


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|
    return out


def _softplus(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.logaddexp(0.0, z)
    return out


class PromptPassModel:
    """Online Bayesian logistic regression of the pass rate on hashed prompt features (module docstring).

    Args:
        features: the pool's hashed features.
        prior_precision: ``q₀``, the precision of every weight's prior ``N(0, 1/q₀)``.
        discount: ``γ``, the share of the precision's evidence kept at each feedback batch (1: none forgotten).
    """

    def __init__(self, features: HashedFeatures, prior_precision: float, discount: float) -> None:
        self.features = features
        self.prior_precision = float(prior_precision)
        self.discount = float(discount)
        self.mean = np.zeros(features.dim)
        self.precision = np.full(features.dim, self.prior_precision)
        #: Feedback batches taken (changes whenever the posterior does: callers cache predictions by it).
        self.version = 0

    def predict(self, indices: np.ndarray) -> np.ndarray:
        """Posterior mean pass rate of each task of ``indices`` (probit approximation)."""
        return self._predict_rows(*self.features.rows(indices), len(indices))

    def predict_texts(self, texts: Sequence[str] | np.ndarray, owner: str, key: str) -> np.ndarray:
        """Posterior mean pass rate of prompts outside the pool (a validation split's ``texts``), hashed as the
        pool's are; :class:`~flexkit.errors.TasksetError` names ``owner`` and ``key`` for a text that is not a
        string."""
        hashed = HashedFeatures(PromptTexts(texts, owner, key), self.features.hash_bits, self.features.ngrams)
        every = np.arange(len(hashed.texts), dtype=np.int64)
        return self._predict_rows(*hashed.rows(every), len(every))

    def _predict_rows(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, count: int) -> np.ndarray:
        """:meth:`predict` of ``count`` prompts given their sparse feature rows."""
        z = np.bincount(rows, weights=vals * self.mean[cols], minlength=count)
        v = np.bincount(rows, weights=vals * vals / self.precision[cols], minlength=count)
        return _sigmoid(z / np.sqrt(1.0 + np.pi * v / 8.0))

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Forget once (discount the precision's evidence), then take the pass rates ``values`` of ``indices`` in
        chunks of :data:`UPDATE_CHUNK` (one Laplace update each). All or nothing: the posterior changes only once
        every chunk is done."""
        mean = self.mean.copy()
        precision = self.prior_precision + self.discount * (self.precision - self.prior_precision)
        for start in range(0, len(indices), UPDATE_CHUNK):
            self._update_chunk(mean, precision, indices[start:start + UPDATE_CHUNK],
                               values[start:start + UPDATE_CHUNK])
        self.mean, self.precision = mean, precision
        self.version += 1

    def _update_chunk(self, mean: np.ndarray, precision: np.ndarray, indices: np.ndarray, y: np.ndarray) -> None:
        """One Laplace update of ``mean`` and ``precision`` (in place) by the pass rates ``y`` of ``indices``."""
        rows, cols, vals = self.features.rows(indices)
        used, local = np.unique(cols, return_inverse=True)  # only these weights move (the others' gradient is 0)
        x = np.zeros((len(indices), len(used)))
        x[rows, local.reshape(-1)] = vals  # one entry per (row, bucket): features are summed per bucket already
        m, q = mean[used], precision[used]
        w = m.copy()

        def objective(weights: np.ndarray) -> float:
            z = _times(x, weights)
            return float(0.5 * np.sum(q * (weights - m) ** 2) + np.sum(_softplus(z) - y * z))

        current = objective(w)
        for _ in range(NEWTON_STEPS):
            p = _sigmoid(_times(x, w))
            grad = q * (w - m) + _times(x.T, p - y)
            r = np.sqrt(p * (1.0 - p))
            xr = x * r[:, None]  # R X
            inner = np.eye(len(indices)) + np.einsum("ij,kj->ik", xr / q[None, :], xr)  # I + R X Q⁻¹ Xᵀ R
            g_q = grad / q
            step = -(g_q - _times(xr.T, np.linalg.solve(inner, _times(xr, g_q))) / q)  # −H⁻¹ grad (Woodbury)
            decrease = float(-grad @ step)
            if not decrease > 1e-12:
                break
            t, trial = 1.0, current
            while t > 1e-6:  # backtracking (Armijo)
                trial = objective(w + t * step)
                if trial <= current - 0.25 * t * decrease:
                    break
                t *= 0.5
            else:
                break
            w, current = w + t * step, trial
            if t * decrease < 1e-10:
                break
        p = _sigmoid(_times(x, w))
        mean[used] = w
        precision[used] = q + _times((x * x).T, p * (1.0 - p))

    def state_dict(self) -> dict[str, Any]:
        """The posterior: each weight's mean and precision, and the number of feedback batches taken."""
        return {"mean": self.mean.copy(), "precision": self.precision.copy(), "version": self.version}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked: one mean and one positive precision per feature)."""
        mean = load_array(state, "mean", self.features.dim, np.float64)
        precision = load_array(state, "precision", self.features.dim, np.float64)
        if (precision <= 0).any():
            raise StateMismatchError("saved model precisions must be positive")
        version = state.get("version")
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
            raise StateMismatchError(f"saved model version {version!r} is not a count")
        self.mean, self.precision, self.version = mean, precision, int(version)


#: Seed of the reference sample (fixed, apart from every selector seed: a resumed selector draws the same one).
REFERENCE_SEED = 20090611


def reference_sample(size: int, count: int) -> np.ndarray:
    """``min(size, count)`` distinct task indices drawn uniformly from a fixed stream (sorted; the whole pool when
    ``size ≤ count``): the tasks whose predictions set the groups' quantile edges."""
    if size <= count:
        return np.arange(size, dtype=np.int64)
    rng = np.random.default_rng(REFERENCE_SEED)
    return np.sort(rng.choice(size, size=count, replace=False).astype(np.int64))


def text_column(features: Mapping[str, np.ndarray], key: str, size: int, owner: str) -> np.ndarray:
    """The text column ``key`` of ``features``: as labels where the mapping offers them (a taskset's
    :class:`~flexkit.tasksets._base.LazyFeatures`, which reads strings from the rows), else as given. Raises
    :class:`~flexkit.errors.TasksetError` naming ``owner`` when it is missing or of the wrong length."""
    try:
        column = np.asarray(features.labels(key) if isinstance(features, LabelledFeatures) else features[key])
    except KeyError:
        raise TasksetError(f"{owner}: text column {key!r} is missing") from None
    if column.shape != (size,):
        raise TasksetError(f"{owner}: text column {key!r} has shape {column.shape}, expected ({size},)")
    return column
