"""flexkit-rft-verl's sampler inside verl's own RayPPOTrainer training dataloader (built by
RayPPOTrainer._create_dataloader), through verl's collate_fn, DataProto.from_single_dict, and a data.pt
checkpoint saved and loaded as RayPPOTrainer._save_checkpoint / _load_checkpoint do.

Importing verl's ray_trainer needs packages verl 0.9.1 does not declare (cachetools, uvicorn, fastapi);
skipped when they or verl are absent.
"""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("flexkit_verl")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

from flexkit_verl import FlexkitSampler, FlexkitTrainerMixin, IndexedDataset, dataset_indices  # noqa: E402
from flexkit_verl.support import LEGACY_SUPPORT  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402 - after the skips
from test_integration_verl import SIZES, Rows, make_pipeline, rollout  # noqa: E402 - a sibling module (see pyproject)
from verl import DataProto  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn as verl_collate_fn  # noqa: E402

RayPPOTrainer = ray_trainer.RayPPOTrainer


def verl_trainer(sampler: FlexkitSampler, dataset: torch.utils.data.Dataset) -> SimpleNamespace:
    """An object carrying verl's own training dataloader, built by RayPPOTrainer._create_dataloader."""
    config = OmegaConf.create({
        "data": {"train_batch_size": 4, "gen_batch_size": None, "dataloader_num_workers": 0, "val_batch_size": None,
                 "validation_shuffle": False},
        "trainer": {"total_epochs": 2, "total_training_steps": None},
    })
    trainer = SimpleNamespace(config=config)
    RayPPOTrainer._create_dataloader(trainer, dataset, Rows(2), verl_collate_fn, sampler)
    return trainer


def run_verl_steps(tmp_path: Path, steps: range, *, resume_from: Path | None = None,
                   save_to: Path | None = None) -> list[list[int]]:
    """verl's fit loop shape: epochs of the train dataloader, DataProto.from_single_dict, uid, repeat n,
    rewards, reorder (balance), feedback; data.pt saved and loaded as verl's _save/_load_checkpoint do."""
    pipe = make_pipeline(tmp_path)
    dataset = IndexedDataset(Rows(sum(SIZES)))
    sampler = FlexkitSampler(pipe, dataset)
    trainer = verl_trainer(sampler, dataset)
    if resume_from is not None:
        trainer.train_dataloader.load_state_dict(torch.load(resume_from / "data.pt", weights_only=True))
    todo, seen = iter(steps), []
    step = next(todo, None)
    for _epoch in range(trainer.config.trainer.total_epochs + 1):
        for batch_dict in trainer.train_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            indices = dataset_indices(batch.non_tensor_batch).tolist()
            seen.append(indices)
            assert batch.non_tensor_batch["extra_info"][0]["index"] == 1000 + indices[0]  # row's own extra_info kept
            n = 3
            full = rollout(indices, n, step=step)
            full.non_tensor_batch["uid"] = batch.repeat(repeat_times=n, interleave=True).non_tensor_batch["uid"]
            full.reorder(torch.randperm(len(full), generator=torch.Generator().manual_seed(step)))
            sampler.update(full)
            step = next(todo, None)
            if step is None:
                if save_to is not None:
                    torch.save(trainer.train_dataloader.state_dict(), save_to / "data.pt")
                return seen
    return seen


def test_verl_dataloader_checkpoint_resumes_the_curriculum_exactly(tmp_path: Path) -> None:
    whole = run_verl_steps(tmp_path, range(9))
    assert len(whole) == 9  # 5 steps per epoch (20 tasks, batch 4): crosses an epoch
    assert all(len(b) == 4 for b in whole)
    for cut in (2, 5, 7):
        ckpt = tmp_path / f"ckpt{cut}"
        ckpt.mkdir()
        head = run_verl_steps(tmp_path, range(cut), save_to=ckpt)
        tail = run_verl_steps(tmp_path, range(cut, 9), resume_from=ckpt)
        assert head + tail == whole, f"cut at {cut}"


def test_feedback_reaches_the_selectors_through_verl(tmp_path: Path) -> None:
    """Same batches without feedback differ: the curriculum adapts inside verl's loop."""
    pipe = make_pipeline(tmp_path)
    sampler = FlexkitSampler(pipe, IndexedDataset(Rows(20)))
    blind = [list(map(int, b["input_ids"][:, 0])) for b in verl_trainer(sampler, IndexedDataset(Rows(20)))
             .train_dataloader][:4]
    taught = run_verl_steps(tmp_path, range(4))
    assert blind[0] == taught[0] and blind != taught


