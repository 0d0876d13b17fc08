"""flexkit-rft-verl against the real verl package: DataProto round trip, verl's own policy loss with the produced
rollout_is_weights, feedback from a DataProto, the trainer mixin. The sampler inside verl's RayPPOTrainer
dataloader is tested in test_integration_verl_trainer.py.

Skipped when verl (or the flexkit-rft-verl plugin) is not installed.
"""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
flexkit_verl = pytest.importorskip("flexkit_verl")

from flexkit_verl import (  # noqa: E402
    FlexkitSampler,
    FlexkitTrainerMixin,
    IndexedDataset,
    apply_token_weights,
    dataset_indices,
)
from verl import DataProto  # noqa: E402 - after the skips
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from flexkit import FeedbackError  # noqa: E402
from flexkit.testing import jsonl_pipeline  # noqa: E402

SIZES = (12, 8)
SELECT = {"mechanism": "select", "estimator": "grpo",
          "scorer": {"type": "group_solve_rate", "success_threshold": 0.5},
          "actuator": {"type": "threshold_band", "low": 0.3, "high": 0.7}}
REWEIGHT = {"mechanism": "reweight", "estimator": "grpo", "scorer": {"type": "reward"},
            "actuator": {"type": "softmax", "temperature": 0.5}}


def make_pipeline(tmp_path: Path, sample: dict | None = None, *, selector: str = "difficulty_based"):
    run = {"batch_size": 4, "seed": 5, "prefetch": False, "total_epochs": 6}
    return jsonl_pipeline(tmp_path, SIZES, run, selector=selector, sample=sample)


def reward_of(index: int, response: int, step: int = 0) -> float:
    """A deterministic 0/1 reward per (dataset index, response number, step)."""
    return float((index * 31 + response * 17 + step * 7) % 3 == 0)


def rollout(indices: list[int], n: int, *, step: int = 0, length: int = 6, prompt: int = 3,
            rewards: list[float] | None = None, is_weights: bool = True) -> DataProto:
    """A DataProto shaped like verl's batch at the actor update: prompts repeated ``n`` times (interleaved)
    with uid groups, responses of varying length, token-level scores on the last response token, GRPO
    advantages from verl's own estimator, and (optionally) verl rollout-correction weights."""
    gen = torch.Generator().manual_seed(len(indices) * 100 + step)
    b = len(indices) * n
    lengths = torch.randint(2, length + 1, (b,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float32)
    if rewards is None:
        rewards = [reward_of(i, r, step) for i in indices for r in range(n)]
    scores = torch.zeros(b, length)
    scores[torch.arange(b), lengths - 1] = torch.tensor(rewards, dtype=torch.float32)
    uids = np.array([u for u in (str(uuid.uuid4()) for _ in indices) for _ in range(n)], dtype=object)
    extra = np.array([{"flexkit_index": i, "split": "train"} for i in indices for _ in range(n)], dtype=object)
    tensors = {
        "prompts": torch.randint(0, 50, (b, prompt), generator=gen),
        "responses": torch.randint(0, 50, (b, length), generator=gen),
        "attention_mask": torch.cat([torch.ones(b, prompt), mask], dim=1).long(),
        "response_mask": mask,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
        "old_log_probs": -torch.rand(b, length, generator=gen),
    }
    if is_weights:
        tensors["rollout_is_weights"] = (0.5 + torch.rand(b, length, generator=gen)) * mask
    advantages, returns = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=tensors["token_level_rewards"], response_mask=mask, index=uids)
    tensors["advantages"], tensors["returns"] = advantages, returns
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids, "extra_info": extra,
                                                             "data_source": np.array(["toy"] * b, dtype=object)})


def verl_policy_loss_grad(data: DataProto, weights: torch.Tensor | None) -> torch.Tensor:
    """d(loss)/d(log_prob) of verl's own vanilla PPO policy loss at log_prob = old_log_probs + small noise."""
    config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1)
    old = data.batch["old_log_probs"]
    log_prob = (old + 0.01 * torch.sin(torch.arange(old.numel()).reshape(old.shape).float())).requires_grad_(True)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")
    loss, _metrics = loss_fn(old_log_prob=old, log_prob=log_prob, advantages=data.batch["advantages"],
                             response_mask=data.batch["response_mask"], loss_agg_mode="token-mean", config=config,
                             rollout_is_weights=weights)
    loss.backward()
    return log_prob.grad


# -- the sample stage on a DataProto ----------------------------------------------------------------------


