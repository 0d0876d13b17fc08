"""The toyrl trainer's held-out splits: a validation set (what the selectors steer on) disjoint from the test set
(what runs are judged on), both deterministic; the test set is the one of before the split wherever the level
leaves room; ``flexkit run`` records both, and hands the selectors only validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flexkit_toyrl")
torch = pytest.importorskip("torch")

from flexkit_toyrl.config import ToyRLConfig  # noqa: E402
from flexkit_toyrl.families import FAMILIES  # noqa: E402
from flexkit_toyrl.splits import EVAL_SPAWN_KEY, held_out_splits  # noqa: E402
from flexkit_toyrl.trainer import ToyRLTrainer  # noqa: E402

from flexkit import load_pipeline, run_pipeline  # noqa: E402
from flexkit.testing import read_metrics  # noqa: E402

#: (operation, base, test problems per level, validation problems per level): base 10 with level 1 exhausted by the
#: test draws (500 multiplications leave none of its 80), and a small base where several levels are.
CASES = [("add", 10, 200, 200), ("add", 10, 500, 200), ("mul", 10, 500, 200), ("mul", 10, 10, 50),
         ("add", 3, 200, 100), ("mul", 3, 500, 300), ("add", 2, 50, 500), ("sub", 10, 500, 200)]
LEVELS = (1, 2, 3, 4, 5, 6)


def _keys(problems, span: int) -> np.ndarray:
    return problems.a * span + problems.b


@pytest.mark.parametrize(("operation", "base", "tests", "vals"), CASES)
def test_validation_and_test_problems_are_disjoint(operation: str, base: int, tests: int, vals: int) -> None:
    family = FAMILIES[operation]
    split = held_out_splits(family, LEVELS, tests, vals, 6, base)
    span = family.b_limit(6, base)
    test, val = _keys(split.test, span), _keys(split.validation, span)
    assert not set(test.tolist()) & set(val.tolist())
    assert len(set(val.tolist())) == len(val)  # distinct validation problems
    for level in LEVELS:  # every level has validation problems of that level, as many as it can give
        (a_low, a_high), (b_low, b_high) = family.ranges(level, base)
        mine = split.validation.levels == level
        assert mine.sum() >= min(vals, max(1, family.level_size(level, base) // 5))
        assert ((split.validation.a[mine] >= a_low) & (split.validation.a[mine] < a_high)).all()
        assert ((split.validation.b[mine] >= b_low) & (split.validation.b[mine] < b_high)).all()
    assert (split.test.levels == np.repeat(LEVELS, tests)).all()
    again = held_out_splits(family, LEVELS, tests, vals, 6, base)  # deterministic
    assert (_keys(again.test, span) == test).all() and (_keys(again.validation, span) == val).all()


@pytest.mark.parametrize(("operation", "tests"), [("add", 200), ("add", 500), ("mul", 500)])
def test_the_test_set_is_the_one_of_before_but_where_a_level_had_to_be_shared(operation: str, tests: int) -> None:
    family = FAMILIES[operation]
    levels = np.repeat(LEVELS, tests)
    a, b = family.draw(levels, 10, np.random.default_rng(np.random.SeedSequence(0, spawn_key=EVAL_SPAWN_KEY)))
    split = held_out_splits(family, LEVELS, tests, 200, 6, 10)
    changed = (split.test.a != a) | (split.test.b != b)
    assert not changed[levels > 1].any()  # levels 2-6: every test problem as before
    assert 0.1 < changed[levels == 1].mean() < 0.3  # level 1 (80-100 problems): about a fifth drawn again


def test_the_trainer_validates_on_its_own_problems_and_evaluates_on_the_test_set() -> None:
    config = ToyRLConfig(max_digits=2, d_model=16, n_heads=2, warmup_steps=3, eval_levels=(1, 2),
                         eval_tasks_per_level=30, val_tasks_per_level=40, warmup_level_weights=(1.0,))
    trainer = ToyRLTrainer(config, seed=0)
    prompts = {tuple(row) for row in trainer.eval_prompts.tolist()}
    assert not prompts & {tuple(row) for row in trainer.val_prompts.tolist()}
    assert np.bincount(trainer.val_levels).tolist() == [0, 40, 40]
    val, test = trainer.validate(step=0), trainer.evaluate(step=0)
    assert set(val) == {"val_accuracy", "val_accuracy/1", "val_accuracy/2"}
    assert set(test) == {"eval_accuracy", "eval_accuracy/1", "eval_accuracy/2"}
    assert val["val_accuracy"] == pytest.approx((val["val_accuracy/1"] + val["val_accuracy/2"]) / 2)
    before = trainer.generator.get_state().clone()
    trainer.validate(step=0)
    assert torch.equal(trainer.generator.get_state(), before)  # greedy: validation draws nothing


GUARDED = """
[run]
batch_size = 8
seed = 1
total_steps = 4
eval_every = 2

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 200
levels = [1, 2]

[tasksets.selector]
type = "frontier"
feature_keys = ["level"]
retain = 1.0
retain_above = 0.5
guard_metric = "val_accuracy/{}"

[trainer]
type = "toyrl"
max_digits = 2
d_model = 16
n_heads = 2
group_size = 4
warmup_steps = 3
warmup_batch_size = 16
warmup_level_weights = [1.0]
eval_levels = [1, 2]
eval_tasks_per_level = 20
val_tasks_per_level = 25
"""


def test_a_guarded_run_records_both_splits_and_its_guard_holds_the_validation_values(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(GUARDED)
    pipe = load_pipeline(path)
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    evals = [m for m in read_metrics(tmp_path / "run") if "flexkit/eval/accuracy" in m]
    assert len(evals) == 3 and all("flexkit/val/accuracy" in m and "flexkit/val/accuracy/2" in m for m in evals)
    held = pipe.scheduler.entries[0].selector.held_out
    assert held.latest.tolist() == [evals[-1][f"flexkit/val/accuracy/{level}"] for level in (1, 2)]
    assert held.best.tolist() == [max(m[f"flexkit/val/accuracy/{level}"] for m in evals) for level in (1, 2)]


def test_the_quickstart_guard_reads_the_validation_split() -> None:
    quickstart = Path(__file__).resolve().parents[3] / "examples" / "quickstart.toml"
    pipe = load_pipeline(quickstart)
    assert pipe.config.tasksets[0].selector.config.guard_metric == "val_accuracy/{}"
