"""Checkpoint identity: a checkpoint loads only into the pipeline it describes (taskset content, storage
parameters, weights, selector configuration), and a refusal names the difference; a moved file with the same
content loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flexkit.errors import CheckpointError
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.tasksets import InMemoryTaskset, JsonlTaskset
from tests.checkpoint.test_kill_checkpoint import canonical
from tests.scheduler.test_scheduler import write_taskset


def _data(path: str = "t0.jsonl", **taskset: object) -> dict:
    first = {"name": "t0", "path": path, "selector": {"type": "difficulty_based", "feature_keys": ["f0", "f1"],
                                                      "target_reward": 0.5, "tau": 0.5}, **taskset}
    return {"run": {"batch_size": 4, "seed": 3, "total_steps": 20},
            "tasksets": [first, {"name": "t1", "path": "t1.jsonl", "selector": {"type": "shuffle"}}]}


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """Two JSONL tasksets and a checkpoint after a few steps; returns the data directory."""
    for i, n in enumerate((12, 8)):
        write_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
    pipe = pipeline_from_dict(_data(), base_dir=tmp_path)
    for _ in range(3):
        pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    return tmp_path


def _refused(data_dir: Path, data: dict, match: str) -> None:
    pipe = pipeline_from_dict(data, base_dir=data_dir)
    before = canonical(pipe.state_dict())
    with pytest.raises(CheckpointError, match=match):
        pipe.load_checkpoint(data_dir / "ckpt")
    assert canonical(pipe.state_dict()) == before  # nothing changed
    pipe.scheduler.close()


def test_the_same_pipeline_loads(saved: Path) -> None:
    pipe = pipeline_from_dict(_data(), base_dir=saved)
    pipe.load_checkpoint(saved / "ckpt")
    assert pipe.scheduler.step == 3


def test_regression_rows_edited_with_the_same_size_are_refused(saved: Path) -> None:
    """Regression: the fingerprint held each taskset's size only, so a file whose rows were edited (same count)
    loaded, and the selector's per-index state then described other tasks."""
    rows = [json.loads(line) for line in (saved / "t0.jsonl").read_text().splitlines()]
    rows[5]["f0"] = 0.01  # one feature value changed
    (saved / "t0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _refused(saved, _data(), r"tasksets\[0\]\.content: 'sha256:.*in the checkpoint, 'sha256:.* now.*rows changed")


def test_another_path_with_the_same_content_loads(saved: Path) -> None:
    """Identity is content, not place: a taskset read from another file with the same bytes loads (issue 25,
    item 16; it was refused before)."""
    shutil.copyfile(saved / "t0.jsonl", saved / "copy.jsonl")
    pipe = pipeline_from_dict(_data("copy.jsonl"), base_dir=saved)
    pipe.load_checkpoint(saved / "ckpt")
    assert pipe.scheduler.step == 3
    pipe.scheduler.close()


def test_another_path_with_other_content_is_refused_by_its_content(saved: Path) -> None:
    write_taskset(saved / "other.jsonl", 12, seed=9)
    _refused(saved, _data("other.jsonl"), r"tasksets\[0\]\.content: 'sha256:.* in the checkpoint, 'sha256:.* now")


def test_regression_other_storage_parameters_are_refused(saved: Path) -> None:
    _refused(saved, _data(format="jsonl"), r"tasksets\[0\]\.storage\.params\.format: 'auto' in the checkpoint, "
                                           r"'jsonl' now")


def test_other_selector_parameters_are_refused(saved: Path) -> None:
    data = _data()
    data["tasksets"][0]["selector"]["tau"] = 0.25
    _refused(saved, data, r"tasksets\[0\]\.params\.tau: 0.5 in the checkpoint, 0.25 now")


def test_regression_edited_weights_are_refused_with_the_difference(tmp_path: Path) -> None:
    """Regression: resuming with edited taskset weights was accepted and the checkpoint's old weights silently
    won. Weights cannot change within a run: the refusal names both values and says what to do."""
    for i, n in enumerate((12, 8)):
        write_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
    data = _data(weight=2.0)
    data["tasksets"][1]["weight"] = 1.0
    pipe = pipeline_from_dict(data, base_dir=tmp_path)
    pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    data["tasksets"][0]["weight"] = 3.0
    _refused(tmp_path, data, r"tasksets\[0\]\.weight: 2.0 in the checkpoint, 3.0 now.*weights cannot change "
                             r"within a run")


def _simulated(seed: int) -> dict:
    return {"run": {"batch_size": 4, "seed": 3, "total_steps": 5},
            "tasksets": [{"name": "s", "storage_type": "simulated", "size": 40, "seed": seed}]}


def test_regression_a_generated_taskset_with_other_parameters_is_refused(tmp_path: Path) -> None:
    """A generated storage (here ``simulated``) is named by its storage parameters: another seed is another
    taskset."""
    pipe = pipeline_from_dict(_simulated(1), base_dir=tmp_path)
    pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    _refused(tmp_path, _simulated(2), r"tasksets\[0\]\.storage\.params\.seed: 1 in the checkpoint, 2 now")


def test_regression_a_generated_taskset_resumes_on_a_cpu_that_rounds_its_floats_differently(tmp_path: Path) -> None:
    """A ``simulated`` taskset's pass rates come from ``exp``, whose last bit depends on the CPU's vector
    instructions: a digest of its rows, as older checkpoints record, differs between machines. Its storage
    parameters identify it, so such a digest is not compared and the checkpoint loads."""
    pipe = pipeline_from_dict(_simulated(1), base_dir=tmp_path)
    assert pipe.scheduler.entries[0].taskset.content_id() is None
    pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    state, meta = load_state(tmp_path / "ckpt")
    meta["fingerprint"]["tasksets"][0]["content"] = "sha256:" + "0" * 64 + " (40 rows)"  # another CPU's digest
    save_state(tmp_path / "ckpt", state, meta=meta)
    again = pipeline_from_dict(_simulated(1), base_dir=tmp_path)
    again.load_checkpoint(tmp_path / "ckpt")
    assert again.scheduler.step == 1
    again.scheduler.close()


def test_content_ids_of_the_built_in_formats(tmp_path: Path) -> None:
    write_taskset(tmp_path / "a.jsonl", 5)
    shutil.copyfile(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    size = (tmp_path / "a.jsonl").stat().st_size
    a, b = JsonlTaskset(str(tmp_path / "a.jsonl"), name="a"), JsonlTaskset(str(tmp_path / "b.jsonl"), name="b")
    assert a.content_id() == b.content_id() and a.content_id().endswith(f"({size} bytes)")
    rows = [{"x": 1.0}, {"x": 2.0}]
    assert InMemoryTaskset("m", rows=rows).content_id() == InMemoryTaskset("n", rows=list(rows)).content_id()
    assert InMemoryTaskset("m", rows=rows).content_id() != InMemoryTaskset("m", rows=rows[::-1]).content_id()
    assert InMemoryTaskset("m", columns={"x": [1.0, 2.0]}).content_id().startswith("sha256:")
    assert InMemoryTaskset("m", rows=[{"x": object()}]).content_id() is None  # not JSON: unknown
    a.close()
    b.close()


def test_regression_a_parameter_added_later_loads_at_its_default_only(tmp_path: Path, monkeypatch) -> None:
    """Regression: a checkpoint written before a component gained a parameter (toyrl's ``operation``) was refused
    ("operation: None in the checkpoint, 'add' now"), though the default computes what the old code did."""
    from flexkit.pipeline._pipeline import Pipeline

    for i, n in enumerate((12, 8)):
        write_taskset(tmp_path / f"t{i}.jsonl", n, seed=i)
    current = Pipeline.fingerprint

    def older(self: Pipeline) -> dict:  # difficulty_based before it had ``m``
        out = current(self)
        del out["tasksets"][0]["params"]["m"]
        return out

    monkeypatch.setattr(Pipeline, "fingerprint", older)
    pipe = pipeline_from_dict(_data(), base_dir=tmp_path)
    pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    monkeypatch.setattr(Pipeline, "fingerprint", current)
    pipe = pipeline_from_dict(_data(), base_dir=tmp_path)
    pipe.load_checkpoint(tmp_path / "ckpt")
    assert pipe.scheduler.step == 1
    pipe.scheduler.close()
    data = _data()
    data["tasksets"][0]["selector"]["m"] = 8  # not the default: the old code could not have run it
    _refused(tmp_path, data, r"tasksets\[0\]\.params\.m: None in the checkpoint, 8 now")
