"""flexkit-rft-trl against the real TRL: the sampler keeps RepeatSampler's contract (checked against TRL's own
RepeatSampler), and a tiny GRPOTrainer run (a one-layer Llama built from a config, a word-level tokenizer built
in memory: nothing downloaded) draws its prompts from the pipeline and feeds rewards back.

Skipped when trl (or the flexkit-rft-trl plugin) is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")
pytest.importorskip("flexkit_trl")

from datasets import Dataset  # noqa: E402 - after the skips
from flexkit_trl import INDEX_COLUMN, FlexkitGRPOTrainer, repeat_sampler, with_index_column  # noqa: E402
from trl.trainer.utils import RepeatSampler  # noqa: E402

from flexkit import ConfigError, FlexkitSampler, pipeline_from_dict  # noqa: E402
from flexkit.testing import write_jsonl_taskset  # noqa: E402


def make_pipeline(tmp_path: Path, *, selector: dict, sizes=(10,), batch_size: int = 3, epochs: int = 1):
    for i, n in enumerate(sizes):
        if not (tmp_path / f"t{i}.jsonl").exists():
            write_jsonl_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
    data = {"run": {"batch_size": batch_size, "seed": 2, "total_epochs": epochs},  # prefetch: the default
            "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": selector} for i in range(len(sizes))]}
    return pipeline_from_dict(data, base_dir=tmp_path)


DIFFICULTY = {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5}


# -- RepeatSampler's contract ----------------------------------------------------------------------------


@pytest.mark.parametrize(("mini", "repeat"), [(2, 4), (3, 1), (1, 2)])
def test_sequential_pipeline_reproduces_repeat_sampler_exactly(tmp_path: Path, mini: int, repeat: int) -> None:
    data = list(range(10))
    pipe = make_pipeline(tmp_path, selector={"type": "sequential"})
    ours = repeat_sampler(pipe, data, num_generations=mini, generation_batch_size=3 * mini, steps_per_generation=repeat)
    theirs = RepeatSampler(data, mini_repeat_count=mini, batch_size=3, repeat_count=repeat, shuffle=False)
    assert len(ours) == len(theirs)
    assert list(ours) == list(theirs)


@pytest.mark.parametrize("selector", [{"type": "shuffle"}, DIFFICULTY])
def test_any_selector_keeps_the_grouping(tmp_path: Path, selector: dict) -> None:
    """Each block of batch × num_generations × repeats: `repeat` identical copies of [i]*G + [j]*G + ... over
    `batch` distinct prompts — what GRPO's group normalisation and generation reuse rely on."""
    pipe = make_pipeline(tmp_path, selector=selector, sizes=(7, 5), batch_size=4, epochs=2)
    mini, iterations, steps = 2, 2, 3
    sampler = repeat_sampler(pipe, list(range(12)), num_generations=mini, generation_batch_size=8,
                             num_iterations=iterations, steps_per_generation=steps)
    repeat = iterations * steps
    assert len(sampler) == len(RepeatSampler(list(range(12)), mini_repeat_count=mini, batch_size=4,
                                             repeat_count=repeat))
    for _epoch in range(2):
        seen = list(sampler)
        assert len(seen) == len(sampler)
        block = 4 * mini * repeat
        for k in range(0, len(seen), block):
            chunk = seen[k:k + block]
            one = chunk[:4 * mini]
            assert chunk == one * repeat
            prompts = one[::mini]
            assert one == [p for p in prompts for _ in range(mini)]
            assert len(set(prompts)) == 4


def test_the_pipeline_batch_size_must_fit_the_generation_batch(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, selector={"type": "shuffle"})
    with pytest.raises(ValueError, match=r"generation_batch_size \(8\) // num_generations \(2\) = 4"):
        repeat_sampler(pipe, list(range(10)), num_generations=2, generation_batch_size=8)


def test_index_column() -> None:
    ds = with_index_column(Dataset.from_dict({"prompt": ["a", "b", "c"]}))
    assert ds[INDEX_COLUMN] == [0, 1, 2]
    assert with_index_column(ds) is ds
    rows = with_index_column([{"prompt": "x"}, {"prompt": "y"}])
    assert rows[1] == {"prompt": "y", INDEX_COLUMN: 1}
    with pytest.raises(ValueError, match="each row's index"):
        with_index_column(Dataset.from_dict({"prompt": ["a", "b"], INDEX_COLUMN: [1, 0]}))


