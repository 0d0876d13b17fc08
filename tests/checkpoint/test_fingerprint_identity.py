"""Checkpoint identity, round 3 (issue 25, items 14-16): the content digest is of the rows the run read, taken
when they were read; [sample.refill] and [feedback] are part of the identity; a taskset's place and the
parameters that change only speed are not."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from flexkit.cli.main import main
from flexkit.errors import CheckpointError, TasksetError
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.pipeline._fingerprint import compare_fingerprints
from flexkit.pipeline._pipeline import pipeline_from_dict
from tests.fixtures import read_metrics, without_clock


def _rows(seed: int, n: int = 12) -> list[dict]:
    return [{"id": i, "f0": ((i * 7 + seed) % 10) / 20, "f1": 0.5 + ((i * 3 + seed) % 10) / 20} for i in range(n)]


def _write(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _data(path: str, **extra: Any) -> dict:
    return {"run": {"batch_size": 4, "seed": 3, "total_steps": 20},
            "tasksets": [{"name": "t", "path": path, "selector": {"type": "difficulty_based",
                                                                  "feature_keys": ["f0", "f1"]}}], **extra}


def _save(tmp_path: Path, data: dict, *, steps: int = 2) -> Any:
    pipe = pipeline_from_dict(data, base_dir=tmp_path)
    for _ in range(steps):
        pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    return pipe


def _load(tmp_path: Path, data: dict) -> Any:
    pipe = pipeline_from_dict(data, base_dir=tmp_path)
    try:
        pipe.load_checkpoint(tmp_path / "ckpt")
    finally:
        pipe.scheduler.close()
    return pipe


# -- item 14: the digest of the rows read, taken when they were read --------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_regression_a_file_replaced_before_the_first_checkpoint_is_not_fingerprinted(tmp_path: Path,
                                                                                    suffix: str) -> None:
    """Regression: a .json or .parquet taskset replaced between the start of the run and its first checkpoint was
    fingerprinted as the new file, so a resume on the new rows was accepted. The digest is now of the bytes the
    rows were read from, taken when the taskset was opened."""
    path = tmp_path / f"t{suffix}"
    _write(path, _rows(0))
    original = _fingerprint_content(path)
    pipe = pipeline_from_dict(_data(path.name), base_dir=tmp_path)
    pipe.scheduler.read()
    replacement = tmp_path / f"new{suffix}"
    _write(replacement, _rows(5))
    os.replace(replacement, path)  # the file is replaced while the run goes on
    pipe.scheduler.read()
    pipe.save_checkpoint(tmp_path / "ckpt")
    pipe.scheduler.close()
    _state, meta = load_state(tmp_path / "ckpt")
    assert meta["fingerprint"]["tasksets"][0]["content"] == original
    with pytest.raises(CheckpointError, match=r"tasksets\[0\]\.content: .*rows changed"):
        _load(tmp_path, _data(path.name))  # a resume on the other rows is refused


def _fingerprint_content(path: Path) -> str:
    import hashlib

    data = path.read_bytes()
    return f"sha256:{hashlib.sha256(data).hexdigest()} ({len(data)} bytes)"


def test_regression_a_jsonl_file_replaced_before_the_first_checkpoint_is_refused_or_fingerprinted_as_read(
        tmp_path: Path) -> None:
    """JSON Lines rows are read lazily, through descriptors checked against the file as indexed: the digest goes
    the same way, so it is of the file the rows come from, or refused when that file is gone."""
    path = tmp_path / "t.jsonl"
    _write(path, _rows(0))
    original = _fingerprint_content(path)
    pipe = pipeline_from_dict(_data(path.name), base_dir=tmp_path)
    pipe.scheduler.read()
    _write(tmp_path / "new.jsonl", _rows(5, n=13))
    os.replace(tmp_path / "new.jsonl", path)
    try:
        pipe.save_checkpoint(tmp_path / "ckpt")
    except TasksetError as exc:
        assert "changed since it was indexed" in str(exc)
    else:
        assert load_state(tmp_path / "ckpt")[1]["fingerprint"]["tasksets"][0]["content"] == original
    finally:
        pipe.scheduler.close()


def test_the_digest_of_each_format_is_unchanged(tmp_path: Path) -> None:
    """The digest is the same SHA-256 of the file's bytes as before, so checkpoints written before still load."""
    for suffix in (".json", ".parquet", ".jsonl"):
        path = tmp_path / f"t{suffix}"
        _write(path, _rows(1))
        pipe = pipeline_from_dict(_data(path.name), base_dir=tmp_path)
        assert pipe.fingerprint()["tasksets"][0]["content"] == _fingerprint_content(path)
        pipe.scheduler.close()


