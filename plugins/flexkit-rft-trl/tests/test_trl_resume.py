"""Kill and resume through ``Trainer.train``: the curriculum continues exactly where the uninterrupted run is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
pytest.importorskip("flexkit_trl")

from datasets import Dataset  # noqa: E402 - after the skips
from flexkit_trl import FlexkitGRPOTrainer  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl_harness import QUICKSTART_FRONTIER, grouped_rows, grpo_args, pipeline, tiny_model_and_tokenizer  # noqa: E402

from flexkit import CheckpointError, ConfigError  # noqa: E402

ROWS = grouped_rows(12, "level", [1, 2, 3])
SELECTOR = {**QUICKSTART_FRONTIER, "feature_keys": ["level"], "guard_metric": "", "guard_min": 0.0,
            "retain": 0.5, "candidates": 2.0}


class Killed(Exception):
    """The simulated kill."""


class KillAt(TrainerCallback):
    """Raises at the start of the step after global step ``step`` (its checkpoint is written, the loader has
    already drawn the next batches)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise Killed


def _run(tmp_path: Path, out: str, *, accumulation: int, max_steps: int, kill_at: int | None = None,
         resume: str | None = None) -> tuple[list[list[int]], Any, FlexkitGRPOTrainer]:
    calls: list[list[int]] = []

    def reward(completions: list[str], flexkit_index: list[int], level: list[int], **kwargs: Any) -> list[float]:
        calls.append(list(flexkit_index))
        return [1.0 if lv == 1 else float(i % 2) if lv == 2 else 0.0 for i, lv in zip(flexkit_index, level,
                                                                                       strict=True)]

    pipe = pipeline(tmp_path, ROWS, SELECTOR, batch_size=4, total_steps=5)
    model, tokenizer = tiny_model_and_tokenizer()
    args = grpo_args(tmp_path, output_dir=str(tmp_path / out), max_steps=max_steps, save_strategy="steps",
                     save_steps=2, gradient_accumulation_steps=accumulation)
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(ROWS),
                                 processing_class=tokenizer, pipeline=pipe,
                                 callbacks=[KillAt(kill_at)] if kill_at is not None else None)
    if kill_at is not None:
        with pytest.raises(Killed):
            trainer.train()
    else:
        trainer.train(resume_from_checkpoint=resume)
    return calls, pipe, trainer


@pytest.mark.parametrize(("accumulation", "max_steps", "kill_at"), [(1, 10, 4), (1, 10, 8), (2, 5, 2)])
def test_kill_and_resume_continues_the_curriculum_exactly(tmp_path: Path, accumulation: int, max_steps: int,
                                                          kill_at: int) -> None:
    """Checkpoints every 2 optimizer steps; the run is killed after one (mid-epoch, in the second epoch, with
    gradient accumulation), and a new trainer with a new pipeline resumes from it: every generation batch after
    the checkpoint, and the pipeline's final state, are those of the uninterrupted run. (Regression: the
    curriculum restarted from the pipeline's first batch, and the Trainer's fast-forward drew batches again.)"""
    whole, whole_pipe, whole_trainer = _run(tmp_path, "whole", accumulation=accumulation, max_steps=max_steps)
    assert len(whole) == 5 and len({tuple(c) for c in whole}) > 1
    done = kill_at * accumulation // 2  # generation batches trained on before the checkpoint
    killed, _, _ = _run(tmp_path, "resumed", accumulation=accumulation, max_steps=max_steps, kill_at=kill_at)
    assert killed == whole[:done]  # the lookahead (already drawn) was never trained on
    checkpoint = tmp_path / "resumed" / f"checkpoint-{kill_at}"
    assert (checkpoint / "flexkit" / "state.json").is_file()
    resumed, pipe, trainer = _run(tmp_path, "resumed", accumulation=accumulation, max_steps=max_steps,
                                  resume=str(checkpoint))
    assert resumed == whole[done:]
    assert str(pipe.state_dict()) == str(whole_pipe.state_dict())
    assert trainer.state.global_step == max_steps
    # the running total of completions goes on from the checkpoint's (it restarted from 0: no total was saved)
    totals = [[e["flexkit/run/rollouts"] for e in t.state.log_history if "flexkit/run/rollouts" in e]
              for t in (whole_trainer, trainer)]
    assert totals[1][-1] == totals[0][-1] == len(whole) * len(whole[0])


def test_saving_between_generations_is_refused(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, ROWS, SELECTOR, batch_size=4, total_steps=5)
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ConfigError, match=r"save_steps: GRPOConfig save_steps = 1 .* make save_steps a multiple of 2"):
        FlexkitGRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                           args=grpo_args(tmp_path, max_steps=4, save_strategy="steps", save_steps=1),
                           train_dataset=Dataset.from_list(ROWS), processing_class=tokenizer, pipeline=pipe)


def test_resuming_from_a_checkpoint_without_flexkit_state_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, "run", accumulation=1, max_steps=10, kill_at=2)
    checkpoint = tmp_path / "run" / "checkpoint-2"
    import shutil

    shutil.rmtree(checkpoint / "flexkit")
    with pytest.raises(CheckpointError, match="holds no flexkit state"):
        _run(tmp_path, "run", accumulation=1, max_steps=10, resume=str(checkpoint))
