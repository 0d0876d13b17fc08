"""The ``frontier`` guard in verl 0.9.1's legacy ``RayPPOTrainer`` (``trainer.use_v1=false``), on CPU: verl's own
``_validate`` (its validation loop, ``_get_gen_batch``, reward extraction, ``_maybe_log_val_generations`` and
``_val_metrics_update``) on a ``Trainer(FlexkitTrainerMixin, RayPPOTrainer)`` built without workers, whose rollout
manager answers each validation prompt with a reward set by the row's ``level``. The quickstart's selector gets
``val_accuracy/<level>`` per level, as in the v1 trainer and ``flexkit run``.

Importing verl's ray_trainer needs packages verl 0.9.1 does not declare (cachetools, uvicorn, fastapi); skipped when
they or verl are absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("flexkit_verl")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

from flexkit_verl import FlexkitSampler, FlexkitTrainerMixin, IndexedDataset  # noqa: E402
from flexkit_verl.legacy_validation import LegacyValidation  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402 - after the skips
from test_integration_verl import Rows  # noqa: E402 - a sibling module (see pyproject)
from verl import DataProto  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn as verl_collate_fn  # noqa: E402

from flexkit import ConfigError, pipeline_from_dict  # noqa: E402

RayPPOTrainer = ray_trainer.RayPPOTrainer
#: The quickstart's selector (examples/quickstart.toml), as copied into a verl pipeline.
QUICKSTART_SELECTOR = {"type": "frontier", "feature_keys": ["level"]}
TRAIN_ROWS = 12
VAL_LEVELS = [1, 1, 2, 2, 3, 3]
VAL_N = 2  # actor_rollout_ref.rollout.val_kwargs.n
RESPONSE = 4


class Trainer(FlexkitTrainerMixin, RayPPOTrainer):
    """The legacy trainer as a user builds it (docs/integrations/verl.md)."""


class ValRows(torch.utils.data.Dataset):
    """Validation rows shaped like verl's ``RLHFDataset`` output, with a ``level`` column (or without)."""

    def __init__(self, levels: list[int], *, with_level: bool = True) -> None:
        self.levels, self.with_level = levels, with_level

    def __len__(self) -> int:
        return len(self.levels)

    def __getitem__(self, i: int) -> dict:
        row = {"input_ids": torch.full((3,), 100 + i), "data_source": "toy", "extra_info": {"index": 100 + i}}
        return {**row, "level": self.levels[i]} if self.with_level else row


def level_reward(level: int, response: int) -> float:
    """Level 1 always solved, level 2 by one response of two, level 3 never."""
    return {1: 1.0, 2: float(response == 0), 3: 0.0}[level]


class Rollouts:
    """verl's async rollout manager, as ``_validate`` calls it: a response per row of the generation batch (``n``
    repeats of each prompt, adjacent) whose reward (``rm_scores`` on its last token) ``reward(level, repeat)``
    sets, read from the row's popped ``level`` (or ``levels``, in row order, when the rows have none)."""

    def __init__(self, reward=level_reward, levels: list[int] | None = None) -> None:
        self.reward, self.levels, self.calls = reward, levels, 0

    def generate_sequences(self, gen_batch: DataProto) -> DataProto:
        self.calls += 1
        rows = len(gen_batch)
        levels = ([int(v) for v in gen_batch.non_tensor_batch["level"]] if self.levels is None
                  else [self.levels[i // VAL_N] for i in range(rows)])
        scores = torch.zeros(rows, RESPONSE)
        for i, level in enumerate(levels):
            scores[i, -1] = self.reward(level, i % VAL_N)
        return DataProto.from_dict(tensors={"prompts": torch.zeros(rows, 3, dtype=torch.long),
                                            "responses": torch.ones(rows, RESPONSE, dtype=torch.long),
                                            "rm_scores": scores})


def write_pipeline(tmp_path: Path, selector: dict) -> object:
    """A pipeline over one JSONL taskset of :data:`TRAIN_ROWS` rows at levels 1-3, with ``selector``."""
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "level": 1 + i % 3}) + "\n" for i in range(TRAIN_ROWS)))
    return pipeline_from_dict({"run": {"batch_size": 4, "seed": 0, "total_epochs": 2},
                               "tasksets": [{"name": "arithmetic", "path": "train.jsonl", "selector": selector}]},
                              base_dir=tmp_path)


