"""A CPU harness for verl's legacy ``RayPPOTrainer`` with a policy that learns: a ``Trainer(FlexkitTrainerMixin,
RayPPOTrainer)`` built without workers (``object.__new__`` + the attributes verl's methods read), whose actor worker
group is a unigram policy over a small vocabulary trained with verl's own vanilla PPO loss, one SGD step per
mini-batch of verl's own ``make_iterator``. Each step is the shape of ``RayPPOTrainer.fit``: the dataloader's
prompts, ``n`` responses each sampled from the current policy, rewards, ``old_log_probs`` from the policy that just
generated them, ``ref_log_prob`` from the initial policy, GRPO advantages from verl's ``compute_advantage``,
``_balance_batch``, then ``_update_actor`` and ``_save_checkpoint`` (verl's own methods, the mixin's overrides in
front). Used by test_verl_legacy_replay.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flexkit_verl import FlexkitSampler, FlexkitTrainerMixin, IndexedDataset, dataset_indices
from omegaconf import OmegaConf
from test_integration_verl import SIZES, Rows
from toy_policy import VOCAB, ToyPolicy, log_probs
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import collate_fn as verl_collate_fn

from flexkit import pipeline_from_dict
from flexkit.testing import jsonl_pipeline

#: Prompt width and response width of the toy rollouts.
PROMPT, RESPONSE = 3, 5


class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
    """The legacy trainer as a user builds it (docs/integrations/verl.md)."""


class PolicyWorkers(ToyPolicy):
    """The actor worker group: the toy policy trained on what ``update_actor`` receives with verl's vanilla PPO
    loss (``rollout_is_weights`` multiplied in), one SGD step per mini-batch; checkpoints hold the policy."""

    def __init__(self, lr: float = 2.0) -> None:
        super().__init__(lr)
        self._dispatch_info = {"actor": [0]}  # one data-parallel rank (verl's _get_dp_size reads it)

    def update_actor(self, td: Any) -> Any:
        record = {k: td[k].clone() for k in ("old_log_probs", "advantages", "response_mask", "responses",
                                             "ref_log_prob", "rollout_is_weights") if k in td.keys()}  # noqa: SIM118
        record["uid"] = [str(u) for u in tu.get(td, "uid")]
        record["theta"] = self.theta.clone()
        self.calls.append(record)
        for mini in tu.make_iterator(td, mini_batch_size=tu.get(td, "mini_batch_size"), epochs=tu.get(td, "epochs"),
                                     seed=tu.get(td, "seed"), dataloader_kwargs=tu.get(td, "dataloader_kwargs")):
            self.ppo_step(mini)
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.0}})


def replay_pipeline(tmp_path: Path, *, groups: int = 4, max_age: int = 2, sample: dict | None = None,
                    replay: bool = True) -> Any:
    """20 tasks in two JSONL tasksets, batches of 4 for 2 epochs (10 steps), with ``[replay]``."""
    jsonl_pipeline(tmp_path, SIZES, {"batch_size": 4})  # writes t0.jsonl, t1.jsonl
    data: dict[str, Any] = {
        "run": {"batch_size": 4, "seed": 5, "prefetch": False, "total_epochs": 2},
        "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": {"type": "shuffle"}}
                     for i in range(len(SIZES))]}
    if replay:
        data["replay"] = {"groups": groups, "max_age": max_age}
    if sample is not None:
        data["sample"] = sample
    return pipeline_from_dict(data, base_dir=tmp_path)


def verl_config(tmp_path: Path, *, n: int = 2, mini_batch: int = 2, **more: Any) -> Any:
    """The keys of verl's config that the legacy methods used here read (``more``: dotted overrides)."""
    config = OmegaConf.create({
        "data": {"train_batch_size": 4, "gen_batch_size": None, "dataloader_num_workers": 0, "val_batch_size": None,
                 "validation_shuffle": False},
        "trainer": {"total_epochs": 2, "total_training_steps": None, "resume_mode": "auto", "default_hdfs_dir": None,
                    "default_local_dir": str(tmp_path / "ckpt"), "resume_from_path": None,
                    "del_local_ckpt_after_load": False, "balance_batch": True},
        "algorithm": {"adv_estimator": "grpo"},
        "critic": {"enable": None},
        "actor_rollout_ref": {
            "rollout": {"n": n, "temperature": 1.0, "multi_turn": {"enable": False}},
            "actor": {"ppo_mini_batch_size": mini_batch, "ppo_epochs": 1, "data_loader_seed": 0, "shuffle": False,
                      "calculate_entropy": False, "entropy_coeff": 0.0, "policy_loss": {"loss_mode": "vanilla"},
                      "checkpoint": {"async_save": False}}},
    })
    for key, value in more.items():
        OmegaConf.update(config, key, value)
    return config


