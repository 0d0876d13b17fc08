"""A straightforward formulation of Trinity-RFT's ``difficulty_based`` selector, written by us as the yardstick
for ``benchmarks/run.py``: what a direct transcription of Trinity-RFT's description costs.

Every selection scores all N tasks and samples with ``torch.softmax`` + ``torch.multinomial`` (``tau > 0``) or
``torch.topk`` (``tau = 0``); every feedback decays every task's Beta(α, β) and re-interpolates its prior, an
O(N) update. flexkit's deviations that matter for the numbers are kept (``c_est`` clipped to [0, 1], no c update
when the batch's reference features agree, c = 0.5 before the first estimate), so the two compute the same
model. State is float64 like flexkit's; ``torch.multinomial`` refuses more than 2^24 categories, so this
reference only runs up to N = 2^24 for ``tau > 0``.
"""

from __future__ import annotations

import numpy as np
import torch

#: ``torch.multinomial`` accepts at most this many categories.
MULTINOMIAL_MAX = 1 << 24


class ReferenceDifficulty:
    """Beta posterior per task, updated for all N tasks at every feedback; sampling over all N tasks."""

    def __init__(
        self,
        f0: np.ndarray,
        f1: np.ndarray,
        *,
        m: int = 16,
        lamb: float = 0.2,
        rho: float = 0.2,
        target_reward: float = 1.0,
        tau: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.f0 = torch.as_tensor(np.asarray(f0, dtype=np.float64))
        self.f1 = torch.as_tensor(np.asarray(f1, dtype=np.float64))
        n = self.f0.numel()
        if tau > 0 and n > MULTINOMIAL_MAX:
            raise ValueError(f"torch.multinomial refuses more than 2^24 categories, got {n}")
        self.m, self.lamb, self.rho, self.target, self.tau = m, lamb, rho, target_reward, tau
        self.alpha = torch.ones(n, dtype=torch.float64)
        self.beta = torch.ones(n, dtype=torch.float64)
        self.c: float | None = None
        self.gen = torch.Generator().manual_seed(seed)

    def get_indices(self, k: int) -> np.ndarray:
        pred = self.alpha / (self.alpha + self.beta)
        score = -(self.target - pred).abs()
        if self.tau == 0:
            idx = torch.topk(score, k).indices
        else:
            probs = torch.softmax(score / self.tau, dim=0)
            idx = torch.multinomial(probs, k, replacement=False, generator=self.gen)
        return idx.numpy()

    def feedback(self, indices: np.ndarray, values: np.ndarray) -> None:
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        v = torch.as_tensor(np.asarray(values, dtype=np.float64))
        f0b, f1b = self.f0[idx], self.f1[idx]
        den = float(f1b.mean() - f0b.mean())
        if abs(den) >= 1e-6:
            c_est = min(max(float(v.mean() - f0b.mean()) / den, 0.0), 1.0)
            self.c = c_est if self.c is None else 0.9 * self.c + 0.1 * c_est
        c = 0.5 if self.c is None else self.c
        p_tilde = (self.f0 + c * (self.f1 - self.f0)).clamp_(0.0, 1.0)
        p_tilde[idx] = v
        s = torch.zeros_like(self.alpha)
        f = torch.zeros_like(self.alpha)
        s[idx] = v * self.m
        f[idx] = (1.0 - v) * self.m
        lamb, rho, m = self.lamb, self.rho, self.m
        self.alpha = (1 - lamb) * self.alpha + lamb + (1 - rho) * s + rho * p_tilde * m
        self.beta = (1 - lamb) * self.beta + lamb + (1 - rho) * f + rho * (1 - p_tilde) * m

    def state_bytes(self) -> int:
        return self.alpha.numel() * self.alpha.element_size() + self.beta.numel() * self.beta.element_size()
