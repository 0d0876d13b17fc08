"""The pipeline's ``[sample]`` stage inside GRPOTrainer: keep / weights reach GRPO's loss, a dropped group gets
exactly zero gradient, and what TRL cannot do (refills) is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

trl = pytest.importorskip("trl")
pytest.importorskip("flexkit_trl")

from datasets import Dataset  # noqa: E402 - after the skips
from flexkit_trl import FlexkitGRPOTrainer  # noqa: E402
from trl_harness import grouped_rows, grpo_args, pipeline, tiny_model_and_tokenizer  # noqa: E402

from flexkit import ConfigError  # noqa: E402

ROWS = grouped_rows(8, "level", [1, 2])
#: Drops the groups whose answers are all solved (level 1 below), keeps the others.
BAND = {"mechanism": "select", "scorer": {"type": "group_solve_rate"},
        "actuator": {"type": "pass_rate_band", "low": 0.0, "high": 0.5}}


def _reward(completions: list[str], level: list[int], **kwargs: Any) -> list[float]:
    return [1.0 if lv == 1 else 0.0 for lv in level]


def _trainer(tmp_path: Path, sample: dict[str, Any] | None, **overrides: Any) -> FlexkitGRPOTrainer:
    tmp_path.mkdir(parents=True, exist_ok=True)
    extra = {"sample": sample} if sample is not None else {}
    pipe = pipeline(tmp_path, ROWS, {"type": "sequential"}, batch_size=4, total_steps=2, extra=extra)
    model, tokenizer = tiny_model_and_tokenizer()
    if overrides.get("beta"):  # TRL builds the reference model from the model's path
        model.save_pretrained(tmp_path / "tiny")
        model = str(tmp_path / "tiny")
    return FlexkitGRPOTrainer(model=model, reward_funcs=_reward, train_dataset=Dataset.from_list(ROWS),
                              processing_class=tokenizer, pipeline=pipe,
                              args=grpo_args(tmp_path, max_steps=4, **overrides))


def _generation_batch(trainer: FlexkitGRPOTrainer) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first generation batch's rows, and the batch as TRL's loss gets it (before the shuffle and split);
    completions sampled from a fixed seed."""
    sampler = trainer._get_train_sampler(trainer.train_dataset)
    it = iter(sampler)
    rows = [trainer.train_dataset[next(it)] for _ in range(trainer.args.generation_batch_size)]
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    torch.manual_seed(1)
    return rows, trainer._generate_and_score_completions(rows)


def _grads(trainer: FlexkitGRPOTrainer, batch: dict[str, Any]) -> list[torch.Tensor]:
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, batch).backward()
    return [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]


def _perturbed(batch: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """``batch`` with other advantages and reference log-probabilities (the KL term) on ``rows``."""
    out = dict(batch)
    out["advantages"] = batch["advantages"].clone()
    out["advantages"][rows] += 3.0
    out["ref_per_token_logps"] = batch["ref_per_token_logps"].clone()
    out["ref_per_token_logps"][rows] -= 2.0
    return out


def test_a_dropped_group_gets_exactly_zero_gradient(tmp_path: Path) -> None:
    """With a KL term (beta > 0) a group of all-solved answers still moves the policy under TRL (zero advantage,
    non-zero KL gradient); the stage drops it, and the loss's gradient no longer depends on anything of its rows,
    while it still does on the kept rows'."""
    trainer = _trainer(tmp_path, BAND, beta=0.1)
    rows, batch = _generation_batch(trainer)
    assert trainer.flexkit_pipeline.sample_stage.kept_fraction == pytest.approx(0.5)
    levels = torch.tensor([row["level"] for row in rows])
    assert set(levels.tolist()) == {1, 2}
    dropped, kept = torch.nonzero(levels == 1).flatten(), torch.nonzero(levels == 2).flatten()
    assert (batch["tool_mask"][dropped] == 0).all()
    assert (batch["tool_mask"][kept] == batch["completion_mask"][kept]).all()
    base = _grads(trainer, batch)
    assert all(torch.equal(a, b) for a, b in zip(base, _grads(trainer, _perturbed(batch, dropped)), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(base, _grads(trainer, _perturbed(batch, kept)), strict=True))
    # without the stage's mask the dropped rows' KL would move the policy: what the test above rules out
    plain = {k: v for k, v in batch.items() if k != "tool_mask"}
    assert not all(torch.equal(a, b) for a, b in
                   zip(_grads(trainer, plain), _grads(trainer, _perturbed(plain, dropped)), strict=True))


def test_reweighting_scales_each_rows_advantage(tmp_path: Path) -> None:
    """A reweight stage's weights multiply TRL's advantages, row by row; positive weights keep every token in
    the loss."""
    reweight = {"mechanism": "reweight", "scorer": {"type": "group_solve_rate"},
                "actuator": {"type": "softmax", "temperature": 0.5}}
    trainer = _trainer(tmp_path, reweight)
    _, batch = _generation_batch(trainer)
    _, plain = _generation_batch(_trainer(tmp_path / "plain", None))
    weights = trainer.flexkit_pipeline.sample_stage.last_action.weights
    assert weights.shape == (8,) and len(set(weights.tolist())) == 2  # one weight per level
    mask = batch["completion_mask"]
    assert torch.equal(batch["completion_mask"], plain["completion_mask"])  # the same completions
    assert torch.allclose(batch["advantages"], plain["advantages"][:, None] * weights[:, None] * mask)
    assert torch.equal(batch["tool_mask"], mask.to(batch["tool_mask"].dtype))


def test_the_stage_runs_during_training_and_is_logged(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, BAND)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert logged and all(e["flexkit/sample/kept_fraction"] == pytest.approx(0.5) for e in logged)
    assert trainer.flexkit_pipeline.sample_stage.last_step == 1  # two generation batches: steps 0 and 1


def test_refills_are_refused(tmp_path: Path) -> None:
    """Regression: a [sample] table used to be refused whole; now only [sample.refill] is, with what to do."""
    with pytest.raises(ConfigError, match=r"sample.refill: FlexkitGRPOTrainer \(TRL\) does not honour this.*"
                                          r"Remove \[sample.refill\]"):
        _trainer(tmp_path, {**BAND, "refill": {}})
