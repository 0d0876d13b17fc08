"""A CPU harness for verl's v1 trainer: an in-memory stand-in for TransferQueue's four ``kv_*`` calls, verl's
composed Hydra config, and a ``PPOTrainerSync`` built without GPUs (``object.__new__`` + the attributes verl's
methods read), used by test_integration_verl_v1.py."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import transfer_queue as tq
from hydra import compose, initialize_config_module
from transfer_queue.metadata import KVBatchMeta
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl"


class FakeTQ:
    """TransferQueue's key-value calls over dicts: tags and per-key fields, rows split and re-batched with
    verl's own ``list_of_dict_to_tensordict`` (jagged tensors, NonTensorStack), as the real store returns."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)
        self.fields: dict[str, dict[str, dict]] = defaultdict(dict)

    def install(self, monkeypatch: Any) -> FakeTQ:
        for name in ("kv_list", "kv_batch_get", "kv_batch_put", "kv_clear"):
            monkeypatch.setattr(tq, name, getattr(self, name))
        return self

    def kv_list(self, partition_id: str | None = None) -> dict:
        parts = [partition_id] if partition_id else list(self.tags)
        return {p: {k: dict(t) for k, t in self.tags[p].items()} for p in parts}

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: Any = None, tags: list | None = None) -> Any:
        """Store ``fields`` and ``tags`` per key; returns a ``KVBatchMeta`` with the keys' stored tags and every
        field they hold, as TransferQueue's ``kv_batch_put`` does."""
        for i, key in enumerate(keys):
            self.tags[partition_id].setdefault(key, {}).update(tags[i] if tags else {})
            if fields is not None:
                row = self.fields[partition_id].setdefault(key, {})
                for name in fields.keys():  # noqa: SIM118 - iterating a TensorDict walks rows
                    value = fields[name]
                    item = value[i]
                    row[name] = item if isinstance(value, torch.Tensor) else getattr(item, "data", item)
        stored = self.fields[partition_id]
        names = sorted(set().union(*(stored.get(k, {}).keys() for k in keys))) if keys else []
        return KVBatchMeta(keys=list(keys), tags=[dict(self.tags[partition_id][k]) for k in keys],
                           partition_id=partition_id, fields=names or None)

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str] | None = None) -> Any:
        rows = [self.fields[partition_id][k] for k in keys]
        names = select_fields or list(rows[0])
        return list_of_dict_to_tensordict([{n: r[n] for n in names if n in r} for r in rows])

    def kv_clear(self, keys: list[str], partition_id: str) -> None:
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.fields[partition_id].pop(key, None)


def verl_config(tmp_path: Path, *overrides: str, train: Path | None = None, val: Path | None = None,
                pipeline: Path | None = None) -> Any:
    """verl's own ppo_trainer config, composed with Hydra, on the example's data and pipeline (or the given
    files)."""
    data = EXAMPLE / "data"
    train, val = train or data / "train.parquet", val or data / "val.parquet"
    pipeline = pipeline or EXAMPLE / "pipeline.toml"
    base = [f"data.train_files={train}", f"data.val_files={val}",
            *(EXAMPLE / "overrides.txt").read_text().split(), f"+flexkit.pipeline={pipeline}",
            "data.shuffle=false", f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.save_freq=1"]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*base, *overrides])


class Workers:
    """Actor worker group stand-in: checkpoints are no-ops (the flexkit state lives in data.pt)."""

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        return None

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        return None


def v1_trainer(cls: type, config: Any) -> Any:
    """A v1 trainer of class ``cls`` as far as it builds on CPU: verl's ``_build_replay_buffer`` (the custom
    sampler from the config) and ``_init_dataloader`` (verl's dataset and loader), no workers."""
    trainer = object.__new__(cls)
    trainer.config = config
    trainer.trainer_mode = config.trainer.v1.trainer_mode
    trainer.parameter_sync_step = 1
    trainer.global_steps = 0
    trainer.tokenizer = trainer.processor = None
    trainer.replay_buffer = trainer._build_replay_buffer()
    trainer._init_dataloader()
    trainer.actor_rollout_wg = Workers()
    trainer.use_critic = False
    trainer.checkpoint_callback = SimpleNamespace(on_save=lambda **kwargs: None)
    return trainer


class Tokenizer:
    """What verl's v1 ``_validate`` asks of a tokenizer: ``pad_token_id`` and ``decode``."""

    pad_token_id = 0

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


class ValidationAgentLoop:
    """The agent loop manager verl's v1 ``_validate`` drives, as verl's ``AgentLoopWorkerTQ`` stores its results:
    for every prompt row of the batch, ``val_kwargs.n`` (≥ 2) sessions under ``{uid}_{session}_0`` holding the row's
    fields plus the rollout's (``rm_scores`` with ``reward(row, session)`` on the last token, masks, token ids),
    then the prompt marked finished."""

    def __init__(self, n: int, reward: Any) -> None:
        self.n, self.reward, self.rows = n, reward, []

    def generate_sequences(self, batch: Any) -> None:
        from tensordict import NonTensorData, NonTensorStack

        for i in range(len(batch)):
            row: dict = {}
            for name, value in batch.items():
                if isinstance(value, torch.Tensor):
                    row[name] = value[i]
                elif isinstance(value, NonTensorStack):
                    row[name] = value[i].data
                elif isinstance(value, NonTensorData):
                    row[name] = value.data
            self.rows.append(row)
            uid, step = row["uid"], row["global_steps"]
            keys, fields = [], []
            for s in range(self.n):
                length = 3 + s  # lengths differ: TransferQueue hands jagged tensors back, as verl expects
                scores = torch.zeros(length)
                scores[-1] = self.reward(row, s)
                keys.append(f"{uid}_{s}_0")
                fields.append({**{k: v for k, v in row.items() if not isinstance(v, torch.Tensor)},
                               "rm_scores": scores, "response_mask": torch.ones(length, dtype=torch.int64),
                               "prompts": torch.arange(2 + s), "responses": torch.arange(length),
                               "num_turns": 2, "extra_fields": {}})
            tq.kv_batch_put(keys=keys, partition_id="val", fields=list_of_dict_to_tensordict(fields),
                            tags=[{"status": "success", "global_steps": step}] * self.n)
            tq.kv_batch_put(keys=[uid], partition_id="val", tags=[{"status": "finished"}])


def with_validation(trainer: Any, reward: Any) -> ValidationAgentLoop:
    """Give a :func:`v1_trainer` what verl's ``_validate`` reads besides its dataloader: the agent loop, a reward
    loop with worker handles (rewards computed in the agent loop) and a tokenizer."""
    loop = ValidationAgentLoop(int(trainer.config.actor_rollout_ref.rollout.val_kwargs.n), reward)
    trainer.agent_loop_manager = loop
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[object()])
    trainer.tokenizer = Tokenizer()
    return loop
