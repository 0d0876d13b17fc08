"""``[replay]`` inside GRPOTrainer: replayed rows are weighed against the policy that generated them, nothing TRL
hands its loss is dropped, the metrics reach TRL's log, and a kill and resume with a full buffer continues
exactly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

trl = pytest.importorskip("trl")
pytest.importorskip("flexkit_trl")

from datasets import Dataset  # noqa: E402 - after the skips
from flexkit_trl import FlexkitGRPOTrainer  # noqa: E402
from flexkit_trl.replay import loss_mask  # noqa: E402
from flexkit_trl.support import trainer_support  # noqa: E402
from test_trl_resume import KillAt, Killed  # noqa: E402
from trl_harness import grouped_rows, grpo_args, pipeline, tiny_model_and_tokenizer  # noqa: E402

import flexkit  # noqa: E402
from flexkit import ConfigError  # noqa: E402
from flexkit.host import check_support  # noqa: E402

ROWS = grouped_rows(12, "level", [1, 2, 3])
REPLAY = {"replay": {"groups": 4, "max_age": 2}}


def _mixed_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """1 for a completion with an even number of characters: the two answers of a prompt often differ."""
    return [float(len(c) % 2 == 0) for c in completions]


def _trainer(tmp_path: Path, *, extra: dict[str, Any] | None = None, **overrides: Any) -> FlexkitGRPOTrainer:
    pipe = pipeline(tmp_path, ROWS, {"type": "sequential"}, batch_size=4, total_steps=6,
                    extra=REPLAY if extra is None else extra)
    model, tokenizer = tiny_model_and_tokenizer()
    return FlexkitGRPOTrainer(model=model, reward_funcs=_mixed_reward, train_dataset=Dataset.from_list(ROWS),
                              processing_class=tokenizer, pipeline=pipe,
                              args=grpo_args(tmp_path, max_steps=12, **overrides))


def _log_probs(trainer: FlexkitGRPOTrainer, model: Any, batch: dict[str, Any]) -> torch.Tensor:
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, batch["completion_ids"].size(1))
    return logps


def _generate(trainer: FlexkitGRPOTrainer, sampler_iter: Any, seed: int) -> dict[str, Any]:
    rows = [trainer.train_dataset[next(sampler_iter)] for _ in range(trainer.args.generation_batch_size)]
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(rows)


def _informative_rows(batch: dict[str, Any], num_generations: int) -> np.ndarray:
    advantages = batch["advantages"].reshape(len(batch["advantages"]), -1)
    has = ((advantages != 0) & (loss_mask(batch) != 0)).any(dim=1).numpy()
    groups = has.reshape(-1, num_generations).any(axis=1)
    return np.flatnonzero(np.repeat(groups, num_generations))


def test_replayed_rows_are_weighed_against_the_policy_that_generated_them(tmp_path: Path) -> None:
    """Generation batch 2 trains on batch 1's informative groups again; their old_per_token_logps are the
    log-probabilities of the policy that generated them (a saved copy), not of the policy that trains on them
    (it moved by an optimizer step in between), and every row reaches TRL's loss. Fails when replay hands TRL the
    current policy's log-probabilities (a ratio of 1: treated as on-policy), or none."""
    trainer = _trainer(tmp_path)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    it = iter(trainer._get_train_sampler(trainer.train_dataset))
    first = _generate(trainer, it, seed=1)
    assert first["prompt_ids"].shape[0] == 8  # no stored group yet: the fresh rows only
    generating = copy.deepcopy(trainer.model)
    assert torch.allclose(first["old_per_token_logps"], _log_probs(trainer, generating, first), atol=1e-6)
    informative = _informative_rows(first, 2)
    assert informative.size  # the mixed reward makes some groups informative

    optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    trainer._compute_loss(trainer.model, first).backward()
    optimizer.step()
    optimizer.zero_grad()

    second = _generate(trainer, it, seed=2)
    stored = informative[: 2 * 4]  # at most `groups` groups, newest first
    replayed = slice(8, None)
    assert second["prompt_ids"].shape[0] == 8 + len(stored)
    assert second["prompt_ids"].shape[0] % trainer.args.steps_per_generation == 0  # TRL's even split drops nothing
    width = first["completion_ids"].shape[1]
    assert torch.equal(second["completion_ids"][replayed, :width], first["completion_ids"][stored])
    mask = loss_mask(second)[replayed].bool()
    behaviour = _log_probs(trainer, generating, {k: second[k][replayed] for k in
                                                 ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})
    now = _log_probs(trainer, trainer.model, {k: second[k][replayed] for k in
                                              ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})
    old = second["old_per_token_logps"][replayed]
    assert torch.allclose(old[mask], behaviour[mask], atol=1e-5)
    assert (old[mask] - now[mask]).abs().max() > 1e-3  # the policy moved: the replayed ratio is not 1
    advantages = second["advantages"][replayed]  # (B, T) with replay: each row's advantage on every token
    assert torch.equal(advantages[:, :width], first["advantages"][stored])
    assert int(second["num_items_in_batch"]) == int(loss_mask(second).sum())
    assert trainer.flexkit_replay is not None
    assert trainer.flexkit_replay.buffer.last_responses == len(stored)