def test_the_mixin_overrides_verl_update_hook() -> None:
    params = list(inspect.signature(RayPPOTrainer._update_actor).parameters)
    assert params == ["self", "batch"]
    assert "train_sampler" in inspect.signature(RayPPOTrainer.__init__).parameters

    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    assert Trainer._update_actor is FlexkitTrainerMixin._update_actor
    assert Trainer.__mro__.index(FlexkitTrainerMixin) < Trainer.__mro__.index(RayPPOTrainer)


def legacy_trainer(cls: type, tmp_path: Path, sampler: FlexkitSampler, dataset) -> RayPPOTrainer:
    """A ``cls`` (RayPPOTrainer or a subclass) built without workers: config, dataloader, stub actor group."""
    trainer = object.__new__(cls)
    trainer.config = OmegaConf.create({
        "data": {"train_batch_size": 4, "gen_batch_size": None, "dataloader_num_workers": 0, "val_batch_size": None,
                 "validation_shuffle": False},
        "trainer": {"total_epochs": 6, "total_training_steps": None, "resume_mode": "auto", "default_hdfs_dir": None,
                    "default_local_dir": str(tmp_path / "ckpt"), "resume_from_path": None,
                    "del_local_ckpt_after_load": False},
    })
    trainer._create_dataloader(dataset, Rows(2), verl_collate_fn, sampler)
    trainer.actor_rollout_wg = SimpleNamespace(load_checkpoint=lambda *a, **k: None)
    trainer.use_critic = False
    return trainer


@pytest.mark.parametrize("mixin", [False, True])
def test_resume_at_an_epoch_boundary_through_verl_load_checkpoint(tmp_path: Path, mixin: bool) -> None:
    """verl's RayPPOTrainer._load_checkpoint skips data.pt at step 5 of 5 ("Skipping dataloader state restore"):
    plain verl restarts the curriculum; the mixin restores the sampler and resumes exactly."""
    whole = run_verl_steps(tmp_path, range(8))
    folder = tmp_path / "ckpt" / "global_step_5"
    folder.mkdir(parents=True)
    run_verl_steps(tmp_path, range(5), save_to=folder)  # data.pt where verl's _save_checkpoint puts it
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("5")

    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    dataset = IndexedDataset(Rows(sum(SIZES)))
    sampler = FlexkitSampler(make_pipeline(tmp_path), dataset)
    trainer = legacy_trainer(Trainer if mixin else RayPPOTrainer, tmp_path, sampler, dataset)
    trainer._load_checkpoint()
    assert trainer.global_steps == 5
    first = [dataset_indices(DataProto.from_single_dict(b).non_tensor_batch).tolist()
             for _, b in zip(range(1), trainer.train_dataloader, strict=False)]
    if mixin:
        assert sampler.scheduler.step == 6 and first == whole[5:6]
    else:  # the verl behaviour the mixin fixes: fresh selectors, the first batch again
        assert first == whole[:1]


def test_legacy_checks_and_metrics(tmp_path: Path) -> None:
    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    from flexkit import ConfigError

    dataset = IndexedDataset(Rows(sum(SIZES)))
    pipe = make_pipeline(tmp_path)  # 6 epochs of 5 steps
    trainer = legacy_trainer(Trainer, tmp_path, FlexkitSampler(pipe, dataset), dataset)
    assert len(trainer.train_dataloader) == 5
    trainer.config.trainer.total_epochs = 3
    with pytest.raises(ConfigError, match=r"verl runs 15 steps .*trainer\.total_epochs=3.* pipeline 30"):
        trainer._create_dataloader(dataset, Rows(2), verl_collate_fn, FlexkitSampler(pipe, dataset))
    trainer.config.trainer.total_epochs = 6
    trainer.config.data.train_batch_size = 8
    with pytest.raises(ConfigError, match=r"data\.train_batch_size: is 8 .*batch_size is 4"):
        trainer._create_dataloader(dataset, Rows(2), verl_collate_fn, FlexkitSampler(pipe, dataset))

    class Base:
        def _update_actor(self, batch):
            return SimpleNamespace(meta_info={"metrics": {"actor/pg_loss": [0.1]}})

    class Mixed(FlexkitTrainerMixin, Base):
        pass

    mixed = Mixed()
    mixed.train_dataloader = SimpleNamespace(sampler=FlexkitSampler(pipe, dataset))
    out = mixed._update_actor(rollout([0, 3], n=2, rewards=[1, 0, 1, 1]))
    metrics = out.meta_info["metrics"]
    assert metrics["flexkit/feedback/tasks"] == [2.0] and metrics["flexkit/rollouts"] == [4.0]
    assert metrics["actor/pg_loss"] == [0.1]


