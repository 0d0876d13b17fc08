# examples/trl/train.py
"""GRPO with TRL's GRPOTrainer on prompts a flexkit pipeline selects, on CPU in seconds.

Run from the repository root: ``python examples/trl/train.py``. The model is a one-layer Llama built from a
config and a word-level tokenizer built in memory, so nothing is downloaded; for a real run, pass a model name
(``model="Qwen/Qwen2.5-0.5B-Instruct"``) and drop ``processing_class`` and the CPU flags.
"""

from pathlib import Path

import torch
from datasets import load_dataset
from flexkit_trl import FlexkitGRPOTrainer
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

import flexkit

HERE = Path("examples/trl")


def tiny_model_and_tokenizer() -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A one-layer Llama over a word-level vocabulary of digits and a few words (random weights)."""
    words = ["[PAD]", "[EOS]", "[UNK]", *(str(i) for i in range(10)), "+", "=", "what", "is"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]",
                                        unk_token="[UNK]", padding_side="left")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return LlamaForCausalLM(config), tokenizer


def correct(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
    """1.0 when the completion starts with the answer's digits, else 0.0 (pass/fail rewards in [0, 1])."""
    return [float(c.strip().startswith(a)) for c, a in zip(completions, answer, strict=True)]


pipe = flexkit.load_pipeline(HERE / "pipeline.toml")       # tasksets lay out train.jsonl's rows, in order
dataset = load_dataset("json", data_files=str(HERE / "train.jsonl"), split="train")
model, tokenizer = tiny_model_and_tokenizer()
args = GRPOConfig(
    output_dir="runs/trl-example", report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
    use_cpu=True, bf16=False,                                 # CPU flags: drop them on a GPU
    per_device_train_batch_size=8, steps_per_generation=2,    # generation batch: 8 × 1 process × 2 = 16 completions
    num_generations=4,                                        # 16 // 4 = 4 prompts = the pipeline's batch_size
    max_steps=6,                                              # 6 steps / 2 per generation = the pipeline's 3 batches
    max_completion_length=4, learning_rate=1e-3, seed=0,
)
trainer = FlexkitGRPOTrainer(model=model, reward_funcs=correct, args=args, train_dataset=dataset,
                             processing_class=tokenizer, pipeline=pipe)
trainer.train()

last = [entry for entry in trainer.state.log_history if "flexkit/feedback/pass_rate_mean" in entry][-1]
print({k: round(v, 3) for k, v in last.items() if k.startswith("flexkit/")})
assert pipe.scheduler.step == 3, "every generation batch came from the pipeline"
