"""Per-group held-out accuracy for the ``frontier`` guard under TRL: an evaluation's rewards, pooled by the
evaluation rows' value in the selector's grouping column, reach the selector as ``val_accuracy/<group>``
(eval_dataset is the validation split)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

trl = pytest.importorskip("trl")
pytest.importorskip("flexkit_trl")

from datasets import Dataset  # noqa: E402 - after the skips
from flexkit_trl import FlexkitGRPOTrainer  # noqa: E402
from flexkit_trl.groups import group_label  # noqa: E402
from trl_harness import QUICKSTART_FRONTIER, grouped_rows, grpo_args, pipeline, tiny_model_and_tokenizer  # noqa: E402

from flexkit import ConfigError  # noqa: E402


def _held_out(pipe: Any) -> dict[str, Any]:
    state = pipe.scheduler.state_dict()["selectors"][0]
    return {"names": state["group_names"], **state["held_out"]}


@pytest.mark.parametrize(("column", "values", "labels", "names"), [
    ("source", ["gsm8k", "math", "aime"], ["gsm8k", "math", "aime"], ["aime", "gsm8k", "math"]),
    ("level", [1, 2, 3], ["1", "2", "3"], ["1", "2", "3"]),
    ("level", [1.0, 2.5, 3.0], ["1", "2.5", "3"], ["1", "2.5", "3"]),
])
def test_the_quickstart_guard_sees_each_groups_held_out_accuracy(tmp_path: Path, column: str, values: list[Any],
                                                                labels: list[str], names: list[str]) -> None:
    """The quickstart's selector (frontier by a column + guard_metric = "val_accuracy/{}") copied into
    FlexkitGRPOTrainer: after an evaluation its held-out watch has the evaluated groups' mean rewards, under the
    names it gives its groups (integral numbers as integers, labels as they are)."""
    rows = grouped_rows(12, column, values)
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": [column]}, batch_size=4, total_steps=2)
    score = dict(zip(values, [1.0, 0.25, 0.5], strict=True))

    def reward(completions: list[str], **kwargs: Any) -> list[float]:
        return [score[v] for v in kwargs[column]]

    held_out = Dataset.from_list(grouped_rows(6, column, values[:2]))  # two of the three groups evaluated
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=reward, train_dataset=Dataset.from_list(rows),
                                 eval_dataset=held_out, processing_class=tokenizer, pipeline=pipe,
                                 args=grpo_args(tmp_path, max_steps=2, per_device_eval_batch_size=4,
                                                eval_strategy="steps", eval_steps=1))
    before = _held_out(pipe)
    assert not before["evaluated"].any()
    metrics = trainer.evaluate()
    first, second = labels[0], labels[1]
    assert metrics[f"eval_accuracy/{first}"] == pytest.approx(1.0)
    assert metrics[f"eval_accuracy/{second}"] == pytest.approx(0.25)
    assert f"eval_accuracy/{labels[2]}" not in metrics
    assert metrics["eval_accuracy"] == pytest.approx((1.0 + 0.25) / 2)  # 3 prompts of each group
    after = _held_out(pipe)
    assert [n.removeprefix(f"{column}=") for n in after["names"]] == names
    expected = {first: 1.0, second: 0.25}
    assert list(after["evaluated"]) == [n in expected for n in names]
    assert np.allclose(after["latest"], [expected.get(n, 0.0) for n in names])
    # a second evaluation starts from nothing: the same values, not a running sum over evaluations
    assert trainer.evaluate()[f"eval_accuracy/{second}"] == pytest.approx(0.25)


def test_group_labels_are_the_selectors_names() -> None:
    assert [group_label(v) for v in (3, 3.0, 2.5, "gsm8k", np.int64(4), np.float64(5.0), True)] == \
        ["3", "3", "2.5", "gsm8k", "4", "5", "true"]


def test_an_eval_dataset_without_the_guards_column_is_refused(tmp_path: Path) -> None:
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match=r"eval_dataset: eval_dataset lacks the column\(s\) 'source'"):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           train_dataset=Dataset.from_list(rows), processing_class=tokenizer, pipeline=pipe,
                           eval_dataset=Dataset.from_dict({"prompt": ["what is 1 ="] * 4}),
                           args=grpo_args(tmp_path, max_steps=2))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"guard_metric": "val_reward/{}"}, r"guard_metric: .* guard_metric = 'val_reward/\{\}' would never see a value"),
    ({"bins": 2, "feature_keys": ["x"]}, r"bins: .* quantile range of 'x'"),
])
def test_a_guard_the_trainer_cannot_feed_is_refused(tmp_path: Path, overrides: dict[str, Any], message: str) -> None:
    rows = [{**r, "x": float(i)} for i, r in enumerate(grouped_rows(12, "source", ["a", "b"]))]
    selector = {**QUICKSTART_FRONTIER, "feature_keys": ["source"], **overrides}
    pipe = pipeline(tmp_path, rows, selector, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match=message):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           train_dataset=Dataset.from_list(rows), processing_class=tokenizer, pipeline=pipe,
                           args=grpo_args(tmp_path, max_steps=2))


def test_regression_a_bare_schedulers_guard_without_an_eval_dataset_is_refused(tmp_path: Path) -> None:
    """The trainer checked what it honours for a Pipeline only: a bare scheduler's guard, with no eval_dataset to
    feed it, was accepted and never saw an evaluation. The sampler it builds carries the trainer's support."""
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()

    def build(**extra: Any) -> FlexkitGRPOTrainer:
        evaluates = {"eval_strategy": "steps", "eval_steps": 1} if "eval_dataset" in extra else {}
        return FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                  train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                  pipeline=pipe.scheduler, args=grpo_args(tmp_path, max_steps=2, **evaluates),
                                  **extra)

    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric: FlexkitGRPOTrainer \(TRL\) does "
                                          r"not honour this.*give the trainer an eval_dataset"):
        build()
    trainer = build(eval_dataset=Dataset.from_list(grouped_rows(4, "source", ["a", "b"])))
    sampler = trainer._get_train_sampler()
    assert sampler.host is not None and sampler.host.evaluation