# -- a tiny GRPO run ---------------------------------------------------------------------------------------


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["[PAD]", "[EOS]", "[UNK]", *(str(i) for i in range(10)), "+", "=", "what", "is"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]")
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return LlamaForCausalLM(config), tokenizer


def test_grpo_trainer_draws_from_the_pipeline_and_feeds_rewards_back(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=4, epochs=3)
    dataset = Dataset.from_dict({"prompt": [f"what is {i} + {i % 3} =" for i in range(12)]})
    calls: list[list[int]] = []

    def reward(completions, flexkit_index, **kwargs):
        calls.append(list(flexkit_index))
        return [float(i % 2) for i in flexkit_index]  # odd dataset indices always "pass"

    fed: list[dict] = []
    original = FlexkitSampler.feedback

    def spy(self, indices, rewards):
        metrics = original(self, indices, rewards)
        fed.append(metrics)
        return metrics

    monkeypatch.setattr(FlexkitSampler, "feedback", spy)
    model, tokenizer = tiny_model_and_tokenizer()
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                          steps_per_generation=2, max_completion_length=3, max_steps=4, report_to="none",
                          use_cpu=True, logging_steps=1, save_strategy="no", seed=0, bf16=False,
                          dataloader_num_workers=0, learning_rate=1e-3)
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                                 processing_class=tokenizer, pipeline=pipe)
    before = pipe.scheduler.state_dict()["selectors"]
    trainer.train()

    # 4 optimizer steps, one generation every 2 steps: 2 generation batches of 4 prompts × 2 completions
    assert len(calls) == 2
    sampler = trainer.flexkit_sampler
    assert sampler is not None and sampler.mini_repeat_count == 2 and sampler.repeat_count == 2
    reference = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=4, epochs=3).scheduler
    first = [sampler.global_index(t.taskset_id, t.index) for t in reference.read()]
    assert calls[0] == [i for i in first for _ in range(2)]  # the pipeline's first batch, grouped by prompt
    for group in calls:
        assert group[0::2] == group[1::2] and len(set(group[0::2])) == 4
    # each generation batch's rewards reached the selectors: pass rate 1 for odd indices, 0 for even ones
    assert len(fed) == 2
    for metrics, group in zip(fed, calls, strict=True):
        got = {sampler.global_index(t, i): v for t, part in metrics["selector_metric"].items()
               for i, v in zip(part["indices"], part["values"], strict=True)}
        assert got == {i: float(i % 2) for i in group}
    assert str(before) != str(pipe.scheduler.state_dict()["selectors"])
    # timing: with num_iterations × steps_per_generation = 2, the second generation batch was selected after the
    # first one's feedback (accelerate's one-batch lookahead only fetched the first batch's repeat)
    reference.feedback(fed[0])
    second = [sampler.global_index(t.taskset_id, t.index) for t in reference.read()]
    assert calls[1] == [i for i in second for _ in range(2)]
    # flexkit's metrics reached TRL's log: the fed-back pass rates of the latest generation batch
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 4 and all("flexkit/feedback/pass_rate_mean" in e for e in logged)  # logging_steps = 1
    assert logged[0]["flexkit/feedback/pass_rate_mean"] == pytest.approx(sum(i % 2 for i in calls[0][::2]) / 4)
    assert logged[-1]["flexkit/feedback/pass_rate_mean"] == pytest.approx(sum(i % 2 for i in calls[1][::2]) / 4)
    assert logged[-1]["flexkit/rollouts"] == 8
    # and the running total of completions (it used to be absent: a reader had only the per-generation count)
    assert [e["flexkit/run/rollouts"] for e in logged] == [8, 8, 16, 16]
    assert logged[-1]["flexkit/step"] == pipe.scheduler.step  # batches handed out (the loader reads one ahead)