def test_select_drops_groups_through_verl_policy_loss_and_keeps_verl_weights(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, SELECT)
    data = rollout([0, 3, 14, 7], n=4, rewards=[1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    verl_weights = data.batch["rollout_is_weights"].clone()
    untouched = {k: data.batch[k].clone() for k in data.batch.keys() if k != "rollout_is_weights"}  # noqa: SIM118
    weights = apply_token_weights(pipe, data, step=3)
    keep = torch.tensor([0.0] * 4 + [1.0] * 4 + [0.0] * 8)  # solve rates 1, .5, 0, .25: only .5 is in (.3, .7)
    assert torch.equal(data.batch["rollout_is_weights"], weights)
    assert torch.equal(weights, verl_weights * keep[:, None])  # multiplied, never overwritten
    for key, value in untouched.items():
        assert torch.equal(data.batch[key], value), key
    grad_weighted = verl_policy_loss_grad(data, data.batch["rollout_is_weights"])
    grad_verl = verl_policy_loss_grad(data, verl_weights)
    dropped, kept = keep == 0, keep == 1
    assert (grad_weighted[dropped] == 0).all()
    assert (grad_verl[dropped] != 0).any()  # the drop is what zeroes them
    assert torch.equal(grad_weighted[kept], grad_verl[kept])
    assert (grad_weighted[kept] != 0).any()


def test_reweight_scales_the_gradient_of_verl_policy_loss(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, REWEIGHT)
    data = rollout([1, 2, 15], n=4, rewards=[1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1])
    verl_weights = data.batch["rollout_is_weights"].clone()
    weights = apply_token_weights(pipe, data, step=0)
    per_sample = pipe.sample_stage.last_action.weights
    assert not torch.allclose(per_sample, torch.ones_like(per_sample))  # a real reweighting
    grad_weighted = verl_policy_loss_grad(data, weights)
    grad_verl = verl_policy_loss_grad(data, verl_weights)
    torch.testing.assert_close(grad_weighted, grad_verl * per_sample[:, None].to(grad_verl.dtype))


def test_weights_are_created_when_verl_made_none(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, SELECT)
    data = rollout([0, 3], n=2, rewards=[1, 0, 1, 1], is_weights=False)
    weights = apply_token_weights(pipe, data, step=0)
    mask = data.batch["response_mask"]
    assert weights.dtype == torch.float32
    assert torch.equal(data.batch["rollout_is_weights"], torch.cat([mask[:2], 0 * mask[2:]]))
    grad = verl_policy_loss_grad(data, data.batch["rollout_is_weights"])
    assert (grad[2:] == 0).all() and (grad[:2] != 0).any()


def test_dataproto_round_trip_after_weighting(tmp_path: Path) -> None:
    """The weighted batch is still a valid DataProto: consistency, pickling (how verl ships it to workers),
    chunk/concat across data-parallel ranks, reorder (balance_batch) and repeat keep weights with their rows."""
    pipe = make_pipeline(tmp_path, SELECT)
    data = rollout([0, 3, 14, 7], n=2, rewards=[1, 0, 1, 1, 0, 1, 0, 0])
    apply_token_weights(pipe, data, step=0)
    data.check_consistency()
    back = pickle.loads(pickle.dumps(data))
    for key in data.batch.keys():  # noqa: SIM118 - TensorDict iterates rows
        assert torch.equal(back.batch[key], data.batch[key])
    assert back.non_tensor_batch["extra_info"].tolist() == data.non_tensor_batch["extra_info"].tolist()
    rejoined = DataProto.concat(data.chunk(2))
    assert torch.equal(rejoined.batch["rollout_is_weights"], data.batch["rollout_is_weights"])
    perm = torch.tensor([7, 2, 5, 0, 1, 6, 3, 4])
    reordered = pickle.loads(pickle.dumps(data))
    reordered.reorder(perm)
    assert torch.equal(reordered.batch["rollout_is_weights"], data.batch["rollout_is_weights"][perm])
    assert dataset_indices(reordered.non_tensor_batch).tolist() == [7, 3, 14, 0, 0, 7, 3, 14]


def test_mix_stage_sets_proportions_without_touching_the_batch(tmp_path: Path) -> None:
    mix = {"mechanism": "mix", "estimator": "grpo", "scorer": {"type": "reward"},
           "actuator": {"type": "reward_gap"}}
    pipe = make_pipeline(tmp_path, mix)
    data = rollout([0, 1, 14, 15], n=2, rewards=[1, 1, 1, 0, 0, 0, 0, 1])
    before = data.batch["rollout_is_weights"].clone()
    assert apply_token_weights(pipe, data, step=0) is None
    assert torch.equal(data.batch["rollout_is_weights"], before)
    assert pipe.scheduler.mix is not None  # taskset_id came from the dataset indices


# -- the sampler ---------------------------------------------------------------------------------------


def test_update_feeds_uid_group_means_to_the_right_tasksets(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    data = rollout([14, 2, 2], n=4, rewards=[1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1])
    data.reorder(torch.randperm(12, generator=torch.Generator().manual_seed(0)))  # balance_batch shuffles rows
    metrics = sampler.update(data)
    # dataset 14 -> taskset 1 index 2 (mean 3/4); dataset 2 twice as two uid groups (1/4 and 1) -> mean 5/8
    got = {t: dict(zip(p["indices"], p["values"], strict=True)) for t, p in metrics["selector_metric"].items()}
    assert got == {1: {2: 0.75}, 0: {2: 0.625}}


def test_regression_the_sampler_counts_the_responses_fed_back_across_a_resume(tmp_path: Path) -> None:
    """verl's logs had only each step's responses (``flexkit/rollouts``); the sampler now keeps their running
    total in its state (verl's ``data.pt``), which the adapters log as ``flexkit/run/rollouts``."""
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    sampler.update(rollout([14, 2, 2], n=4))
    sampler.update(rollout([1, 5], n=4, step=1))
    assert sampler.rollouts == 20
    resumed = FlexkitSampler(make_pipeline(tmp_path))
    resumed.load_state_dict(pickle.loads(pickle.dumps(sampler.state_dict())))
    resumed.update(rollout([3], n=4, step=2))
    assert resumed.rollouts == 24
    old = {k: v for k, v in sampler.state_dict().items() if k != "rollouts"}  # saved before they were counted
    resumed.load_state_dict(old)
    resumed.update(rollout([3], n=4, step=3))
    assert resumed.rollouts is None  # unknown: not logged rather than counted from 0


def test_update_rejects_batches_it_cannot_attribute(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    data = rollout([1, 2], n=2)
    data.non_tensor_batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    data.non_tensor_batch["extra_info"] = np.array([{"flexkit_index": i} for i in (1, 2, 2, 2)], dtype=object)
    with pytest.raises(FeedbackError, match="one uid must be one prompt"):
        sampler.update(data)
    data.non_tensor_batch["extra_info"] = np.array([{}] * 4, dtype=object)
    with pytest.raises(FeedbackError, match="IndexedDataset"):
        sampler.update(data)


class Rows(torch.utils.data.Dataset):
    """Rows shaped like verl's RLHFDataset output (a tensor, raw fields, extra_info)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.full((3,), i), "data_source": "toy", "extra_info": {"index": 1000 + i}}


# -- the trainer mixin ---------------------------------------------------------------------------------


def test_mixin_feeds_back_and_weights_before_verl_update(tmp_path: Path) -> None:
    class Base:
        def _update_actor(self, batch):
            self.seen = batch.batch["rollout_is_weights"].clone()
            return "updated"

    class Trainer(FlexkitTrainerMixin, Base):
        pass

    pipe = make_pipeline(tmp_path, SELECT)
    sampler = FlexkitSampler(pipe, IndexedDataset(Rows(20)))
    trainer = Trainer()
    trainer.train_dataloader = SimpleNamespace(sampler=sampler)
    trainer.global_steps = 4
    data = rollout([0, 3], n=2, rewards=[1, 1, 1, 0])
    verl_weights = data.batch["rollout_is_weights"].clone()
    before = sampler.state_dict()["pipeline"]["scheduler"]["selectors"][0]
    assert trainer._update_actor(data) == "updated"
    assert torch.equal(trainer.seen[:2], 0 * verl_weights[:2]) and torch.equal(trainer.seen[2:], verl_weights[2:])
    after = sampler.state_dict()["pipeline"]["scheduler"]["selectors"][0]
    assert str(before) != str(after)  # the difficulty_based posterior learned from the batch
    assert sampler.rollouts == 4


def test_indexed_dataset_adds_the_index_without_touching_the_rows() -> None:
    rows = [{"prompt": "a", "extra_info": {"index": 5}}, {"prompt": "b"}]
    wrapped = pickle.loads(pickle.dumps(IndexedDataset(rows)))  # spawned loader workers pickle the dataset
    assert wrapped[0] == {"prompt": "a", "extra_info": {"index": 5, "flexkit_index": 0}}
    assert wrapped[1] == {"prompt": "b", "extra_info": {"flexkit_index": 1}}
    assert rows[0] == {"prompt": "a", "extra_info": {"index": 5}} and len(wrapped) == 2
    with pytest.raises(TypeError, match="dicts"):
        IndexedDataset([1, 2])[0]
