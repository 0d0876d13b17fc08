"""Loss weights: conversions, combining with existing weights, and the weighted policy loss under autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flexkit.errors import SampleError
from flexkit.sample import Keep, Mix, Weights
from flexkit.sample._weights import (
    AGGREGATIONS,
    aggregate,
    combine,
    keep_mask,
    keep_to_sample_weights,
    policy_loss,
    to_token_weights,
)

B, T = 6, 5


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, 3:] = 0
    mask[4, 1:] = 0
    return {
        "old_log_probs": -torch.rand(B, T, generator=g) * 2,
        "log_probs": -torch.rand(B, T, generator=g) * 2,
        "advantages": torch.randn(B, T, generator=g),
        "response_mask": mask,
    }


def _grad(weights: torch.Tensor | None, aggregation: str, seed: int = 0, **over: torch.Tensor) -> torch.Tensor:
    data = {**_inputs(seed), **over}
    lp = data["log_probs"].clone().requires_grad_(True)
    loss = policy_loss(lp, data["old_log_probs"], data["advantages"], data["response_mask"], weights,
                       aggregation=aggregation, clip_ratio=0.2, clip_ratio_high=0.28)
    loss.backward()
    assert lp.grad is not None
    return lp.grad


# -- conversions -------------------------------------------------------------------------------------------


def test_keep_to_sample_and_token_weights() -> None:
    assert keep_to_sample_weights(Keep([0, 3]), 4).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert keep_to_sample_weights(np.array([], dtype=np.int64), 2).tolist() == [0.0, 0.0]
    with pytest.raises(SampleError, match="keep index 4 is out of range for a batch of 4"):
        keep_to_sample_weights([4], 4)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert to_token_weights(Keep([1]), mask).tolist() == [[0, 0, 0], [1, 0, 0]]
    assert to_token_weights(Weights(torch.tensor([2.0, 0.5])), mask).tolist() == [[2, 2, 0], [0.5, 0, 0]]
    tok = Weights(torch.full((2, 3), 3.0))
    assert to_token_weights(tok, mask).tolist() == [[3, 3, 0], [3, 0, 0]]
    with pytest.raises(SampleError, match="do not fit"):
        to_token_weights(Weights(torch.ones(3)), mask)
    with pytest.raises(SampleError, match="Mix"):
        to_token_weights(Mix({0: 1.0}), mask)


def test_combine_multiplies_never_overwrites() -> None:
    existing = torch.tensor([[0.5, 2.0], [1.0, 1.0]])
    before = existing.clone()
    new = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert combine(existing, new).tolist() == [[0.5, 2.0], [0.0, 0.0]]
    assert torch.equal(existing, before)
    assert combine(None, new) is new
    assert combine(torch.tensor([2.0, 3.0]), new).tolist() == [[2, 2], [0, 0]]
    with pytest.raises(SampleError, match="do not match"):
        combine(torch.ones(3, 2), new)


# -- the policy loss ---------------------------------------------------------------------------------------


def test_policy_loss_matches_ppo_formula_with_unit_weights() -> None:
    d = _inputs()
    ratio = torch.exp(d["log_probs"] - d["old_log_probs"])
    a = d["advantages"]
    per_token = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.28))
    m = d["response_mask"].float()
    expected = (per_token * m).sum() / m.sum()
    for agg in AGGREGATIONS:
        got = policy_loss(d["log_probs"], d["old_log_probs"], a, d["response_mask"], clip_ratio_high=0.28,
                          aggregation=agg)
        torch.testing.assert_close(got, expected)


def test_aggregations_denominators() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])
    w = torch.tensor([0.0, 1.0])
    torch.testing.assert_close(aggregate(loss, mask, w, aggregation="token-mean"), torch.tensor(9.0 / 5))
    torch.testing.assert_close(aggregate(loss, mask, w, aggregation="kept-token-mean"), torch.tensor(9.0 / 2))
    assert aggregate(loss, mask, torch.zeros(2), aggregation="kept-token-mean").item() == 0.0
    assert keep_mask(w, mask).tolist() == [[0, 0, 0], [1, 1, 0]]
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(loss, mask, aggregation="seq-mean")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_dropped_samples_get_exactly_zero_gradient(aggregation: str) -> None:
    keep = Keep([0, 2, 3, 5])
    weights = to_token_weights(keep, _inputs()["response_mask"])
    # a dropped row with absurd log-probs must not leak inf/NaN into anything
    wild = _inputs()["log_probs"].clone()
    wild[1] = 1e4
    grad = _grad(weights, aggregation, log_probs=wild)
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[[1, 4]], torch.zeros(2, T))
    assert (grad[[0, 2, 3, 5]] != 0).any()
    # kept rows see the same gradient whatever the dropped rows hold
    torch.testing.assert_close(grad[[0, 2, 3, 5]], _grad(weights, aggregation)[[0, 2, 3, 5]], rtol=0, atol=0)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("w", [0.5, 4.0, 0.3, 1.7])
def test_reweighted_sample_gradient_scales_by_w(aggregation: str, w: float) -> None:
    base = torch.ones(B)
    scaled = base.clone()
    scaled[2] = w
    g1 = _grad(to_token_weights(Weights(base), _inputs()["response_mask"]), aggregation)
    gw = _grad(to_token_weights(Weights(scaled), _inputs()["response_mask"]), aggregation)
    if w in (0.5, 4.0):  # powers of two scale exactly
        assert torch.equal(gw[2], g1[2] * w)
    else:
        torch.testing.assert_close(gw[2], g1[2] * w, rtol=1e-6, atol=0)
    others = [i for i in range(B) if i != 2]
    assert torch.equal(gw[others], g1[others])  # same denominator: other samples unchanged


def test_kept_token_mean_keeps_the_step_size() -> None:
    """Dropping half the batch halves a kept sample's gradient under token-mean, not under kept-token-mean."""
    mask = torch.ones(B, T, dtype=torch.int64)
    full = to_token_weights(Keep(range(B)), mask)
    half = to_token_weights(Keep([0, 1, 2]), mask)
    for agg, factor in (("token-mean", 1.0), ("kept-token-mean", 2.0)):
        g_full = _grad(full, agg, response_mask=mask)
        g_half = _grad(half, agg, response_mask=mask)
        torch.testing.assert_close(g_half[0], g_full[0] * factor)


def test_policy_loss_argument_checks() -> None:
    d = _inputs()
    with pytest.raises(SampleError, match="advantages has shape"):
        policy_loss(d["log_probs"], d["old_log_probs"], d["advantages"][:, :2], d["response_mask"])
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        policy_loss(d["log_probs"], d["old_log_probs"], d["advantages"], d["response_mask"], clip_ratio_c=0.5)
    dual = policy_loss(d["log_probs"], d["old_log_probs"], d["advantages"], d["response_mask"], clip_ratio_c=3.0)
    assert torch.isfinite(dual)