def _grpo_args(tmp_path: Path, **overrides) -> object:
    settings = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4, "num_generations": 2,
                "steps_per_generation": 2, "max_completion_length": 3, "report_to": "none", "use_cpu": True,
                "save_strategy": "no", "bf16": False, **overrides}
    return trl.GRPOConfig(**settings)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"max_steps": 200}, r"max_steps = 200 needs 100 generation batches .* holds 9 \(3 per epoch\).* "
                         r"total_steps = 100 .* max_steps = 18"),
    ({"num_train_epochs": 4}, r"num_train_epochs = 4 needs 12 generation batches .* holds 9"),
    ({"max_steps": 10, "gradient_accumulation_steps": 2}, r"needs 10 generation batches .* max_steps = 9\b"),
])
def test_regression_a_run_longer_than_the_pipeline_is_refused(tmp_path: Path, overrides: dict, message: str) -> None:
    """Used to pass silently: the sampler ran dry and the HF Trainer stopped early (step 96 of 200)."""
    pipe = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=4, epochs=3)
    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"what is {i} =" for i in range(12)]})
    with pytest.raises(ConfigError, match=message):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           args=_grpo_args(tmp_path, **overrides), train_dataset=dataset,
                           processing_class=tokenizer, pipeline=pipe)


def test_runs_that_fit_the_pipeline_are_accepted(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=4, epochs=3)
    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"what is {i} =" for i in range(12)]})
    for overrides in ({"max_steps": 18}, {"num_train_epochs": 3}, {"max_steps": 1}):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           args=_grpo_args(tmp_path, **overrides), train_dataset=dataset,
                           processing_class=tokenizer, pipeline=pipe)


def test_a_sample_stage_is_accepted(tmp_path: Path) -> None:
    """A [sample] table used to be refused (GRPO's loss took no weights); it is applied now
    (test_trl_sample_stage.py)."""
    write_jsonl_taskset(tmp_path / "t0.jsonl", 12)
    model, tokenizer = tiny_model_and_tokenizer()
    pipe = pipeline_from_dict({
        "run": {"batch_size": 4}, "tasksets": [{"name": "t0", "path": "t0.jsonl"}],
        "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"},
                   "actuator": {"type": "zero_variance_filter"}}}, base_dir=tmp_path)
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                 args=_grpo_args(tmp_path, max_steps=2),
                                 train_dataset=Dataset.from_dict({"prompt": ["a"] * 12}),
                                 processing_class=tokenizer, pipeline=pipe)
    assert trainer.flexkit_pipeline is pipe


def test_an_evaluation_reaches_the_selectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer.evaluate()``'s logs, TRL's GRPO metrics included (``eval_reward``), go to
    ``pipeline.evaluation``; training logs do not. Regression: an evaluation used to feed its rewards back as
    training feedback and failed with ``KeyError: 'flexkit_index'`` on an eval dataset without that column."""
    pipe = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=4, epochs=3)
    dataset = Dataset.from_dict({"prompt": [f"what is {i} + {i % 3} =" for i in range(12)]})
    held_out = Dataset.from_dict({"prompt": [f"what is {i} =" for i in range(4)]})
    seen: list[dict] = []
    monkeypatch.setattr(type(pipe), "evaluation", lambda self, metrics: seen.append(dict(metrics)))
    model, tokenizer = tiny_model_and_tokenizer()
    args = _grpo_args(tmp_path, max_steps=2, logging_steps=1, per_device_eval_batch_size=4, seed=0,
                      dataloader_num_workers=0, learning_rate=1e-3)
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.25] * len(completions),
                                 args=args, train_dataset=dataset, eval_dataset=held_out,
                                 processing_class=tokenizer, pipeline=pipe)
    trainer.train()
    assert seen == []  # training logs stay with the trackers
    fed = str(pipe.scheduler.state_dict()["selectors"])
    trainer.evaluate()
    assert str(pipe.scheduler.state_dict()["selectors"]) == fed  # held-out rewards are not feedback
    assert len(seen) == 1
    assert seen[0]["val_reward"] == pytest.approx(0.25) and "val_runtime" in seen[0]  # eval_dataset: validation


def test_regression_a_batch_size_that_is_not_a_generation_batch_is_refused_at_construction(tmp_path: Path) -> None:
    """Used to surface only inside trainer.train(), as a ValueError from the sampler; now the trainer refuses it
    when built, naming the key and both fixes."""
    pipe = make_pipeline(tmp_path, selector=DIFFICULTY, sizes=(8, 4), batch_size=3, epochs=3)
    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"what is {i} =" for i in range(12)]})
    with pytest.raises(ConfigError, match=r"run.batch_size: the pipeline's batch_size \(3\) must be the prompts per "
                                          r"generation batch: generation_batch_size \(8\) // num_generations \(2\) = "
                                          r"4; set \[run\] batch_size = 4, or generation_batch_size = 6"):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           args=_grpo_args(tmp_path, max_steps=1), train_dataset=dataset,
                           processing_class=tokenizer, pipeline=pipe)