def test_regression_an_eval_dataset_train_never_evaluates_is_refused(tmp_path: Path) -> None:
    """With an eval_dataset but GRPOConfig's default eval_strategy ("no"), train() never evaluated and the guard
    stayed silently dead (evaluated: all False); now refused at construction, naming eval_strategy."""
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()

    def build(**settings: Any) -> FlexkitGRPOTrainer:
        return FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                  train_dataset=Dataset.from_list(rows), processing_class=tokenizer, pipeline=pipe,
                                  eval_dataset=Dataset.from_list(grouped_rows(4, "source", ["a", "b"])),
                                  args=grpo_args(tmp_path, max_steps=2, **settings))

    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric: .*eval_strategy is 'no'.*"
                                          r"set eval_strategy='steps'"):
        build()
    assert build(eval_strategy="steps", eval_steps=1)._flexkit_support.evaluation


@pytest.mark.parametrize(("settings", "refused"), [
    ({"eval_steps": 5}, True),  # max_steps = 2: the first evaluation would be at step 5
    ({"eval_steps": 1, "eval_delay": 3}, True),
    ({"eval_steps": 2}, False),
    ({"eval_steps": 0.5}, False),  # half of max_steps: step 1
    ({"eval_steps": 1, "eval_delay": 2}, False),
])
def test_a_guard_no_evaluation_within_the_run_would_feed_is_refused(tmp_path: Path, settings: dict[str, Any],
                                                                    refused: bool) -> None:
    """eval_strategy "steps" with an eval_steps or eval_delay past max_steps: train() never evaluated, the guard
    stayed dead; refused at construction naming the guard."""
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()

    def build() -> FlexkitGRPOTrainer:
        return FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                                  train_dataset=Dataset.from_list(rows), processing_class=tokenizer, pipeline=pipe,
                                  eval_dataset=Dataset.from_list(grouped_rows(4, "source", ["a", "b"])),
                                  args=grpo_args(tmp_path, max_steps=2, eval_strategy="steps", **settings))

    if refused:
        with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric: TRL would first evaluate at "
                                              r"step \d+ .* never see an evaluation"):
            build()
    else:
        build()