def legacy_trainer(config: Any, pipeline: Any, *, processor: Any = None) -> Trainer:
    """A :class:`Trainer` without workers: verl's dataloader around a :class:`FlexkitSampler` (which runs the
    construction checks), the policy worker group."""
    trainer = object.__new__(Trainer)
    trainer.config = config
    trainer.processor = processor
    dataset = IndexedDataset(Rows(sum(SIZES)))
    trainer._create_dataloader(dataset, Rows(2), verl_collate_fn, FlexkitSampler(pipeline, dataset))
    trainer.actor_rollout_wg = PolicyWorkers()
    trainer.use_critic = False
    return trainer


def reward(responses: torch.Tensor) -> torch.Tensor:
    """1 for a response whose first token is in the lower half of the vocabulary: the policy can learn it, and a
    group's answers often differ."""
    return (responses[:, 0] < VOCAB // 2).to(torch.float32)


def rollout(trainer: Trainer, indices: list[int], step: int) -> DataProto:
    """Step ``step``'s finished batch as ``fit`` hands it to ``_update_actor`` (before ``_balance_batch``)."""
    n = int(trainer.config.actor_rollout_ref.rollout.n)
    theta = trainer.actor_rollout_wg.theta
    b = len(indices) * n
    gen = torch.Generator().manual_seed(1000 + step)
    responses = torch.multinomial(torch.softmax(theta, -1), b * RESPONSE, replacement=True,
                                  generator=gen).reshape(b, RESPONSE)
    lengths = torch.randint(2, RESPONSE + 1, (b,), generator=gen)
    response_mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).to(torch.int64)
    responses = responses * response_mask
    prompts = torch.tensor([[0] * (PROMPT - 1) + [1 + i] for i in indices for _ in range(n)])
    prompt_mask = torch.ones(b, PROMPT, dtype=torch.int64)
    prompt_mask[:, 0] = 0  # left padding
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    scores = torch.zeros(b, RESPONSE)
    scores[torch.arange(b), lengths - 1] = reward(responses)
    uids = np.array([f"s{step}-p{i}" for i in indices for _ in range(n)], dtype=object)
    data = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask, "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask.to(torch.float32), "token_level_scores": scores,
        "token_level_rewards": scores.clone(), "old_log_probs": log_probs(theta, responses),
        "ref_log_prob": log_probs(torch.zeros(VOCAB), responses),
    }, non_tensors={
        "uid": uids, "data_source": np.array(["toy"] * b, dtype=object),
        "extra_info": np.array([{"flexkit_index": i, "index": 1000 + i} for i in indices for _ in range(n)],
                               dtype=object),
        "reward_model": np.array([{"ground_truth": str(i), "style": "rule"} for i in indices for _ in range(n)],
                                 dtype=object),
        "multi_modal_inputs": np.array([{} for _ in range(b)], dtype=object),
        "__num_turns__": np.full(b, 2, dtype=np.int64),
    })
    return compute_advantage(data, adv_estimator="grpo", num_repeat=n, norm_adv_by_std_in_grpo=True)


def run_steps(trainer: Trainer, steps: int, *, save: bool = True, first: int = 1,
              policies: dict[int, torch.Tensor] | None = None) -> dict[int, DataProto]:
    """``fit``'s loop for ``steps`` steps from step ``first`` (after a resume: the step after the checkpoint):
    rollout, ``_balance_batch``, ``_update_actor``, ``_save_checkpoint`` every step when ``save``. Returns each
    step's batch as ``_update_actor`` received it; ``policies`` gets the policy that generated each step."""
    batches: dict[int, DataProto] = {}
    step = first
    while step < first + steps:
        for batch_dict in trainer.train_dataloader:
            indices = dataset_indices(DataProto.from_single_dict(batch_dict).non_tensor_batch).tolist()
            if policies is not None:
                policies[step] = trainer.actor_rollout_wg.theta.clone()
            batch = rollout(trainer, indices, step)
            trainer._balance_batch(batch, metrics={})
            trainer.global_steps = step
            batches[step] = copy.deepcopy(batch)
            trainer.flexkit_last_output = trainer._update_actor(batch)
            if save:
                trainer._save_checkpoint()
            step += 1
            if step == first + steps:
                break
    return batches


def resumed_trainer(config: Any, pipeline: Any) -> Trainer:
    """A new :class:`Trainer` after verl's ``_load_checkpoint`` (``resume_mode=auto``: the latest checkpoint)."""
    trainer = legacy_trainer(config, pipeline)
    trainer._load_checkpoint()
    return trainer
