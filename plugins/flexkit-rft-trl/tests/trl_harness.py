"""Shared pieces of the TRL adapter's tests: a one-layer Llama built from a config and a word-level tokenizer built
in memory (nothing downloaded), JSONL tasksets with a grouping column, and ``GRPOConfig`` settings for CPU runs of
a few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from flexkit import pipeline_from_dict

WORDS = ["[PAD]", "[EOS]", "[UNK]", *(str(i) for i in range(10)), "+", "=", "what", "is"]


def tiny_model_and_tokenizer(seed: int = 0) -> tuple[Any, Any]:
    """A one-layer Llama (random weights from ``seed``) and its word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]")
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return LlamaForCausalLM(config), tokenizer


def grouped_rows(n: int, column: str, values: list[Any]) -> list[dict[str, Any]]:
    """``n`` rows ``{"prompt", column}``, the column cycling through ``values``."""
    return [{"prompt": f"what is {i % 10} + {i % 3} =", column: values[i % len(values)]} for i in range(n)]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as a JSONL taskset file."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def pipeline(tmp_path: Path, rows: list[dict[str, Any]], selector: dict[str, Any], *, batch_size: int,
             total_steps: int, extra: dict[str, Any] | None = None, name: str = "t0.jsonl") -> Any:
    """A pipeline over one JSONL taskset of ``rows`` (written once), with ``selector``."""
    if not (tmp_path / name).exists():
        write_rows(tmp_path / name, rows)
    data = {"run": {"batch_size": batch_size, "seed": 2, "total_steps": total_steps},
            "tasksets": [{"name": "t0", "path": name, "selector": selector}], **(extra or {})}
    return pipeline_from_dict(data, base_dir=tmp_path)


def grpo_args(tmp_path: Path, **overrides: Any) -> Any:
    """``GRPOConfig`` for a CPU run: 2 completions per prompt, 3 tokens each, a generation every 2 steps."""
    import trl

    settings = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4, "num_generations": 2,
                "steps_per_generation": 2, "max_completion_length": 3, "report_to": "none", "use_cpu": True,
                "save_strategy": "no", "bf16": False, "seed": 0, "dataloader_num_workers": 0, "learning_rate": 1e-3,
                "logging_steps": 1, "disable_tqdm": True, **overrides}
    return trl.GRPOConfig(**settings)


#: The quickstart's selector (examples/quickstart.toml), grouped by a column given at use.
QUICKSTART_FRONTIER = {"type": "frontier", "discount": 0.99, "retain": 1.0, "retain_above": 0.9,
                       "guard_metric": "val_accuracy/{}", "guard_margin": 0.03, "guard_raise": 0.5,
                       "guard_lower": 0.05, "guard_min": 0.5}