def test_validation_metrics_reach_the_selectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``_validate`` result goes to ``pipeline.evaluation`` (a ``frontier`` guard reads it); a
    ``merged=True`` call, whose result is raw samples to merge, is passed through alone."""
    assert "merged" in inspect.signature(RayPPOTrainer._validate).parameters  # the verl call the mixin wraps
    metrics = {"val-core/level1/acc/mean@1": 0.75, "val-aux/num_turns/mean": 1.0}

    class Base:
        def _validate(self, merged: bool = False):
            return {"data_sources": []} if merged else dict(metrics)

    class Mixed(FlexkitTrainerMixin, Base):
        pass

    dataset = IndexedDataset(Rows(sum(SIZES)))
    pipe = make_pipeline(tmp_path)
    seen: list[dict] = []
    monkeypatch.setattr(type(pipe), "evaluation", lambda self, metrics: seen.append(metrics))
    mixed = Mixed()
    mixed.train_dataloader = SimpleNamespace(sampler=FlexkitSampler(pipe, dataset))
    assert mixed._validate() == metrics and seen == [metrics]
    assert mixed._validate(merged=True) == {"data_sources": []} and mixed._validate(True) == {"data_sources": []}
    assert seen == [metrics]
    scheduler_only = Mixed()  # a sampler over a bare scheduler: the scheduler takes the evaluation
    scheduler_only.train_dataloader = SimpleNamespace(sampler=FlexkitSampler(pipe.scheduler, dataset))
    monkeypatch.setattr(type(pipe.scheduler), "evaluation", lambda self, metrics: seen.append(metrics))
    scheduler_only._validate()
    assert seen == [metrics, metrics]


def test_regression_a_guard_reaches_the_check_on_every_path(tmp_path: Path) -> None:
    """A sampler over a bare scheduler passed the mixin unchecked (it checked pipelines only), and a sampler in
    verl's RayPPOTrainer without the mixin was never checked at all: its guard never saw an evaluation. Now the
    mixin declares itself on the sampler (:meth:`flexkit.FlexkitSampler.declare_host`) and pools validation
    rewards by the scheduler's grouping column too, and a sampler nothing declared refuses its first batch."""
    from flexkit import ConfigError, pipeline_from_dict

    make_pipeline(tmp_path)  # writes the JSONL tasksets
    guard = {"type": "frontier", "feature_keys": ["f0"], "retain": 1.0, "guard_metric": "val_accuracy/{}"}
    pipe = pipeline_from_dict({"run": {"batch_size": 4, "seed": 5, "total_epochs": 6}, "tasksets": [
        {"name": f"t{i}", "path": f"t{i}.jsonl", "selector": guard} for i in range(len(SIZES))]}, base_dir=tmp_path)

    class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
        pass

    dataset = IndexedDataset(Rows(sum(SIZES)))
    bare = legacy_trainer(Trainer, tmp_path, FlexkitSampler(pipe.scheduler, dataset), dataset)
    assert bare.train_dataloader.sampler.host is LEGACY_SUPPORT
    assert [(c.name, c.required) for c in bare.flexkit_validation.groups.columns] == [("f0", True)]
    plain = legacy_trainer(RayPPOTrainer, tmp_path, FlexkitSampler(pipe, dataset), dataset)  # no mixin
    with pytest.raises(ConfigError, match=r"guard_metric: FlexkitSampler\(host=None\), which no host adapter "
                                          r"declared.*FlexkitTrainerMixin"):
        next(iter(plain.train_dataloader))
    declared = legacy_trainer(Trainer, tmp_path, FlexkitSampler(make_pipeline(tmp_path), dataset), dataset)
    assert declared.train_dataloader.sampler.host is LEGACY_SUPPORT
    assert len(next(iter(declared.train_dataloader))["input_ids"]) == 4
