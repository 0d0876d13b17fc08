"""flexkit in verl 0.9.1's default v1 trainer (``trainer.use_v1=true``), on CPU: verl's composed Hydra config on
the example's files (examples/verl/), verl's own ``_build_replay_buffer`` loading flexkit's replay buffer from
``trainer.v1.sampler.custom_sampler``, verl's ``_init_dataloader`` / ``_next_train_batch`` / ``sample`` /
``_save_checkpoint`` / ``_load_checkpoint`` on a ``PPOTrainerSync`` built without workers; TransferQueue's
``kv_*`` calls are served from memory (verl_v1_harness.FakeTQ).

Skipped when verl or TransferQueue is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("flexkit_verl")
v1 = pytest.importorskip("verl.trainer.ppo.v1")

import transfer_queue as tq  # noqa: E402 - after the skips
from flexkit_verl import FlexkitSampler, IndexedDataset  # noqa: E402
from flexkit_verl.main_ppo import prepare_config  # noqa: E402
from flexkit_verl.replay_buffer import FlexkitReplayBuffer  # noqa: E402
from flexkit_verl.trainer_v1 import flexkit_trainer_class  # noqa: E402
from verl_v1_harness import FakeTQ, v1_trainer, verl_config  # noqa: E402 - a sibling module

from flexkit import ConfigError  # noqa: E402

N = 4  # responses per prompt (actor_rollout_ref.rollout.n in examples/verl/overrides.txt)


def reward(index: int, session: int, step: int) -> float:
    return float((index * 5 + session * 3 + step) % 4 == 0)


def roll_out(trainer, step: int, rewards=reward) -> list[int]:
    """One v1 step as far as flexkit sees it: verl fetches the prompts, the 'agent loop' stores N scored
    trajectories per prompt in TransferQueue, verl's replay buffer samples the batch."""
    trainer.global_steps = step
    batch = trainer._next_train_batch()
    uids, extras = list(batch["uid"]), list(batch["extra_info"])
    indices = [int(e["flexkit_index"]) for e in extras]
    for uid, extra, index in zip(uids, extras, indices, strict=True):
        tq.kv_batch_put(keys=[uid], partition_id="train",
                        tags=[{"is_prompt": True, "status": "finished", "global_steps": step}])
        keys, rows = [], []
        for s in range(N):
            length = 3 + (index + s) % 3
            scores = torch.zeros(length)
            scores[-1] = rewards(index, s, step)
            keys.append(f"{uid}_{s}_0")
            rows.append({"uid": uid, "rm_scores": scores, "response_mask": torch.ones(length, dtype=torch.int64),
                         "extra_info": dict(extra)})
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows),
                        tags=[{"status": "success", "global_steps": step}] * N)
    meta, metrics = trainer.replay_buffer.sample(global_steps=step, partition_id="train", batch_size=len(uids))
    trainer.last_meta, trainer.last_metrics = meta, metrics
    return indices


def trainer_for(tmp_path: Path, monkeypatch, *overrides: str):
    FakeTQ().install(monkeypatch)
    cls = flexkit_trainer_class(v1.PPOTrainerSync)
    return v1_trainer(cls, verl_config(tmp_path, *overrides))


def test_custom_sampler_and_dataloader_come_from_the_config(tmp_path: Path, monkeypatch) -> None:
    trainer = trainer_for(tmp_path, monkeypatch)
    assert type(trainer.replay_buffer) is FlexkitReplayBuffer  # loaded by verl from custom_sampler.path/name
    loader = trainer.train_dataloader
    assert isinstance(loader.sampler, FlexkitSampler) and loader.sampler.pipeline is trainer.replay_buffer.pipeline
    assert isinstance(trainer.train_dataset, IndexedDataset) and loader.batch_size == 4
    assert trainer.replay_buffer.flexkit_sampler is loader.sampler
    assert trainer.steps_per_epoch == 4 and trainer.total_training_steps == 8


