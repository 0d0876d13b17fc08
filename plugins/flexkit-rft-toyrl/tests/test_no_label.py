"""The ``arithmetic`` storage's pools without a difficulty label (``label = "none"`` / ``"source"``): what a selector
can read, the fixed prompt width, the source label's loose tie to the level, determinism, and the trainer's rollout
and per-level evaluation on such a pool."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flexkit_toyrl")

from flexkit_toyrl.arithmetic import (
    ArithmeticTasksConfig,
    digit_counts,
    make_arithmetic_taskset,
    noisy_levels,
)

from flexkit import InMemoryTaskset

LEVELS = (1, 2, 3, 4, 5, 6)
HIDDEN = ("level", "carries", "difficulty", "weak_pass_rate", "strong_pass_rate", "noisy_level", "answer_digits")


def pool(label: str, operation: str = "add", size: int = 3000, seed: int = 0) -> InMemoryTaskset:
    return make_arithmetic_taskset(ArithmeticTasksConfig(operation=operation, size=size, levels=LEVELS, seed=seed,
                                                         label=label), name="t")  # type: ignore[arg-type]


def rows(taskset: InMemoryTaskset) -> list[dict]:
    return taskset.read(np.arange(len(taskset)))


def mutual_information(x: np.ndarray, y: np.ndarray) -> float:
    """Empirical mutual information (nats) between two label arrays."""
    _, xi = np.unique(x, return_inverse=True)
    _, yi = np.unique(y, return_inverse=True)
    joint = np.zeros((xi.max() + 1, yi.max() + 1))
    np.add.at(joint, (xi, yi), 1.0)
    joint /= joint.sum()
    outer = joint.sum(axis=1, keepdims=True) @ joint.sum(axis=0, keepdims=True)
    seen = joint > 0
    return float((joint[seen] * np.log(joint[seen] / outer[seen])).sum())


@pytest.mark.parametrize("operation", ["add", "mul", "sub"])
@pytest.mark.parametrize("label", ["none", "source"])
def test_no_column_a_selector_reads_tells_the_level(label: str, operation: str) -> None:
    taskset = pool(label, operation)
    every = rows(taskset)
    keys = set().union(*(row.keys() for row in every))
    expected = {"id", "a", "b", "prompt"} | ({"source"} if label == "source" else set())
    expected |= {"operation"} if operation != "add" else set()
    expected |= {"multiplier"} if operation == "mul" else set()
    assert keys == expected
    for key in HIDDEN:
        with pytest.raises(Exception, match=key):
            taskset.column(key)
    np.testing.assert_array_equal(taskset.column("id"), np.arange(len(taskset)))


@pytest.mark.parametrize("operation", ["add", "mul", "sub"])
def test_prompts_have_one_width_and_spell_the_operands(operation: str) -> None:
    every = rows(pool("none", operation))
    assert len({len(row["prompt"]) for row in every}) == 1
    symbol = {"add": "+", "mul": "*", "sub": "-"}[operation]
    for row in every[:200]:
        left, right = row["prompt"].removesuffix("=").split(symbol)
        assert len(left) == 6 and len(right) == (1 if operation == "mul" else 6)
        assert (int(left), int(right)) == (row["a"], row["b"])
    assert every[0]["prompt"].endswith("=")


def test_the_problems_are_the_labelled_pools_in_a_shuffled_order() -> None:
    labelled, plain = rows(pool("level")), rows(pool("none"))
    pairs = sorted((row["a"], row["b"]) for row in labelled)
    assert sorted((row["a"], row["b"]) for row in plain) == pairs
    levels_in_order = [int(digit_counts(np.array([row["a"]]), 10)[0]) for row in plain[:60]]
    assert levels_in_order != [row["level"] for row in labelled[:60]]  # the order no longer cycles through levels


def test_pools_are_deterministic_from_the_seed() -> None:
    assert rows(pool("source", seed=3)) == rows(pool("source", seed=3))
    assert rows(pool("source", seed=3)) != rows(pool("source", seed=4))


def test_the_source_label_is_loosely_tied_to_the_level() -> None:
    size = 30_000
    every = rows(pool("source", size=size))
    levels = digit_counts(np.array([row["a"] for row in every]), 10)
    sources = np.array([row["source"] for row in every])
    assert len(set(sources.tolist())) == 4
    tie = mutual_information(sources, levels)
    noisy = noisy_levels(levels, LEVELS, 0.7, np.random.default_rng(0))  # a 70%-right level label
    assert 0.05 < tie < 0.4 * mutual_information(noisy, levels)
    assert tie < 0.3 * math.log(6)
    # every source holds every level, in different mixes
    mixes = np.array([[np.mean(levels[sources == s] == level) for level in LEVELS] for s in np.unique(sources)])
    assert (mixes > 0.01).all() and np.ptp(mixes[:, 0]) > 0.1


def test_which_name_leans_easy_is_shuffled_by_the_seed() -> None:
    easiest = set()
    for seed in range(8):
        every = rows(pool("source", size=3000, seed=seed))
        levels = digit_counts(np.array([row["a"] for row in every]), 10)
        sources = np.array([row["source"] for row in every])
        names = np.unique(sources)
        easiest.add(str(names[np.argmin([levels[sources == s].mean() for s in names])]))
    assert len(easiest) > 1


def test_noisy_labels_need_the_level_label() -> None:
    with pytest.raises(ValueError, match="noisy_labels"):
        ArithmeticTasksConfig(label="none", noisy_labels=True)


def test_the_trainer_rolls_out_an_unlabelled_pool_and_evaluates_by_level(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from flexkit_toyrl.config import ToyRLConfig
    from flexkit_toyrl.trainer import ToyRLTrainer

    taskset = pool("none", size=40)

    class Task:
        def __init__(self, index: int) -> None:
            self.taskset, self.taskset_id, self.index = "t", 0, index
            self.data = taskset.read([index])[0]

    trainer = ToyRLTrainer(ToyRLConfig(max_digits=6, d_model=16, n_heads=2, warmup_steps=0, group_size=2,
                                       eval_levels=LEVELS, eval_tasks_per_level=5, val_tasks_per_level=5,
                                       pretrained=False, warmup_level_weights=(1.0,)), seed=0)
    tasks = [Task(i) for i in range(8)]
    rollout = trainer.rollout(tasks, step=0)
    expected = np.repeat(digit_counts(np.array([t.data["a"] for t in tasks]), 10), 2)
    np.testing.assert_array_equal(np.asarray(rollout.batch["level"]), expected)  # the level from the operand
    evaluation = trainer.evaluate(step=0)
    assert {f"eval_accuracy/{level}" for level in LEVELS} <= set(evaluation)


NO_LABEL_TINY = """
[run]
batch_size = 8
seed = 3
total_steps = 12
eval_every = 4
checkpoint_every = 5

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 400
levels = [1, 2, 3]
label = "none"

