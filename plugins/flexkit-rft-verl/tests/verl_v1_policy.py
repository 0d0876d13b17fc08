"""A v1 trainer with a policy that learns, on CPU, for test_verl_v1_replay.py: verl's composed config and
``PPOTrainerSync`` with :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` (verl_v1_harness.py), whose actor
worker group is a unigram policy over a small vocabulary trained with verl's own vanilla PPO loss on what
``update_actor`` reads from TransferQueue, one SGD step per mini-batch. Each step is the shape of verl's
``_step_once``: the dataloader's prompts, ``n`` trajectories each sampled from the current policy and stored in
TransferQueue with their rewards, verl's replay-buffer ``sample`` (flexkit's feedback), verl's ``_balance_batch``
(its padding rows when a group is incomplete), ``old_log_probs`` (the policy that just generated them) and
``ref_log_prob`` (the initial policy) written as verl's methods write them, verl's ``_compute_advantage`` (GRPO) and
``_update_actor``, then verl's ``_save_checkpoint`` and the ``kv_clear`` of ``fit``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import transfer_queue as tq
from flexkit_verl.trainer_v1 import flexkit_trainer_class
from toy_policy import VOCAB, ToyPolicy, log_probs
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl_v1_harness import FakeTQ, v1_trainer, verl_config

#: The longest response of the toy rollouts.
RESPONSE = 5
#: The fields each update_actor call records.
RECORDED = ("old_log_probs", "advantages", "response_mask", "responses", "ref_log_prob")


def _padded(value: Any) -> torch.Tensor:
    padded: torch.Tensor = value.to_padded_tensor(0) if value.is_nested else value
    return padded


class PolicyWorkers(ToyPolicy):
    """The actor worker group: the toy policy trained on the trajectories ``update_actor``'s ``KVBatchMeta`` names
    (read from TransferQueue as a worker does) with verl's vanilla PPO loss, one SGD step per mini-batch;
    checkpoints hold the policy."""

    def __init__(self, lr: float = 2.0) -> None:
        super().__init__(lr)
        self._dispatch_info = {"actor": [0]}  # one data-parallel rank (verl's _balance_batch reads it)

    def update_actor(self, meta: Any) -> Any:
        data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=meta.fields)
        record: dict[str, Any] = {k: _padded(data[k]).clone() for k in RECORDED}
        record["uid"] = [str(getattr(u, "data", u)) for u in data["uid"]]
        record["index"] = [int(getattr(e, "data", e)["flexkit_index"]) for e in data["extra_info"]]
        record["keys"] = list(meta.keys)
        record["is_padding"] = [bool(t.get("is_padding", False)) for t in meta.tags]
        record["theta"] = self.theta.clone()
        self.calls.append(record)
        mini = int(meta.extra_info["mini_batch_size"])
        assert len(meta.keys) % mini == 0, "verl's actor trains whole mini-batches"
        for start in range(0, len(meta.keys), mini):
            self.ppo_step({k: record[k][start:start + mini] for k in RECORDED})
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.0}})


def replay_pipeline(tmp_path: Path, *, groups: int = 4, max_age: int = 2) -> Path:
    """examples/verl's taskset and run length, Thompson selection, ``[replay]``, no sample stage."""
    data = Path(__file__).resolve().parents[3] / "examples" / "verl" / "data" / "train.parquet"
    path = tmp_path / "replay.toml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[run]\nbatch_size = 4\nseed = 0\ntotal_epochs = 2\n\n[[tasksets]]\nname = "arithmetic"\n'
                    f'path = "{data}"\n\n[tasksets.selector]\ntype = "thompson_target"\ntarget = 0.5\n\n'
                    f'[replay]\ngroups = {groups}\nmax_age = {max_age}\n')
    return path


def policy_trainer(tmp_path: Path, monkeypatch: Any, *overrides: str, groups: int = 4, max_age: int = 2,
                   store: FakeTQ | None = None) -> Any:
    """A v1 trainer with the mixin, ``[replay]``, checkpoints in ``tmp_path / "ckpt"`` every step and the policy
    worker group (``store``: the TransferQueue stand-in to use, else a new one)."""
    (store or FakeTQ()).install(monkeypatch)
    config = verl_config(tmp_path, "trainer.resume_mode=auto", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                         *overrides, pipeline=replay_pipeline(tmp_path, groups=groups, max_age=max_age))
    trainer = v1_trainer(flexkit_trainer_class(PPOTrainerSync), config)
    trainer.actor_rollout_wg = PolicyWorkers()
    trainer.tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0)  # verl's padding rows end with it
    return trainer


