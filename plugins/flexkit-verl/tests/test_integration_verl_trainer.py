"""flexkit-verl's sampler inside verl's own RayPPOTrainer training dataloader (built by
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
        trainer.train_dataloader.load_state_dict(torch.load(resume_from / "data.pt", weights_only=False))
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