[tasksets.selector]
type = "frontier"
text_key = "prompt"
bins = 4
retain = 0.5
retain_above = 0.9

[replay]
groups = 4
max_age = 2

[trainer]
type = "toyrl"
max_digits = 3
d_model = 16
n_heads = 2
group_size = 4
warmup_steps = 5
warmup_batch_size = 16
warmup_level_weights = [0.5, 0.5]
eval_tasks_per_level = 10
eval_levels = [1, 2, 3]
"""


def test_a_no_label_run_resumes_exactly_and_records_the_models_estimates(tmp_path: Path) -> None:
    """The pipeline loads the prompt column for text_key, the model's state goes into the checkpoints, and a run
    resumed after a crash ends exactly as the uninterrupted one."""
    pytest.importorskip("torch")
    from flexkit import load_pipeline, run_pipeline
    from flexkit.testing import crash_run, read_metrics, without_clock

    path = tmp_path / "pipeline.toml"
    path.write_text(NO_LABEL_TINY)
    full = run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    crash_run(load_pipeline(path), tmp_path / "broken", 8)
    resumed = run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    assert without_clock(read_metrics(tmp_path / "broken")) == without_clock(read_metrics(tmp_path / "full"))
    assert resumed.last_eval == full.last_eval
    steps = read_metrics(tmp_path / "full")[1:]
    assert all(sum(m["flexkit/predicted_pass_rate"]["pool"]) == 400 for m in steps)  # the model scores the pool
    assert all("flexkit/level_mix" not in m for m in steps)  # no row tells its level


def test_a_no_label_run_records_the_models_predictions_of_the_validation_rows(tmp_path: Path) -> None:
    """Every evaluation records, per quantile group, the prompt model's mean prediction of the validation problems
    it puts there beside their greedy accuracy, for every validation problem."""
    pytest.importorskip("torch")
    from flexkit import load_pipeline, run_pipeline
    from flexkit.testing import read_metrics

    path = tmp_path / "pipeline.toml"
    path.write_text(NO_LABEL_TINY)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    prefix = "flexkit/selector/addition/"
    evaluated = [m for m in read_metrics(tmp_path / "run") if "flexkit/val/accuracy" in m]
    assert len(evaluated) == 4  # before training, after steps 4, 8 and 12
    for record in evaluated:
        groups = [key.removeprefix(prefix + "val_rows/") for key in record if key.startswith(prefix + "val_rows/")]
        assert groups and sum(record[prefix + f"val_rows/{g}"] for g in groups) == record[prefix + "val_rows"] > 0
        for g in groups:
            assert 0.0 <= record[prefix + f"val_predicted/{g}"] <= 1.0
            assert 0.0 <= record[prefix + f"val_observed/{g}"] <= 1.0
    steps = [m for m in read_metrics(tmp_path / "run") if m["step"] >= 0]
    assert not any(key.startswith(prefix + "val_") for m in steps if "flexkit/val/accuracy" not in m for key in m)


def test_validation_rows_spell_their_prompts_as_the_pool_does(tmp_path: Path) -> None:
    """The pool pads operands to its own largest level (3 digits here), not to the trainer's max_digits (5): the
    validation rows' prompts are padded the same way, so the prompt model reads them as it reads the pool."""
    pytest.importorskip("torch")
    from flexkit import load_pipeline

    path = tmp_path / "pipeline.toml"
    path.write_text(NO_LABEL_TINY.replace("max_digits = 3", "max_digits = 5"))
    pipe = load_pipeline(path)
    trainer = pipe.plugins.component("trainer", "toyrl").build(pipe.config.trainer.config, seed=0)
    trainer.setup(pipe)
    assert trainer.validation_rows() is None  # nothing validated yet
    validation = trainer.validate(step=0)
    rows = trainer.validation_rows()
    assert rows is not None and len(rows) == len(trainer.val_levels)
    pool_prompt = pipe.scheduler.entries[0].taskset.read([0])[0]["prompt"]
    assert {len(text) for text in rows.columns["prompt"]} == {len(pool_prompt)} == {len("007+003=")}
    for text, a, b, level in zip(rows.columns["prompt"], rows.columns["a"], rows.columns["b"],
                                 rows.columns["level"], strict=True):
        assert text == f"{a:03d}+{b:03d}="
        assert len(str(a)) == level or (level == 1 and a < 10)
    per_level = {level: np.mean(rows.scores[np.asarray(rows.columns["level"]) == level]) for level in (1, 2, 3)}
    assert per_level == pytest.approx({level: validation[f"val_accuracy/{level}"] for level in (1, 2, 3)})