def legacy_guard_trainer(tmp_path: Path, *, selector: dict = QUICKSTART_SELECTOR, test_freq: int = 2,
                         val: ValRows | None = None, rollouts: Rollouts | None = None, pipeline=None) -> Trainer:
    """A legacy trainer built without workers: verl's ``_create_dataloader`` (the mixin's checks in front), the
    attributes verl's ``_validate`` reads, and :class:`Rollouts` as its rollout manager."""
    pipe = pipeline if pipeline is not None else write_pipeline(tmp_path, selector)
    dataset = IndexedDataset(Rows(TRAIN_ROWS))
    trainer = object.__new__(Trainer)
    trainer.config = OmegaConf.create({
        "data": {"train_batch_size": 4, "gen_batch_size": None, "dataloader_num_workers": 0, "val_batch_size": None,
                 "validation_shuffle": False, "val_files": ["val.parquet"]},
        "trainer": {"total_epochs": 2, "total_training_steps": None, "test_freq": test_freq,
                    "log_val_generations": 0, "validation_data_dir": None},
        "actor_rollout_ref": {"rollout": {"val_kwargs": {"n": VAL_N, "do_sample": False},
                                          "agent": {"num_workers": 1}}},
    })
    trainer._create_dataloader(dataset, val if val is not None else ValRows(VAL_LEVELS), verl_collate_fn,
                               FlexkitSampler(pipe, dataset))
    trainer.tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0, decode=lambda ids, **kw: str(ids.tolist()))
    trainer.async_rollout_manager = rollouts if rollouts is not None else Rollouts()
    trainer.use_rm = False
    trainer.global_steps = 0
    return trainer


def selector_of(trainer: Trainer):
    return trainer.train_dataloader.sampler.pipeline.scheduler.entries[0].selector


def test_the_mixin_wraps_the_verl_methods_it_reads_validation_from() -> None:
    import inspect

    assert list(inspect.signature(RayPPOTrainer._get_gen_batch).parameters) == ["self", "batch"]
    assert list(inspect.signature(RayPPOTrainer._maybe_log_val_generations).parameters) == [
        "self", "inputs", "outputs", "scores"]
    assert Trainer._get_gen_batch is FlexkitTrainerMixin._get_gen_batch


def test_verl_legacy_validation_feeds_the_quickstart_guard_per_level(tmp_path: Path) -> None:
    trainer = legacy_guard_trainer(tmp_path)
    selector = selector_of(trainer)
    assert not selector.held_out.state_dict()["evaluated"].any()
    metrics = trainer._validate()  # verl's own legacy _validate, through the mixin
    assert trainer.async_rollout_manager.calls == 1
    assert metrics["val_accuracy/1"] == 1.0 and metrics["val_accuracy/2"] == 0.5 and metrics["val_accuracy/3"] == 0.0
    assert metrics["val_accuracy"] == pytest.approx(0.5)
    assert "val-core/toy/reward/mean@2" in metrics  # verl's own metrics are kept (and logged with ours)
    held = selector.held_out.state_dict()
    assert held["evaluated"].tolist() == [True, True, True]  # one group per level, each evaluated
    assert held["latest"].tolist() == [1.0, 0.5, 0.0]
    trainer.async_rollout_manager = Rollouts(lambda level, response: 0.0)  # a second validation: levels 1-2 slide
    again = trainer._validate()
    assert again["val_accuracy/1"] == 0.0  # each validation counted alone, not pooled with the last
    held = selector.held_out.state_dict()
    assert held["latest"].tolist() == [0.0, 0.0, 0.0] and held["best"].tolist() == [1.0, 0.5, 0.0]
    assert selector.held_out.sliding().tolist() == [True, True, False]