# -- item 15: [sample.refill] and [feedback] ------------------------------------------------------------------------


def _refill_data(tmp_path: Path, refill: dict | None, **extra: Any) -> dict:
    path = tmp_path / "t.jsonl"
    if not path.exists():
        _write(path, _rows(0))
    sample: dict[str, Any] = {"mechanism": "select", "scorer": {"type": "group_reward_range"},
                              "actuator": {"type": "zero_variance_filter", "max_rounds": 3}}
    if refill is not None:
        sample["refill"] = refill
    return _data(path.name, sample=sample, **extra)


@pytest.mark.parametrize(("before", "after", "named"), [
    (None, {}, r"sample\.refill: None in the checkpoint, \{'surplus': 'drop'\} now"),
    ({}, None, r"sample\.refill: \{'surplus': 'drop'\} in the checkpoint, None now"),
    ({"surplus": "drop"}, {"surplus": "keep"}, r"sample\.refill\.surplus: 'drop' in the checkpoint, 'keep' now"),
])
def test_regression_refill_is_part_of_the_identity(tmp_path: Path, before: dict | None, after: dict | None,
                                                   named: str) -> None:
    """Regression: adding [sample.refill] to a plain run, or switching its ``surplus``, was accepted on resume."""
    _save(tmp_path, _refill_data(tmp_path, before))
    with pytest.raises(CheckpointError, match=named + r".*\[sample\.refill\] \(dynamic sampling\) cannot be added"):
        _load(tmp_path, _refill_data(tmp_path, after))


@pytest.mark.parametrize("feedback", [{"out_of_range": "error"}, {"type": "pass_rate_calculator",
                                                                   "out_of_range": "error"}])
def test_regression_feedback_is_part_of_the_identity(tmp_path: Path, feedback: dict) -> None:
    _write(tmp_path / "t.jsonl", _rows(0))
    _save(tmp_path, _data("t.jsonl"))
    with pytest.raises(CheckpointError, match=r"feedback\.out_of_range: 'clip' in the checkpoint, 'error' now.*"
                                              r"\[feedback\] table cannot change"):
        _load(tmp_path, _data("t.jsonl", feedback=feedback))


