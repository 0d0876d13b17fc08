"""A tiny decoder-only transformer (pre-norm, learned positions) and sampling from it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from flexkit import FlexkitError


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """``x`` (B, T, d); with a ``cache``, ``x`` continues the cached sequence and the cache grows."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        causal = True
        if cache is not None:
            if cache.k is not None and cache.v is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
                causal = t > 1
            cache.k, cache.v = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class KVCache:
    """Keys and values of one block for the tokens seen so far (incremental decoding)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def repeat_interleave(self, repeats: int) -> None:
        """Repeat every sequence ``repeats`` times (one prompt, several sampled continuations)."""
        if self.k is not None and self.v is not None:
            self.k = self.k.repeat_interleave(repeats, dim=0)
            self.v = self.v.repeat_interleave(repeats, dim=0)


class TinyTransformer(nn.Module):
    """A GPT-style language model small enough to train with RL on a CPU in minutes."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4,
                 d_ff: int = 256) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.max_len = max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        for name, p in self.named_parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02 if "proj" not in name else 0.02 / math.sqrt(2 * n_layers))
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens: torch.Tensor, caches: list[KVCache] | None = None, start: int = 0) -> torch.Tensor:
        """Logits (B, T, vocab) for tokens (B, T) at positions ``start ..``; ``caches`` (one per block) make
        the call continue earlier ones."""
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos.weight[start:start + t]
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        logits: torch.Tensor = self.head(self.ln(x))
        return logits


def answer_log_probs(model: TinyTransformer, sequences: torch.Tensor, answer_len: int,
                     allowed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities and entropies (B, answer_len) of the last ``answer_len`` tokens, over the
    first ``allowed`` token ids (all when ``None``), as :func:`generate` samples them."""
    logits = model(sequences[:, :-1])[:, -answer_len:]
    if allowed is not None:
        logits = logits[..., :allowed]
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    targets = sequences[:, -answer_len:]
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@torch.no_grad()
def generate(model: TinyTransformer, prompts: torch.Tensor, answer_len: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None, allowed: int | None = None,
             samples: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Complete each of ``prompts`` (B, P) ``samples`` times with ``answer_len`` tokens: sampled, or greedy when
    ``temperature == 0``. The prompts are encoded once and their key/value cache shared by their samples.

    Only the first ``allowed`` token ids can be produced (the digits). Returns the answers (B·samples,
    answer_len), grouped by prompt, and their log-probabilities at temperature 1.
    """
    caches = [KVCache() for _ in model.blocks]
    logits = model(prompts, caches)[:, -1].float().repeat_interleave(samples, dim=0)
    for cache in caches:
        cache.repeat_interleave(samples)
    position = prompts.shape[1]
    out: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    for i in range(answer_len):
        if i:
            logits = model(out[-1][:, None], caches, start=position)[:, -1].float()
            position += 1
        if allowed is not None:
            logits = logits[:, :allowed]
        if not bool(torch.isfinite(logits).all()):
            raise FlexkitError("toyrl: the policy's logits are not finite (its weights overflowed): the policy "
                               "diverged; lower learning_rate (or warmup_learning_rate)")
        logp_all = torch.log_softmax(logits, dim=-1)
        if temperature == 0:
            token = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        out.append(token)
        logps.append(logp_all.gather(-1, token[:, None]).squeeze(-1))
    return torch.stack(out, dim=1), torch.stack(logps, dim=1)