def test_the_guard_is_no_longer_refused_and_training_batches_are_not_noted(tmp_path: Path) -> None:
    """Regression: the legacy trainer refused ``guard_metric = "val_accuracy/{}"`` (it handed the selectors verl's
    own metrics only); and generation batches outside a validation must not be pooled as held-out rewards."""
    trainer = legacy_guard_trainer(tmp_path)
    assert isinstance(trainer.flexkit_validation, LegacyValidation)
    training = DataProto.from_single_dict(verl_collate_fn([ValRows(VAL_LEVELS)[i] for i in range(2)]))
    training.non_tensor_batch["uid"] = training.non_tensor_batch["extra_info"]
    trainer._get_gen_batch(training)  # as fit calls it for a training batch
    metrics = trainer._validate()
    assert metrics["val_accuracy"] == pytest.approx(0.5) and metrics["val_accuracy/1"] == 1.0


@pytest.mark.parametrize(("selector", "key"), [
    ({**QUICKSTART_SELECTOR, "guard_metric": "val-core/{}/acc/mean@1"}, "guard_metric"),
    ({**QUICKSTART_SELECTOR, "guard_metric": "val_accuracy/{}", "bins": 3}, "bins"),
])
def test_a_guard_no_validation_can_feed_is_refused(tmp_path: Path, selector: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"tasksets\[0\]\.selector\.{key}"):
        legacy_guard_trainer(tmp_path, selector=selector)


def test_a_guard_without_validations_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trainer\.test_freq: is -1.*guard_metric"):
        legacy_guard_trainer(tmp_path, test_freq=-1)


def test_validation_rows_without_the_column_are_refused_at_the_first_validation(tmp_path: Path) -> None:
    """A validation dataset that does not list its columns is checked when its rows arrive."""
    trainer = legacy_guard_trainer(tmp_path, val=ValRows(VAL_LEVELS, with_level=False),
                                   rollouts=Rollouts(levels=VAL_LEVELS))
    with pytest.raises(ConfigError, match=r"lack the column 'level'.*tasksets\[0\]\.selector\.feature_keys"):
        trainer._validate()


def test_a_pipeline_without_guard_reports_accuracy_without_refusing(tmp_path: Path) -> None:
    """feature_keys without a guard: no refusal without validations, and the level read where rows have it."""
    trainer = legacy_guard_trainer(tmp_path, selector={**QUICKSTART_SELECTOR, "guard_metric": ""}, test_freq=-1,
                                   val=ValRows(VAL_LEVELS, with_level=False), rollouts=Rollouts(levels=VAL_LEVELS))
    metrics = trainer._validate()
    assert metrics["val_accuracy"] == pytest.approx(0.5) and not any(k.startswith("val_accuracy/") for k in metrics)


def test_a_verl_whose_scores_do_not_match_its_rows_is_an_error() -> None:
    from flexkit_verl.groups import ValidationGroups

    validation = LegacyValidation(ValidationGroups([]))
    validation.start()
    validation.note({"uid": ["a", "a"]})
    with pytest.raises(RuntimeError, match=r"scored 3 responses but 2 validation rows.*pin verl"):
        validation.score([1.0, 0.0, 1.0])
    validation.score([1.0, 0.0])
    assert validation.finish() == {"val_accuracy": 0.5}
    validation.note({"uid": ["b"]})  # outside a validation: ignored
    validation.score([1.0])
    assert validation.finish() == {}


def test_regression_rows_that_share_a_uid_but_not_a_group_are_pooled_apart() -> None:
    """Validation rows that carry one uid across levels (verl keeps a uid the file gives) were pooled under the
    first row's level: level 1's accuracy came out 0.5 and levels 2 and 3 vanished."""
    from flexkit_verl.groups import ValidationGroups

    from flexkit.host import GroupColumn

    groups = ValidationGroups([GroupColumn("level", True, "tasksets[0].selector.feature_keys")])
    groups.add(["same"] * 6, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0], {"level": [1, 1, 2, 2, 3, 3]})
    assert groups.metrics() == {"val_accuracy": pytest.approx(0.5), "val_accuracy/1": 1.0, "val_accuracy/2": 0.5,
                                "val_accuracy/3": 0.0}
