"""Pipeline checkpoints: plain data only, atomic, fingerprinted, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flexkit.errors import CheckpointError
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.scheduler.feedback import SELECTOR_METRIC
from tests.scheduler.test_scheduler import batch_key, feedback_for, make_pipeline


def test_state_round_trip_keeps_types(tmp_path: Path) -> None:
    state = {"a": np.arange(5, dtype=np.int64), "nested": {"x": [np.float32(1.5), (1, 2)], 3: "int key"},
             "big": 2**100, "rng": {"state": {"state": 2**127 + 5, "inc": 7}}}
    save_state(tmp_path, state, meta={"k": [1, 2]})
    out, meta = load_state(tmp_path)
    assert out["a"].dtype == np.int64 and out["a"].tolist() == [0, 1, 2, 3, 4]
    assert out["nested"] == {"x": [1.5, [1, 2]], 3: "int key"}
    assert out["big"] == 2**100 and out["rng"]["state"]["state"] == 2**127 + 5
    assert meta == {"k": [1, 2]}


def test_refuses_objects_and_pickles(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="plain data"):
        save_state(tmp_path, {"x": object()}, meta={})
    with pytest.raises(CheckpointError, match="object arrays"):
        save_state(tmp_path, {"x": np.array([{}], dtype=object)}, meta={})


def test_missing_and_corrupt_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_state(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(CheckpointError, match="format version 99"):
        load_state(tmp_path)


def test_rewrite_keeps_one_arrays_file(tmp_path: Path) -> None:
    for i in range(3):
        save_state(tmp_path, {"x": np.full(3, i)}, meta={})
    assert len(list(tmp_path.glob("arrays-*.npz"))) == 1
    assert load_state(tmp_path)[0]["x"].tolist() == [2, 2, 2]


def test_pipeline_checkpoint_resumes_exactly(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    rng = np.random.default_rng(0)
    full = make_pipeline(tmp_path / "data", sizes=(9, 7, 5))
    ref = []
    for step in range(full.scheduler.total_steps):
        tasks = full.scheduler.read()
        ref.append(batch_key(tasks))
        full.scheduler.feedback(feedback_for(tasks, rng))
        if step == 4:
            full.save_checkpoint(tmp_path / "ckpt")
            after_rng_state = rng.bit_generator.state
    resumed = make_pipeline(tmp_path / "data", sizes=(9, 7, 5))
    resumed.load_checkpoint(tmp_path / "ckpt")
    rng.bit_generator.state = after_rng_state
    tail = []
    for _ in range(resumed.scheduler.total_steps - 5):
        tasks = resumed.scheduler.read()
        tail.append(batch_key(tasks))
        resumed.scheduler.feedback(feedback_for(tasks, rng))
    assert tail == ref[5:]


def test_checkpoint_from_another_pipeline_is_refused_with_the_difference(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = make_pipeline(tmp_path / "a", sizes=(9, 7))
    one.scheduler.feedback({SELECTOR_METRIC: {}})
    one.save_checkpoint(tmp_path / "ckpt")
    other = make_pipeline(tmp_path / "b", sizes=(9, 8))
    with pytest.raises(CheckpointError, match=r"tasksets\[1\].size: 7 in the checkpoint, 8 now"):
        other.load_checkpoint(tmp_path / "ckpt")


def test_checkpoint_refused_for_changed_batch_size_or_taskset_list(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    make_pipeline(tmp_path / "a", sizes=(9, 7)).save_checkpoint(tmp_path / "ckpt")
    bigger_batch = make_pipeline(tmp_path / "a", sizes=(9, 7), run={"batch_size": 6})
    with pytest.raises(CheckpointError, match=r"batch_size: 4 in the checkpoint, 6 now"):
        bigger_batch.load_checkpoint(tmp_path / "ckpt")
    one_more = make_pipeline(tmp_path / "a", sizes=(9, 7, 5))
    with pytest.raises(CheckpointError, match=r"tasksets: .* in the checkpoint, .* now"):
        one_more.load_checkpoint(tmp_path / "ckpt")
