"""The ``trl`` trainer's warm start: supervised steps on generated problems that teach the easy level, from their
own seeded streams, refused where there are no generated problems."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from flexkit_trl.run_config import TRLRunConfig  # noqa: E402 - after the skips
from flexkit_trl.warm_start import warm_start, warm_start_problems  # noqa: E402

TOKENIZER = Path(__file__).resolve().parents[2] / "examples" / "trl_run" / "tokenizer"
MODEL = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 32}


def _model_and_tokenizer() -> tuple[object, object]:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    settings = {k: v for k, v in MODEL.items() if k != "model_type"}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, **settings))
    return model, tokenizer


def _answer_loss(model: object, tokenizer: object, config: TRLRunConfig) -> float:
    from flexkit_trl.warm_start import _batch

    pairs = warm_start_problems(config, np.random.default_rng(99), 128)
    ids, mask, labels = _batch(tokenizer, pairs)
    with torch.no_grad():
        return float(model(input_ids=ids, attention_mask=mask, labels=labels).loss)  # type: ignore[operator]


def test_the_warm_start_teaches_the_answers_and_is_the_same_every_time() -> None:
    config = TRLRunConfig(model="tok", model_config=MODEL, rows="arithmetic", warmup_steps=40,
                          warmup_batch_size=32, warmup_level_weights=(1.0,))
    model, tokenizer = _model_and_tokenizer()
    before = _answer_loss(model, tokenizer, config)
    state = torch.random.get_rng_state()
    loss = warm_start(model, tokenizer, config)
    assert torch.equal(torch.random.get_rng_state(), state)  # torch's global stream is left as it was
    after = _answer_loss(model, tokenizer, config)
    assert after < 0.6 * before and np.isfinite(loss)
    again, _ = _model_and_tokenizer()
    warm_start(again, tokenizer, config)
    for a, b in zip(model.parameters(), again.parameters(), strict=True):  # type: ignore[attr-defined]
        assert torch.equal(a, b)


def test_the_warm_start_draws_levels_by_their_weights() -> None:
    config = TRLRunConfig(model="tok", rows="arithmetic", warmup_level_weights=(0.75, 0.25))
    pairs = warm_start_problems(config, np.random.default_rng(0), 4000)
    digits = np.array([len(prompt.split("+")[0].split()) for prompt, _ in pairs])
    assert abs((digits == 1).mean() - 0.75) < 0.03 and set(digits.tolist()) == {1, 2}
    for prompt, answer in pairs[:50]:
        a, b = (int("".join(part.split())) for part in prompt.removesuffix("=").split("+"))
        assert "".join(answer.split()) == str(a + b)


def test_a_warm_start_without_generated_problems_is_refused() -> None:
    with pytest.raises(ValueError, match='warmup_steps needs rows = "arithmetic"'):
        TRLRunConfig(model="tok", rows="columns", warmup_steps=10)
    with pytest.raises(ValueError, match="warmup_level_weights must be finite"):
        TRLRunConfig(model="tok", rows="arithmetic", warmup_level_weights=(0.0, 0.0))
    assert np.isnan(warm_start(None, None, TRLRunConfig(model="tok", rows="arithmetic")))  # 0 steps: nothing


def test_reversed_digits_write_every_number_least_significant_first() -> None:
    from flexkit_trl.run_rows import arithmetic_prompt, trl_input

    assert arithmetic_prompt(47, 5, "add") == ("4 7 + 5 =", "5 2")
    assert arithmetic_prompt(47, 5, "add", reversed_digits=True) == ("7 4 + 5 =", "2 5")
    config = TRLRunConfig(model="tok", rows="arithmetic", reversed_digits=True, warmup_level_weights=(0.0, 1.0))
    row = trl_input({"a": 120, "b": 3, "level": 3}, config, where="row 0")
    assert (row["prompt"], row["answer"]) == ("0 2 1 + 3 =", "3 2 1")
    prompt, answer = warm_start_problems(config, np.random.default_rng(0), 1)[0]  # the warm start writes the same
    a, b = ("".join(part.split())[::-1] for part in prompt.removesuffix("=").split("+"))
    assert "".join(answer.split())[::-1] == str(int(a) + int(b))