def test_regression_a_dataset_without_trls_prompt_column_is_refused_at_construction(tmp_path: Path) -> None:
    """A dataset whose prompts are in another column passed construction and failed inside train() with TRL's
    KeyError: 'prompt'."""
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    renamed = [{"question": r["prompt"], "source": r["source"]} for r in rows]
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match=r"train_dataset: has no 'prompt' column \(it has 'question', 'source'\): "
                                          r".*rename_column\('question', 'prompt'\)"):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           train_dataset=Dataset.from_list(renamed), processing_class=tokenizer, pipeline=pipe,
                           eval_dataset=Dataset.from_list(grouped_rows(4, "source", ["a", "b"])),
                           args=grpo_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1))


def test_regression_a_shuffled_train_dataset_is_refused_at_construction(tmp_path: Path) -> None:
    """dataset.shuffle() after writing the pipeline's file made the selector count other rows than TRL trained
    on, with no error."""
    rows = grouped_rows(12, "source", ["a", "b", "c"])
    pipe = pipeline(tmp_path, rows, {**QUICKSTART_FRONTIER, "feature_keys": ["source"]}, batch_size=4, total_steps=2)
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match=r"not taskset .* rows in the same order: at row \d+: the taskset's "
                                          r"'source'"):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           train_dataset=Dataset.from_list(rows).shuffle(seed=1), processing_class=tokenizer,
                           pipeline=pipe, eval_dataset=Dataset.from_list(grouped_rows(6, "source", ["a", "b", "c"])),
                           args=grpo_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1))


def test_the_prompt_model_is_checked_on_the_eval_dataset(tmp_path: Path) -> None:
    """frontier with text_key under FlexkitGRPOTrainer: an evaluation of eval_dataset (the validation split) adds
    the prompt model's predictions of the evaluated rows beside their rewards (clipped into [0, 1], as feedback
    is); an evaluation of a test set ("test_" prefix) adds none."""
    rows = grouped_rows(12, "source", ["a", "b"])
    pipe = pipeline(tmp_path, rows, {"type": "frontier", "text_key": "prompt", "bins": 2, "retain": 0.5},
                    batch_size=4, total_steps=2)

    def reward(completions: list[str], **kwargs: Any) -> list[float]:
        return [2.0 if source == "a" else -1.0 for source in kwargs["source"]]  # clipped to 1 and 0

    held_out = Dataset.from_list(grouped_rows(6, "source", ["a", "b"]))
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=reward, train_dataset=Dataset.from_list(rows),
                                 eval_dataset=held_out, processing_class=tokenizer, pipeline=pipe,
                                 args=grpo_args(tmp_path, max_steps=2, per_device_eval_batch_size=4))
    metrics = trainer.evaluate()
    prefix = "flexkit/selector/t0/"
    assert metrics[prefix + "val_rows"] == 12.0  # 6 prompts x 2 completions
    observed = {k: v for k, v in metrics.items() if k.startswith(prefix + "val_observed/")}
    counts = {k: v for k, v in metrics.items() if k.startswith(prefix + "val_rows/")}
    assert len(observed) == 1 and list(counts.values()) == [12.0]  # no feedback yet: one group, all rows
    assert list(observed.values()) == [pytest.approx(0.5)]  # half the completions clipped to 1, half to 0
    assert not any(key.startswith(prefix) for key in trainer.evaluate(held_out, metric_key_prefix="test"))
    several = trainer.evaluate({"first": held_out, "second": held_out})  # one name would hold either's numbers
    assert "eval_first_accuracy" in several and not any(key.startswith(prefix) for key in several)