def test_a_step_feeds_back_weights_tokens_and_reports_metrics(tmp_path: Path, monkeypatch) -> None:
    trainer = trainer_for(tmp_path, monkeypatch)
    sampler = trainer.train_dataloader.sampler
    before = str(sampler.state_dict()["pipeline"]["scheduler"]["selectors"])
    indices = roll_out(trainer, 1, rewards=lambda i, s, st: float(s < 2))  # every group solves half
    meta, metrics = trainer.last_meta, trainer.last_metrics
    weights = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["rollout_is_weights"])
    padded = weights["rollout_is_weights"].to_padded_tensor(0)
    assert padded.shape[0] == len(meta.keys) == 4 * N
    assert torch.all(padded.sum(-1) > 0)  # solve rate 0.5 lies in (0.2, 0.8): every group kept
    assert metrics["flexkit/feedback/tasks"] == 4 and metrics["flexkit/rollouts"] == 4 * N
    assert metrics["flexkit/feedback/pass_rate_mean"] == pytest.approx(0.5)
    assert metrics["flexkit/sample/kept_fraction"] == pytest.approx(1.0)
    assert str(sampler.state_dict()["pipeline"]["scheduler"]["selectors"]) != before  # the selector learned
    assert len(set(indices)) == 4


def test_dropped_groups_get_zero_weight_on_every_token(tmp_path: Path, monkeypatch) -> None:
    trainer = trainer_for(tmp_path, monkeypatch)
    indices = roll_out(trainer, 1, rewards=lambda i, s, st: 1.0 if i % 2 == 0 else float(s < 2))
    meta = trainer.last_meta
    got = tq.kv_batch_get(keys=meta.keys, partition_id="train", select_fields=["rollout_is_weights", "extra_info"])
    padded = got["rollout_is_weights"].to_padded_tensor(-1)
    rows = [int(getattr(e, "data", e)["flexkit_index"]) for e in list(got["extra_info"])]
    lengths = got["rollout_is_weights"].offsets().diff().tolist()
    for row, index, n in zip(padded, rows, lengths, strict=True):
        assert torch.all(row[:n] == (0.0 if index % 2 == 0 else 1.0)), index  # all-solved groups dropped
    assert sorted(set(rows)) == sorted(indices)
    assert trainer.last_metrics["flexkit/sample/kept_fraction"] == pytest.approx(
        np.mean([i % 2 == 1 for i in indices]))


def run(tmp_path: Path, monkeypatch, steps: range, *, resume: bool = False, save_at: int | None = None) -> list:
    trainer = trainer_for(tmp_path, monkeypatch, "trainer.resume_mode=auto")
    if resume:
        trainer._load_checkpoint()  # verl's own v1 load (then the mixin's sampler restore)
        assert trainer.global_steps == steps.start - 1
    seen = []
    for step in steps:
        seen.append(roll_out(trainer, step))
        for key in list(tq.kv_list("train")["train"]):
            tq.kv_clear(keys=[key], partition_id="train")
        if step == save_at:
            trainer._save_checkpoint()  # verl's own v1 save: data.pt + latest_checkpointed_iteration.txt
            break
    return seen


@pytest.mark.parametrize("cut", [2, 4])  # mid-epoch and the epoch boundary (4 steps per epoch)
def test_resume_through_verl_v1_checkpoint_is_exact(tmp_path: Path, monkeypatch, cut: int) -> None:
    whole = run(tmp_path / "whole", monkeypatch, range(1, 7))
    head = run(tmp_path / "cut", monkeypatch, range(1, 7), save_at=cut)
    tail = run(tmp_path / "cut", monkeypatch, range(cut + 1, 7), resume=True)
    assert head + tail == whole