def test_replay_runs_through_train_and_its_metrics_reach_the_log(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    trainer.train()
    replayed = [entry["flexkit/replay/groups"] for entry in trainer.state.log_history
                if "flexkit/replay/groups" in entry]
    assert replayed and max(replayed) > 0
    assert all(entry["flexkit/replay/responses"] == 2 * entry["flexkit/replay/groups"]
               for entry in trainer.state.log_history if "flexkit/replay/groups" in entry)


def _run(tmp_path: Path, out: str, *, kill_at: int | None = None,
         resume: str | None = None) -> tuple[list[list[int]], FlexkitGRPOTrainer]:
    calls: list[list[int]] = []

    def reward(completions: list[str], flexkit_index: list[int], **kwargs: Any) -> list[float]:
        calls.append(list(flexkit_index))
        return _mixed_reward(completions)

    pipe = pipeline(tmp_path, ROWS, {"type": "sequential"}, batch_size=4, total_steps=6, extra=REPLAY)
    model, tokenizer = tiny_model_and_tokenizer()
    args = grpo_args(tmp_path, output_dir=str(tmp_path / out), max_steps=12, save_strategy="steps", save_steps=2)
    trainer = FlexkitGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(ROWS),
                                 processing_class=tokenizer, pipeline=pipe,
                                 callbacks=[KillAt(kill_at)] if kill_at is not None else None)
    if kill_at is not None:
        with pytest.raises(Killed):
            trainer.train()
    else:
        trainer.train(resume_from_checkpoint=resume)
    return calls, trainer


def _buffer(trainer: FlexkitGRPOTrainer) -> dict[str, Any]:
    assert trainer.flexkit_replay is not None
    return trainer.flexkit_replay.state_dict()


def test_kill_and_resume_with_a_full_buffer_continues_exactly(tmp_path: Path) -> None:
    """Killed after generation batch 3 (its checkpoint holds a buffer of stored groups), resumed by a new trainer:
    the batches after it, the replay metrics, the buffer and the model at the end are the uninterrupted run's."""
    whole_calls, whole = _run(tmp_path, "whole")
    killed_calls, killed = _run(tmp_path, "resumed", kill_at=6)
    assert killed.flexkit_replay is not None and killed.flexkit_replay.buffer.stored_groups > 0
    resumed_calls, resumed = _run(tmp_path, "resumed", resume=str(tmp_path / "resumed" / "checkpoint-6"))
    assert killed_calls + resumed_calls == whole_calls
    whole_state, resumed_state = _buffer(whole), _buffer(resumed)
    assert np.array_equal(whole_state["born"], resumed_state["born"])
    assert whole_state["columns"].keys() == resumed_state["columns"].keys()
    for name, value in whole_state["columns"].items():
        assert np.array_equal(value, resumed_state["columns"][name]), name

    def replay_log(trainer: FlexkitGRPOTrainer) -> list[tuple[int, float]]:
        return [(e["step"], e["flexkit/replay/responses"]) for e in trainer.state.log_history
                if "flexkit/replay/responses" in e]

    assert replay_log(resumed)[-3:] == replay_log(whole)[-3:]
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_replay_on_more_than_one_process_is_refused_by_the_host_rule(tmp_path: Path) -> None:
    pipe = flexkit.pipeline_from_dict({"run": {"batch_size": 2, "seed": 0, "total_steps": 2},
                                       "tasksets": [{"name": "t", "storage_type": "simulated", "size": 8,
                                                     "selector": {"type": "random"}}],
                                       "replay": {"groups": 1, "max_age": 1}}, base_dir=tmp_path)
    check_support(pipe, trainer_support(None, processes=1))
    with pytest.raises(ConfigError, match=r"replay: FlexkitGRPOTrainer \(TRL\) does not honour this.*this run has 2 "
                                          r"processes.*remove the \[replay\] table"):
        check_support(pipe, trainer_support(None, processes=2))
