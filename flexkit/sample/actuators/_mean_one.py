"""Mean-1 weights accumulated in float64, shared by the reweighters whose weights must average exactly 1.

A float32 normalisation of 65,536 weights can leave their mean ~1e-5 away from 1; the normalising sum here runs
in float64, so the mean is 1 to ~1e-7 (the rounding of each weight to the output dtype) at any batch size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexkit.errors import SampleError

if TYPE_CHECKING:
    import torch


def mean_one(raw: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """``raw`` (≥ 0) scaled to mean 1 and cast to ``dtype``: over samples for (B,), over the response tokens of
    ``mask`` for (B, T) (other positions get 0). The sum is taken in float64. All-zero ``raw`` stays all zero."""
    import torch

    raw = raw.to(torch.float64)
    if raw.ndim == 2 and mask is not None:
        keep = mask.to(device=raw.device, dtype=torch.bool)
        raw = torch.where(keep, raw, torch.zeros((), dtype=torch.float64, device=raw.device))
        count = keep.sum().to(torch.float64)
    else:
        count = torch.tensor(float(raw.numel()), dtype=torch.float64, device=raw.device)
    if raw.numel() and not bool(torch.isfinite(raw).all()):
        raise SampleError("raw weights must be finite before they are scaled to mean 1, got NaN or infinite values "
                          "(scores or a temperature so extreme that they overflow)")
    total = raw.sum()
    if not bool(total > 0):
        return torch.zeros_like(raw, dtype=dtype)
    return (raw * (count / total)).to(dtype)
