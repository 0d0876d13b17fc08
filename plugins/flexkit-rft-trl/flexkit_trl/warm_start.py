"""The ``trl`` trainer's warm start: supervised steps on generated arithmetic problems before the RL phase.

A model built from a config starts from random weights, and GRPO from random weights on arithmetic sees every
answer group all-wrong (no gradient). Real RL fine-tuning starts from a pretrained model that solves the easy part
of a task family and little of the hard part; the warm start makes that policy, as the embedded ``toyrl``
trainer's does: ``warmup_steps`` steps of AdamW (``warmup_learning_rate``) on the cross-entropy of the answer
tokens (and the end-of-sequence token) given the prompt, each on ``warmup_batch_size`` fresh problems whose levels
are drawn with ``warmup_level_weights`` (mostly easy ones, so the harder levels stay weak). The problems come
from their own seeded stream (``warmup_seed``), never from the pool, the validation or the test set. Its
floating-point results depend on the CPU's vector instructions, as any training does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from flexkit_trl.run_config import TRLRunConfig
from flexkit_trl.run_rows import arithmetic_prompt, operand_ranges

__all__ = ["WARM_START_SPAWN_KEY", "warm_start", "warm_start_problems"]

#: Spawn key of the warm start's problems (with ``warmup_seed``).
WARM_START_SPAWN_KEY = (23,)


def warm_start_problems(config: TRLRunConfig, rng: np.random.Generator, count: int) -> list[tuple[str, str]]:
    """``count`` (prompt, answer) pairs, each level drawn with ``warmup_level_weights`` (level 1, 2, ...)."""
    weights = np.asarray(config.warmup_level_weights, dtype=np.float64)
    levels = rng.choice(np.arange(1, len(weights) + 1), size=count, p=weights / weights.sum())
    pairs = []
    for level in levels.tolist():
        low, high, b_low, b_high = operand_ranges(config, level)
        a, b = int(rng.integers(low, high)), int(rng.integers(b_low, b_high))
        pairs.append(arithmetic_prompt(a, b, config.operation, reversed_digits=config.reversed_digits))
    return pairs


def _batch(tokenizer: Any, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 but on the answer and its end token)."""
    rows, targets = [], []
    for prompt, answer in pairs:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = [*tokenizer(" " + answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        targets.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    return ids, mask, labels


def warm_start(model: Any, tokenizer: Any, config: TRLRunConfig) -> float:
    """Train ``model`` in place for ``warmup_steps`` supervised steps (see the module docstring), from its own
    random streams (torch's global state is left as it was); returns the last step's loss (nan: no step)."""
    if config.warmup_steps == 0:
        return float("nan")
    rng = np.random.default_rng(np.random.SeedSequence(config.warmup_seed, spawn_key=WARM_START_SPAWN_KEY))
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warmup_learning_rate)
    loss_value = float("nan")
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.warmup_seed)
        for _ in range(config.warmup_steps):
            ids, mask, labels = _batch(tokenizer, warm_start_problems(config, rng, config.warmup_batch_size))
            loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            loss_value = float(loss.detach())
    optimizer.zero_grad(set_to_none=True)
    return loss_value