def reward(responses: torch.Tensor) -> float:
    """1 for a response whose first token is in the lower half of the vocabulary."""
    return float(responses[0] < VOCAB // 2)


def _put_log_probs(trainer: Any, meta: Any) -> None:
    """What verl's ``_compute_old_log_prob`` and ``_compute_ref_log_prob`` write for every key of ``meta``
    (verl's padding rows included): ``old_log_probs`` of the current policy, ``ref_log_prob`` of the initial one."""
    from tensordict import TensorDict

    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["responses"])
    responses = list(data["responses"].unbind()) if data["responses"].is_nested else list(data["responses"])
    theta = trainer.actor_rollout_wg.theta
    fields = {name: torch.nested.as_nested_tensor([log_probs(policy, r) for r in responses], layout=torch.jagged)
              for name, policy in (("old_log_probs", theta), ("ref_log_prob", torch.zeros(VOCAB)))}
    tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id,
                    fields=TensorDict(fields, batch_size=len(meta.keys)))


def step(trainer: Any, number: int, policies: dict[int, torch.Tensor] | None = None, *,
         incomplete: bool = False) -> Any:
    """One v1 step ``number`` (see the module docstring); returns the batch verl's step gets back. ``incomplete``:
    the first prompt's last trajectory is missing (an agent loop that failed), so verl pads the batch."""
    trainer.global_steps = number
    n = int(trainer.config.actor_rollout_ref.rollout.n)
    theta = trainer.actor_rollout_wg.theta
    if policies is not None:
        policies[number] = theta.clone()
    batch = trainer._next_train_batch()
    gen = torch.Generator().manual_seed(1000 + number)
    for p, (uid, extra) in enumerate(zip(list(batch["uid"]), list(batch["extra_info"]), strict=True)):
        tq.kv_batch_put(keys=[uid], partition_id="train",
                        tags=[{"is_prompt": True, "status": "finished", "global_steps": number}])
        keys, rows = [], []
        index = int(extra["flexkit_index"])
        # a system message on some prompts: non-tensor lists of different lengths, as verl's raw_prompt holds
        raw_prompt = [{"role": "system", "content": "add"}] * (index % 2) + [{"role": "user", "content": str(index)}]
        for s in range(n - 1 if incomplete and p == 0 else n):
            length = int(torch.randint(2, RESPONSE + 1, (1,), generator=gen))
            responses = torch.multinomial(torch.softmax(theta, -1), length, replacement=True, generator=gen)
            scores = torch.zeros(length)
            scores[-1] = reward(responses)
            prompt = torch.tensor([1, 2 + index % 5])
            keys.append(f"{uid}_{s}_0")
            # the fields verl's padding template sets too (a real batch holds the same fields in every row)
            rows.append({"uid": uid, "extra_info": dict(extra), "data_source": "toy", "raw_prompt": raw_prompt,
                         "responses": responses, "prompts": prompt, "input_ids": torch.cat([prompt, responses]),
                         "attention_mask": torch.ones(2 + length, dtype=torch.int64),
                         "position_ids": torch.arange(2 + length), "num_turns": 2,
                         "response_mask": torch.ones(length, dtype=torch.int64),
                         "loss_mask": torch.ones(length, dtype=torch.int64), "rm_scores": scores,
                         "rollout_log_probs": log_probs(theta, responses)})
        tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows),
                        tags=[{"status": "success", "global_steps": number, "seq_len": 2 + len(r["responses"])}
                              for r in rows])
    metrics: dict[str, Any] = {}
    meta, sampled = trainer.replay_buffer.sample(global_steps=number, partition_id="train", batch_size=4)
    metrics.update(sampled)
    meta = trainer._balance_batch(meta, metrics=metrics)  # verl's own: pads to whole mini-batches, balances
    _put_log_probs(trainer, meta)
    meta = trainer._compute_advantage(meta, metrics=metrics)
    meta = trainer._update_actor(meta, metrics=metrics)
    trainer.last_metrics = metrics
    trainer._save_checkpoint()
    tq.kv_clear(keys=meta.keys, partition_id=meta.partition_id)  # fit's cleanup
    return meta


def run_steps(trainer: Any, steps: range, policies: dict[int, torch.Tensor] | None = None, *,
              incomplete: bool = False) -> list[Any]:
    """:func:`step` for each step number in ``steps``."""
    return [step(trainer, number, policies, incomplete=incomplete) for number in steps]