def _validated_rows(tmp_path: Path, text: str) -> Any:
    from flexkit import load_pipeline

    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    pipe = load_pipeline(path)
    trainer = pipe.plugins.component("trainer", "toyrl").build(pipe.config.trainer.config, seed=0)
    trainer.setup(pipe)
    trainer.validate(step=0)
    return trainer.validation_rows()


def test_regression_validation_problems_wider_than_the_pool_are_left_out(tmp_path: Path) -> None:
    """eval_levels up to 4 with a pool of levels 1-3: the level-4 problems were written into the pool's 3-digit
    format with their high digit dropped ("685+623=" for 9685 + 7623); they do not fit it, so they are not given."""
    pytest.importorskip("torch")
    text = (NO_LABEL_TINY.replace("max_digits = 3", "max_digits = 4")
            .replace("eval_levels = [1, 2, 3]", "eval_levels = [1, 2, 3, 4]"))
    rows = _validated_rows(tmp_path, text)
    assert set(rows.columns["level"]) == {1, 2, 3}
    assert all(text == f"{a:03d}+{b:03d}=" for text, a, b in
               zip(rows.columns["prompt"], rows.columns["a"], rows.columns["b"], strict=True))


@pytest.mark.parametrize("change", ["labelled", "two widths"])
def test_no_prompt_text_where_no_one_pool_format_fits(tmp_path: Path, change: str) -> None:
    """A labelled pool holds no prompt text, and pools of two widths write two formats: the rows then carry no
    prompt (a prompt model says so once) and every validation problem."""
    pytest.importorskip("torch")
    if change == "labelled":
        text = NO_LABEL_TINY.replace('label = "none"', 'label = "level"').replace(
            'text_key = "prompt"\nbins = 4', 'feature_keys = ["level"]\nguard_metric = ""')
    else:
        text = NO_LABEL_TINY + NO_LABEL_TINY[NO_LABEL_TINY.index("[[tasksets]]"):NO_LABEL_TINY.index("[replay]")] \
            .replace('name = "addition"', 'name = "small"').replace("levels = [1, 2, 3]", "levels = [1, 2]")
    rows = _validated_rows(tmp_path, text)
    assert "prompt" not in rows.columns and set(rows.columns["level"]) == {1, 2, 3}
