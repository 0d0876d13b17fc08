"""The ``frontier`` guard in verl 0.9.1's v1 trainer, on CPU: verl's real ``_validate`` (its validation dataloader
over a parquet with a ``level`` column, its replay buffer's ``sample`` of the ``val`` partition, its
``_val_metrics_update``) on a ``PPOTrainerSync`` built without workers; the agent loop stores each validation
trajectory with its row's fields, as verl's does (verl_v1_harness.ValidationAgentLoop), and TransferQueue's
``kv_*`` calls are served from memory. The quickstart's selector, copied into the verl pipeline, gets
``val_accuracy/<level>`` per level from verl's validation; what no validation can feed is refused at
construction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("flexkit_verl")
v1 = pytest.importorskip("verl.trainer.ppo.v1")
pd = pytest.importorskip("pandas")

from flexkit_verl.groups import ValidationGroups, final_outputs, group_columns, group_label  # noqa: E402
from flexkit_verl.trainer_v1 import flexkit_trainer_class  # noqa: E402
from verl_v1_harness import EXAMPLE, FakeTQ, v1_trainer, verl_config, with_validation  # noqa: E402

from flexkit import ConfigError  # noqa: E402

#: The quickstart's selector (examples/quickstart.toml), as copied into a verl pipeline.
QUICKSTART_SELECTOR = """
type = "frontier"
feature_keys = ["level"]
discount = 0.99
retain = 1.0
retain_above = 0.9
guard_metric = "val_accuracy/{}"
guard_margin = 0.03
guard_raise = 0.5
guard_lower = 0.05
guard_min = 0.5
"""
VAL_LEVELS = [1, 1, 2, 2, 3, 3]
VAL_N = 2  # actor_rollout_ref.rollout.val_kwargs.n


def files(tmp_path: Path, *, selector: str = QUICKSTART_SELECTOR, val_level: bool = True) -> dict[str, Path]:
    """verl parquet files with a ``level`` column (16 training rows at levels 1-3, 6 validation rows) and a
    pipeline over the training file with ``selector``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    train = pd.read_parquet(EXAMPLE / "data" / "train.parquet")
    train["level"] = [1 + i % 3 for i in range(len(train))]
    val = pd.concat([pd.read_parquet(EXAMPLE / "data" / "val.parquet")] * 2, ignore_index=True).iloc[:6].copy()
    val["extra_info"] = [{"split": "test", "index": 100 + i} for i in range(len(val))]
    if val_level:
        val["level"] = VAL_LEVELS
    paths = {"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet", "pipeline": tmp_path / "p.toml"}
    train.to_parquet(paths["train"])
    val.to_parquet(paths["val"])
    paths["pipeline"].write_text(f"""
[run]
batch_size = 4
seed = 0
total_epochs = 2

[[tasksets]]
name = "arithmetic"
path = "{paths['train']}"

[tasksets.selector]
{selector}
""")
    return paths


def guard_trainer(tmp_path: Path, monkeypatch, *overrides: str, **kwargs):
    FakeTQ().install(monkeypatch)
    paths = files(tmp_path, **kwargs)
    config = verl_config(tmp_path, "trainer.test_freq=2", f"actor_rollout_ref.rollout.val_kwargs.n={VAL_N}",
                         "data.validation_shuffle=false", *overrides, train=paths["train"], val=paths["val"],
                         pipeline=paths["pipeline"])
    return v1_trainer(flexkit_trainer_class(v1.PPOTrainerSync), config)


def level_reward(row: dict, session: int) -> float:
    """Level 1 always solved, level 2 in one session of two, level 3 never."""
    return {1: 1.0, 2: float(session == 0), 3: 0.0}[int(row["level"])]


def selector_of(trainer):
    return trainer.replay_buffer.pipeline.scheduler.entries[0].selector