def test_a_checkpoint_of_an_older_flexkit_without_these_parts_still_loads(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Checkpoints written before [sample.refill] and [feedback] were recorded load as before (those parts are
    not compared, and a warning says so)."""
    data = _refill_data(tmp_path, {})
    _save(tmp_path, data)
    state, meta = load_state(tmp_path / "ckpt")
    del meta["fingerprint"]["feedback"], meta["fingerprint"]["sample"]["refill"]
    shutil.rmtree(tmp_path / "ckpt")
    save_state(tmp_path / "ckpt", state, meta=meta)
    assert _load(tmp_path, data).scheduler.step == 2
    assert "does not record this part" in capsys.readouterr().out


# -- item 16: content, not place or speed ---------------------------------------------------------------------------


TOYRL = {"type": "toyrl", "num_threads": 1, "warmup_steps": 0}


def test_regression_a_speed_only_trainer_parameter_does_not_block_a_resume(tmp_path: Path) -> None:
    """Regression: resuming with another ``num_threads`` for the toyrl trainer was refused."""
    pytest.importorskip("flexkit_toyrl")
    _write(tmp_path / "t.jsonl", _rows(0))
    _save(tmp_path, _data("t.jsonl", trainer=TOYRL))
    assert _load(tmp_path, _data("t.jsonl", trainer={**TOYRL, "num_threads": 4})).scheduler.step == 2
    with pytest.raises(CheckpointError, match=r"trainer\.params\.learning_rate: 0\.0003 in the checkpoint"):
        _load(tmp_path, _data("t.jsonl", trainer={**TOYRL, "learning_rate": 1e-3}))


def test_prefetch_does_not_block_a_resume(tmp_path: Path) -> None:
    _write(tmp_path / "t.jsonl", _rows(0))
    data = _data("t.jsonl")
    data["run"]["prefetch"] = True
    _save(tmp_path, data)
    data["run"]["prefetch"] = False
    assert _load(tmp_path, data).scheduler.step == 2


def test_without_a_content_digest_the_path_stays_part_of_the_identity() -> None:
    """A storage that cannot tell its content (``content`` is ``None``) is still identified by its parameters,
    its path included."""
    pipe = pipeline_from_dict({"run": {"batch_size": 2}, "tasksets": [{"name": "s", "storage_type": "simulated",
                                                                         "size": 10}]})

    def fingerprint(path: str, content: str | None) -> dict:
        return {"tasksets": [{"name": "s", "content": content, "storage": {"type": "x", "params": {"path": path}}}]}

    assert compare_fingerprints(fingerprint("a", None), fingerprint("b", None), pipe, "ckpt") == [
        "tasksets[0].storage.params.path: 'a' in the checkpoint, 'b' now"]
    assert compare_fingerprints(fingerprint("a", "sha256:1"), fingerprint("b", "sha256:1"), pipe, "ckpt") == []


RUN = """
[run]
batch_size = 8
seed = 2
total_steps = {steps}
eval_every = 4
checkpoint_every = 4

[[tasksets]]
name = "tasks"
path = "{path}"
[tasksets.selector]
type = "difficulty_based"
feature_keys = ["f0", "f1"]

[trainer]
type = "simulator"
group_size = 4
"""


def test_regression_a_run_resumes_where_its_taskset_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a run whose taskset file moved (another machine, another folder) could not be resumed, though
    the rows were the same. Now it resumes, logs the move, and ends with the metrics of an uninterrupted run."""
    rows = [{**r, "difficulty": r["f0"] * 4 - 1} for r in _rows(0, n=40)]
    (tmp_path / "a").mkdir()
    _write(tmp_path / "a" / "tasks.jsonl", rows)
    whole = tmp_path / "whole.toml"
    whole.write_text(RUN.format(steps=12, path=tmp_path / "a" / "tasks.jsonl"))
    assert main(["run", str(whole), "--out", str(tmp_path / "whole"), "--quiet"]) == 0
    first = tmp_path / "first.toml"
    first.write_text(RUN.format(steps=8, path=tmp_path / "a" / "tasks.jsonl"))
    assert main(["run", str(first), "--out", str(tmp_path / "cut"), "--quiet"]) == 0
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = tmp_path / "moved.toml"
    moved.write_text(RUN.format(steps=12, path=tmp_path / "b" / "tasks.jsonl"))
    capsys.readouterr()
    assert main(["run", str(moved), "--resume", str(tmp_path / "cut"), "--quiet"]) == 0
    out = capsys.readouterr()
    assert "taskset file moved since the checkpoint" in out.out + out.err

    def records(run: str) -> list[dict]:
        return [{k: v for k, v in r.items() if "time" not in k} for r in without_clock(read_metrics(tmp_path / run))]

    assert records("cut") == records("whole")