def test_run_length_and_batch_size_mismatches_are_refused(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"trainer\.total_epochs.*verl runs 12 steps.*pipeline 8"):
        trainer_for(tmp_path, monkeypatch, "trainer.total_epochs=3")
    with pytest.raises(ConfigError, match=r"data\.train_batch_size: is 8 but the pipeline's \[run\] batch_size is 4"):
        trainer_for(tmp_path, monkeypatch, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8")
    trainer = trainer_for(tmp_path, monkeypatch, "trainer.total_epochs=3", "+flexkit.set=['run.total_epochs=3']")
    assert trainer.total_training_steps == 12 == trainer.replay_buffer.pipeline.scheduler.total_steps


@pytest.mark.parametrize(("override", "key"), [
    ("algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.bypass_mode"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is"),
])
def test_loss_modes_that_ignore_the_weights_are_refused(tmp_path: Path, monkeypatch, override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        trainer_for(tmp_path, monkeypatch, override)


def test_regression_the_buffer_alone_refuses_replay(tmp_path: Path, monkeypatch) -> None:
    """verl's own entry point with flexkit's replay buffer and no trainer mixin used to ignore [replay] silently
    (only the mixin's construction checks refused it): the buffer refuses it itself, naming the entry point that
    replays; the same buffer built by the mixin's trainer accepts it."""
    example = Path(__file__).resolve().parents[3] / "examples/verl"
    pipeline = tmp_path / "replay.toml"
    pipeline.write_text(f'[run]\nbatch_size = 4\nseed = 0\ntotal_epochs = 2\n\n[[tasksets]]\nname = "a"\n'
                        f'path = "{example / "data/train.parquet"}"\n\n[tasksets.selector]\ntype = "shuffle"\n\n'
                        '[replay]\ngroups = 4\nmax_age = 2\n')
    FakeTQ().install(monkeypatch)
    with pytest.raises(ConfigError, match=r"replay: flexkit's v1 replay buffer without FlexkitV1TrainerMixin.*"
                                          r"python -m flexkit_verl\.main_ppo"):
        v1_trainer(v1.PPOTrainerSync, verl_config(tmp_path, pipeline=pipeline))
    trainer = v1_trainer(flexkit_trainer_class(v1.PPOTrainerSync), verl_config(tmp_path, pipeline=pipeline))
    assert trainer.flexkit_replay is not None


def test_pipeline_inline_and_sampler_kwargs(tmp_path: Path, monkeypatch) -> None:
    from flexkit_verl.config import pipeline_from_config
    from omegaconf import OmegaConf

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    data = tomllib.loads((Path(__file__).resolve().parents[3] / "examples/verl/pipeline.toml").read_text())
    data["tasksets"][0]["path"] = str(Path(__file__).resolve().parents[3] / "examples/verl/data/train.parquet")
    pipe = pipeline_from_config(OmegaConf.create({"flexkit": {"pipeline": data, "set": ["run.seed=7"]}}))
    assert pipe.config.run.seed == 7 and pipe.scheduler.sizes == [16]
    with pytest.raises(ConfigError, match="no such file on this node"):
        pipeline_from_config(OmegaConf.create({"flexkit": {"pipeline": "/nowhere/p.toml"}}))
    assert pipeline_from_config(OmegaConf.create({})) is None


def test_main_prepares_the_custom_sampler(tmp_path: Path) -> None:
    config = verl_config(tmp_path, "trainer.v1.sampler.custom_sampler.path=null",
                         "trainer.v1.sampler.custom_sampler.name=null", "trainer.v1.trainer_mode=colocate_async")
    prepare_config(config)
    assert config.trainer.v1.sampler.custom_sampler.path == "pkg://flexkit_verl.replay_buffer"
    assert config.trainer.v1.sampler.custom_sampler.name == "FlexkitReplayBufferAsync"
    with pytest.raises(ConfigError, match="use_v1=false"):
        prepare_config(verl_config(tmp_path, "trainer.use_v1=false"))


def test_validation_metrics_reach_the_selectors(tmp_path: Path, monkeypatch) -> None:
    """verl's v1 ``_validate`` result goes to the replay buffer's pipeline (``pipeline.evaluation``)."""
    metrics = {"val-core/level1/acc/mean@1": 0.75}
    monkeypatch.setattr(v1.PPOTrainerSync, "_validate", lambda self: dict(metrics))
    trainer = trainer_for(tmp_path, monkeypatch)
    seen: list[dict] = []
    monkeypatch.setattr(type(trainer.replay_buffer.pipeline), "evaluation", lambda self, metrics: seen.append(metrics))
    assert trainer._validate() == metrics and seen == [metrics]