def test_verl_validation_feeds_the_quickstart_guard_per_level(tmp_path: Path, monkeypatch) -> None:
    trainer = guard_trainer(tmp_path, monkeypatch)
    loop = with_validation(trainer, level_reward)
    selector = selector_of(trainer)
    assert not selector.held_out.state_dict()["evaluated"].any()
    metrics = trainer._validate()  # verl's own v1 _validate, through the mixin
    assert len(loop.rows) == len(VAL_LEVELS) and sorted(int(r["level"]) for r in loop.rows) == VAL_LEVELS
    assert metrics["val_accuracy/1"] == 1.0 and metrics["val_accuracy/2"] == 0.5 and metrics["val_accuracy/3"] == 0.0
    assert metrics["val_accuracy"] == pytest.approx(0.5)
    assert "val-core/toy_arithmetic/reward/mean@2" in metrics  # verl's own metrics are kept (and logged with ours)
    held = selector.held_out.state_dict()
    assert held["evaluated"].tolist() == [True, True, True]  # one group per level, each evaluated
    assert held["latest"].tolist() == [1.0, 0.5, 0.0]
    trainer.agent_loop_manager = with_validation(trainer, lambda row, s: 0.0)  # a second validation: level 1 slides
    trainer._validate()
    held = selector.held_out.state_dict()
    assert held["latest"].tolist() == [0.0, 0.0, 0.0] and held["best"].tolist() == [1.0, 0.5, 0.0]
    assert selector.held_out.sliding().tolist() == [True, True, False]


def test_the_guard_state_rides_in_verl_checkpoint(tmp_path: Path, monkeypatch) -> None:
    trainer = guard_trainer(tmp_path, monkeypatch, "trainer.resume_mode=auto")
    with_validation(trainer, level_reward)
    trainer._validate()
    trainer.global_steps = 1
    trainer._save_checkpoint()  # verl's own v1 save: data.pt holds the sampler, with the selector's held-out state
    resumed = guard_trainer(tmp_path, monkeypatch, "trainer.resume_mode=auto")
    resumed._load_checkpoint()
    assert selector_of(resumed).held_out.state_dict()["latest"].tolist() == [1.0, 0.5, 0.0]


@pytest.mark.parametrize(("selector", "key"), [
    (QUICKSTART_SELECTOR.replace('"val_accuracy/{}"', '"val-core/{}/acc/mean@1"'), "guard_metric"),
    (QUICKSTART_SELECTOR + "bins = 3\n", "bins"),
])
def test_a_guard_no_validation_can_feed_is_refused(tmp_path: Path, monkeypatch, selector: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"tasksets\[0\]\.selector\.{key}"):
        guard_trainer(tmp_path, monkeypatch, selector=selector.replace('feature_keys = ["level"]',
                                                                       'feature_keys = ["difficulty"]')
                      if key == "bins" else selector)


def test_validation_rows_without_the_column_are_refused(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"data\.val_files.*lack the column 'level'.*tasksets\[0\]\.selector"):
        guard_trainer(tmp_path, monkeypatch, val_level=False)


def test_a_guard_without_validations_is_refused(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"trainer\.test_freq: is -1.*guard_metric"):
        guard_trainer(tmp_path, monkeypatch, "trainer.test_freq=-1")


def test_a_pipeline_without_guard_reports_accuracy_without_refusing(tmp_path: Path, monkeypatch) -> None:
    """feature_keys without a guard: the level column is read where the validation rows have it."""
    trainer = guard_trainer(tmp_path, monkeypatch, "trainer.test_freq=-1",
                            selector='type = "frontier"\nfeature_keys = ["level"]\nguard_metric = ""\n',
                            val_level=False)
    with_validation(trainer, lambda row, s: float(s == 0))
    metrics = trainer._validate()
    assert metrics["val_accuracy"] == 0.5 and not any(k.startswith("val_accuracy/") for k in metrics)


def test_group_pieces() -> None:
    assert [group_label(v) for v in (3, 3.0, np.int64(2), np.float64(1.0), 0.5, "gsm8k", True)] == [
        "3", "3", "2", "1", "0.5", "gsm8k", "true"]  # as the pool names a bool column's groups
    assert final_outputs(["a_0_0", "a_0_1", "a_1_0", "b_0_0", "odd"]) == [1, 2, 3, 4]
    groups = ValidationGroups([])
    groups.add(["p", "p", "q"], [1.0, 0.0, float("nan")], {})
    assert groups.metrics() == {"val_accuracy": 0.5}
    groups.reset()
    assert groups.metrics() == {}


def test_group_columns_of_the_quickstart(tmp_path: Path) -> None:
    from flexkit import load_pipeline

    paths = files(tmp_path)
    (column,) = group_columns(load_pipeline(paths["pipeline"]))
    assert (column.name, column.required, column.key) == ("level", True, "tasksets[0].selector.feature_keys")
