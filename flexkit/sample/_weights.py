"""Loss weights: keep-lists and weights become per-token weights; a weighted PPO policy loss.

How an action reaches the loss (as in DataFlex-RL's actuators): a keep-list becomes a 0/1 weight per sample,
broadcast to the response tokens (× ``response_mask``); reweights are per sample or per token. Unlike
DataFlex-RL, which overwrites verl's ``rollout_is_weights``, flexkit **multiplies** the new weights into any
weights already in the batch (e.g. importance weights a trainer computed): :func:`combine`.

The policy loss (:func:`policy_loss`) is PPO's clipped surrogate (Schulman et al. 2017, 1707.06347) with
per-token weights and two aggregations:

- ``"token-mean"``: ``Σ loss·w / Σ response_mask`` — verl's ``token-mean``. Dropped tokens still count in the
  denominator, so keeping a fraction ``f`` of the tokens scales the effective learning rate by about ``f``;
- ``"kept-token-mean"``: ``Σ loss·w / Σ response_mask·[w > 0]`` — only kept tokens count, so the step size
  does not shrink with the kept fraction (as if dropped samples had never been generated, which is what
  DAPO-style dynamic sampling (2503.14476) does by refilling the batch).

KL and entropy terms
--------------------
Aggregate them over the **same tokens with the same denominator** as the policy loss, weighted by the
**keep mask** (:func:`keep_mask`: 1 where the weight is positive) but **not** by the reweights:

* a dropped sample is out of the update, as if it had not been generated; regularising the policy on its
  tokens would still move the parameters from data the stage decided not to learn from (and with
  ``kept-token-mean`` would mix two denominators);
* reweights express how much a sample's *advantage signal* should count. KL and entropy are regularisers of
  the policy as a whole; scaling them by, e.g., a softmax over difficulty would loosen the KL anchor exactly on
  the samples the weighting de-emphasises and tighten it on the others — a side effect nobody asked for.

So: ``kl = aggregate(kl_mat, response_mask, keep_mask(w, response_mask), aggregation=agg)``, likewise for the
entropy bonus, with ``w`` the token weights given to :func:`policy_loss`. A trainer's importance weights
(``rollout_is_weights`` before the stage) follow the trainer's own convention.

Torch is imported inside the functions, so importing this module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexkit.errors import ConfigError, SampleError

if TYPE_CHECKING:
    import torch

#: The loss aggregations :func:`policy_loss` and :func:`aggregate` accept.
AGGREGATIONS: tuple[str, ...] = ("token-mean", "kept-token-mean")

#: ``log(ratio)`` is clamped to ±this before ``exp`` (as verl does), so a stale token cannot overflow.
LOG_RATIO_CLAMP = 20.0


def keep_to_sample_weights(
    keep: Any, batch_size: int, *, dtype: Any = None, device: Any = None
) -> torch.Tensor:
    """A (B,) float tensor: 1 at the kept indices (a :class:`~flexkit.Keep` or an array of
    indices), 0 elsewhere. Indices outside ``0 .. batch_size-1`` raise :class:`SampleError`."""
    import torch

    from flexkit.sample._actuator import Keep

    indices = np.asarray(keep.indices if isinstance(keep, Keep) else keep)
    if indices.size and (indices.dtype == bool or not np.issubdtype(indices.dtype, np.integer)):
        raise SampleError(f"keep indices must be integers, got {indices.dtype}")
    indices = indices.astype(np.int64, copy=False).reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= batch_size):
        bad = indices[(indices < 0) | (indices >= batch_size)][0]
        raise SampleError(f"keep index {int(bad)} is out of range for a batch of {batch_size} samples")
    out = torch.zeros(batch_size, dtype=dtype or torch.float32, device=device)
    if indices.size:
        out[torch.from_numpy(indices).to(out.device)] = 1.0
    return out


def _float_dtype(t: torch.Tensor) -> Any:
    import torch

    return t.dtype if t.is_floating_point() else torch.float32


def to_token_weights(action: Any, response_mask: torch.Tensor) -> torch.Tensor:
    """A (B, T) float tensor of per-token weights for a select or reweight action, × ``response_mask``.

    :class:`~flexkit.Keep` → 0/1 per sample, broadcast; ``Weights`` (B,) → broadcast;
    ``Weights`` (B, T) → as is. Weights are detached. Mix actions carry no loss weights (``SampleError``).
    """
    from flexkit.sample._actuator import Keep, Weights

    if response_mask.ndim != 2:
        raise SampleError(f"response_mask must be (B, T), got shape {tuple(response_mask.shape)}")
    b = response_mask.shape[0]
    if isinstance(action, Keep):
        per_sample = keep_to_sample_weights(action, b, device=response_mask.device)
        return per_sample[:, None] * response_mask.to(per_sample.dtype)
    if isinstance(action, Weights):
        w = action.weights.detach().to(response_mask.device)
        mask = response_mask.to(_float_dtype(w))
        if w.ndim == 1 and w.shape[0] == b:
            return w[:, None] * mask
        if tuple(w.shape) == tuple(response_mask.shape):
            return w * mask
        raise SampleError(f"weights of shape {tuple(w.shape)} do not fit a batch with response_mask "
                          f"{tuple(response_mask.shape)}: expected ({b},) or {tuple(response_mask.shape)}")
    raise SampleError(f"only Keep and Weights actions become loss weights, got {type(action).__name__}")


def combine(existing: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """``existing × new`` (a new tensor; ``existing`` is never overwritten), or ``new`` when there is none.

    ``existing`` may be (B,) or (B, T); the result has ``new``'s shape and ``existing``'s floating dtype.
    """
    import torch

    if existing is None:
        return new
    e = existing.detach()
    if not (e.is_floating_point() or e.dtype == torch.bool):
        raise SampleError(f"existing weights (the batch's weights field) must be floats, got {e.dtype}: is "
                          "[sample] weights_key the name of a weights field?")
    if e.numel() and not bool((torch.isfinite(e) & (e >= 0)).all()):
        raise SampleError("existing weights (the batch's weights field) must be finite and >= 0, got NaN, infinite "
                          "or negative values")
    if e.ndim == 1 and new.ndim == 2 and e.shape[0] == new.shape[0]:
        e = e[:, None]
    elif tuple(e.shape) != tuple(new.shape):
        raise SampleError(f"existing weights of shape {tuple(existing.shape)} do not match the new weights "
                          f"{tuple(new.shape)}")
    dtype = _float_dtype(e)
    return e.to(dtype) * new.to(device=e.device, dtype=dtype)


def keep_mask(weights: torch.Tensor | None, response_mask: torch.Tensor) -> torch.Tensor:
    """``response_mask × [weights > 0]`` as float: the tokens that count (for KL / entropy terms)."""
    mask = response_mask.to(_float_dtype(weights) if weights is not None else response_mask.dtype)
    if not mask.is_floating_point():
        import torch

        mask = mask.to(torch.float32)
    if weights is None:
        return mask
    w = weights.detach()
    if w.ndim == 1:
        w = w[:, None]
    return mask * (w > 0).to(mask.dtype)


def aggregate(
    loss_mat: torch.Tensor,
    response_mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    aggregation: str = "token-mean",
) -> torch.Tensor:
    """A scalar: ``Σ loss_mat·weights·response_mask / D`` with ``D = Σ response_mask`` (``"token-mean"``) or
    ``D = Σ response_mask·[weights > 0]`` (``"kept-token-mean"``); ``D`` is at least 1, so a batch without
    (kept) tokens gives 0. ``weights`` (B,) or (B, T), default all ones; they are treated as constants."""
    import torch

    if aggregation not in AGGREGATIONS:
        raise ConfigError(f"unknown aggregation {aggregation!r}; one of: {', '.join(AGGREGATIONS)}")
    mask = response_mask.to(device=loss_mat.device, dtype=loss_mat.dtype)
    if weights is None:
        w = mask
    else:
        w = weights.detach().to(device=loss_mat.device, dtype=loss_mat.dtype)
        if w.ndim == 1:
            w = w[:, None]
        w = w * mask
    active = w != 0
    # where(), not a product, so a non-finite loss on a dropped token cannot leak NaN into the sum
    zero = torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device)
    numerator = torch.where(active, loss_mat * w, zero).sum()
    kept = mask if aggregation == "token-mean" else mask * (w > 0).to(mask.dtype)
    denominator = kept.sum()
    return numerator / denominator.clamp(min=1.0)


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float | None = None,
    aggregation: str = "token-mean",
) -> torch.Tensor:
    """PPO's clipped policy-gradient loss with per-token ``weights``, aggregated to a scalar.

    Per token: ``r = exp(clamp(logπ − logπ_old, ±20))``, ``ℓ = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))``
    (``ε_low = clip_ratio``, ``ε_high = clip_ratio_high`` or ``clip_ratio``: DAPO's clip-higher); with
    ``clip_ratio_c`` (dual-clip PPO, 1912.09729, > 1) tokens with ``A < 0`` use ``min(ℓ, −A·c)``. Then
    :func:`aggregate` with ``weights`` (B,) or (B, T) (e.g. :meth:`SampleStage.token_weights`) and
    ``aggregation`` ∈ :data:`AGGREGATIONS` (see the module docstring).

    Tokens with weight 0 contribute exactly zero gradient (even when their ratio would overflow); a sample with
    weight ``w`` has its gradient scaled by ``w``. Weights are constants (detached).
    """
    import torch

    if not 0 <= clip_ratio < 1:
        raise ConfigError(f"clip_ratio must be in [0, 1), got {clip_ratio!r}")
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    if high < 0:
        raise ConfigError(f"clip_ratio_high must be >= 0, got {high!r}")
    if clip_ratio_c is not None and clip_ratio_c <= 1:
        raise ConfigError(f"clip_ratio_c must be > 1, got {clip_ratio_c!r}")
    shape = tuple(response_mask.shape)
    for name, t in (("log_probs", log_probs), ("old_log_probs", old_log_probs), ("advantages", advantages)):
        if tuple(t.shape) != shape:
            raise SampleError(f"{name} has shape {tuple(t.shape)} but response_mask has {shape}")
    mask = response_mask.to(device=log_probs.device, dtype=torch.bool)
    if weights is not None:
        w = weights.detach()
        active = mask & ((w[:, None] if w.ndim == 1 else w) != 0).to(log_probs.device)
    else:
        active = mask
    zero = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    # Inactive tokens get log-ratio 0 through where(): their gradient is exactly 0, never 0·inf = NaN.
    log_ratio = torch.where(active, log_probs - old_log_probs.detach(), zero)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    adv = torch.where(active, advantages.detach().to(log_probs.dtype), zero)
    loss_mat = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - clip_ratio, 1.0 + high))
    if clip_ratio_c is not None:
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, -adv * clip_ratio_c), loss_mat)
    return aggregate(loss_mat, response_mask, weights, aggregation=aggregation)
