"""flexkit annotate, round 3 of the reliability work: an error or Ctrl-C in the first chunk, damaged partial files,
the partial's identity (taskset and checkpoint content), the output suffix, the column name, Parquet output and
checkpoints of other pipelines. Every refusal comes before any rollout. (Kills: ``test_annotate_kill.py``.)"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flexkit.annotate._command
from flexkit import FlexkitError, pipeline_from_dict
from flexkit.annotate._command import annotate
from flexkit.cli.main import main
from flexkit.errors import CheckpointError, TasksetError

SIM = {
    "run": {"batch_size": 8, "seed": 1, "total_steps": 4, "eval_every": 0},
    "tasksets": [{"name": "graded", "storage_type": "simulated", "size": 30, "levels": [1, 2, 3]}],
    "trainer": {"type": "simulator", "group_size": 4},
}


class _Boom(Exception):
    pass


@pytest.fixture
def rollouts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of chunks rolled out (one entry per chunk), counted through ``annotate._pass_rates``."""
    calls: list[int] = []
    original = flexkit.annotate._command._pass_rates

    def counted(trainer: Any, tasks: Any, samples: int) -> Any:
        calls.append(len(tasks))
        return original(trainer, tasks, samples)

    monkeypatch.setattr(flexkit.annotate._command, "_pass_rates", counted)
    yield calls


def _fail_at_chunk(monkeypatch: pytest.MonkeyPatch, n: int, exc: BaseException) -> None:
    """Make the ``n``-th chunk's rollout (1-based) raise ``exc``; later calls work."""
    original = flexkit.annotate._command._pass_rates
    count = 0

    def failing(trainer: Any, tasks: Any, samples: int) -> Any:
        nonlocal count
        count += 1
        if count == n:
            raise exc
        return original(trainer, tasks, samples)

    monkeypatch.setattr(flexkit.annotate._command, "_pass_rates", failing)


def _annotate(tmp_path: Path, out: str, data: dict[str, Any] = SIM, **kwargs: Any) -> Path:
    return annotate(pipeline_from_dict(data, base_dir=tmp_path), out=tmp_path / out, samples=4, progress=None,
                    **kwargs)


def _jsonl_taskset(tmp_path: Path, rows: list[dict[str, Any]], name: str = "tasks.jsonl") -> dict[str, Any]:
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {**SIM, "tasksets": [{"name": "graded", "path": name}]}


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "level": 1 + i % 3, "difficulty": 1.0 + i % 3, "question": f"q{i}"} for i in range(n)]


# -- 1: an error or Ctrl-C in the first chunk --------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt(), _Boom("the trainer failed")], ids=["ctrl-c", "error"])
def test_an_interruption_in_the_first_chunk_is_continued_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, exc: BaseException
) -> None:
    """Regression: after a Ctrl-C (or an error) in the first chunk the partial held only its header, and the rerun
    wrote the header again: the JSONL output gained a bogus row 0 (every task shifted by one) and the Parquet
    output kept only the header's column, both with exit status 0."""
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    expected = _annotate(tmp_path, f"expected.{suffix}").read_bytes()
    monkeypatch.undo()
    _fail_at_chunk(monkeypatch, 1, exc)
    with pytest.raises(type(exc)):
        _annotate(tmp_path, f"out.{suffix}")
    assert (tmp_path / f"out.{suffix}.partial").exists()
    assert _annotate(tmp_path, f"out.{suffix}").read_bytes() == expected
    assert sorted(p.name for p in tmp_path.glob("out.*")) == [f"out.{suffix}"]


def test_a_rerun_after_a_later_error_continues_with_the_trainer_state_of_the_last_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rerun continues the trainer's random stream where the last committed chunk left it, so the output is
    byte for byte that of an uninterrupted call (before, the rerun's chunks drew fresh random numbers)."""
    expected = _annotate(tmp_path, "expected.jsonl").read_bytes()
    _fail_at_chunk(monkeypatch, 3, _Boom("lost the GPU"))
    with pytest.raises(_Boom):
        _annotate(tmp_path, "out.jsonl")
    monkeypatch.undo()
    assert _annotate(tmp_path, "out.jsonl").read_bytes() == expected


# -- 2: damaged partial files -------------------------------------------------------------------------------------


def _interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: str, chunks: int, data: dict = SIM) -> Path:
    """``out``'s partial file after ``chunks`` committed chunks and an interruption."""
    _fail_at_chunk(monkeypatch, chunks + 1, _Boom("stop"))
    with pytest.raises(_Boom):
        _annotate(tmp_path, out, data)
    monkeypatch.undo()
    return tmp_path / f"{out}.partial"


@pytest.mark.parametrize(("damage", "line", "why"), [
    (b"\xff\xfe not utf-8", 3, "not UTF-8: byte 0xff at column 1"),
    (b'{"id": 1, "pass', 3, "not JSON"),
    (b"[1, 2]", 5, "a JSON list, not an object"),
    (b"garbage", 1, "not JSON"),
])
def test_a_damaged_line_of_the_partial_is_reported_before_any_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes, line: int, why: str
) -> None:
    """Regression: a non-UTF-8 line ended in a raw UnicodeDecodeError; a damaged JSON line was found only when the
    output was written, after every rollout."""
    partial = _interrupted(tmp_path, monkeypatch, "out.jsonl", chunks=2)
    lines = partial.read_bytes().split(b"\n")
    lines[line - 1] = damage
    partial.write_bytes(b"\n".join(lines))
    calls: list[int] = []
    monkeypatch.setattr(flexkit.annotate._command, "_pass_rates", lambda *a: calls.append(1))
    with pytest.raises(FlexkitError, match=rf"out\.jsonl\.partial line {line} is damaged \({why}.*delete .* to start"):
        _annotate(tmp_path, "out.jsonl")
    assert calls == []


def test_an_edited_or_cut_partial_is_refused_and_deleting_it_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row changed by hand (still valid JSON) breaks the checksum of the committed bytes; a partial cut inside
    its committed rows is refused too; deleting the partial starts over."""
    partial = _interrupted(tmp_path, monkeypatch, "out.jsonl", chunks=2)
    good = partial.read_bytes()
    partial.write_bytes(good.replace(b'"pass_rate": 0.', b'"pass_rate": 1.', 1))
    with pytest.raises(FlexkitError, match="changed after it was written"):
        _annotate(tmp_path, "out.jsonl")
    partial.write_bytes(good[: len(good) - 30])
    with pytest.raises(FlexkitError, match="cut or replaced"):
        _annotate(tmp_path, "out.jsonl")
    partial.unlink()
    assert _annotate(tmp_path, "out.jsonl").read_bytes() == _annotate(tmp_path, "ref.jsonl").read_bytes()


# -- 3: the identity covers the taskset's and the checkpoint's content --------------------------------------------


def test_a_rerun_after_the_taskset_file_changed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the identity held the taskset's name and size only, so a rerun on an edited file (same size)
    silently mixed rows of two files."""
    rows = _rows(30)
    data = _jsonl_taskset(tmp_path, rows)
    _interrupted(tmp_path, monkeypatch, "out.jsonl", chunks=1, data=data)
    rows[20]["question"] = "edited"
    _jsonl_taskset(tmp_path, rows)
    with pytest.raises(FlexkitError, match=r"the taskset's rows \(its file changed\) changed since"):
        _annotate(tmp_path, "out.jsonl", data)


def _train(tmp_path: Path, folder: str, seed: int, data: dict[str, Any] = SIM) -> Path:
    from flexkit.run._runner import run_pipeline

    trained = {**data, "run": {**data["run"], "seed": seed}}
    run_pipeline(pipeline_from_dict(trained, base_dir=tmp_path), run_dir=tmp_path / folder, progress=None)
    return tmp_path / folder


def test_a_rerun_after_the_checkpoint_changed_is_refused_and_a_moved_one_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the identity held the checkpoint's path, so another checkpoint at the same path was silently
    mixed in. Now its content is what counts: the same checkpoint moved elsewhere continues the partial."""
    first, second = _train(tmp_path, "run-a", seed=1), _train(tmp_path, "run-b", seed=2)
    expected = _annotate(tmp_path, "expected.jsonl", checkpoint=first).read_bytes()
    _interrupted_with = tmp_path / "ref"
    shutil.copytree(first, _interrupted_with)
    _fail_at_chunk(monkeypatch, 2, _Boom("stop"))
    with pytest.raises(_Boom):
        _annotate(tmp_path, "out.jsonl", checkpoint=_interrupted_with)
    monkeypatch.undo()
    shutil.rmtree(_interrupted_with)
    shutil.copytree(second, _interrupted_with)  # another policy at the same path
    with pytest.raises(FlexkitError, match=r"the --checkpoint's content .* changed since"):
        _annotate(tmp_path, "out.jsonl", checkpoint=_interrupted_with)
    assert _annotate(tmp_path, "out.jsonl", checkpoint=first).read_bytes() == expected  # moved: same content


# -- 4, 5: the output suffix and the column name ------------------------------------------------------------------


def _pipeline_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 8\n[[tasksets]]\nname = "g"\nstorage_type = "simulated"\nsize = 16\n'
                    '[trainer]\ntype = "simulator"\n')
    return path


def test_out_accepts_only_what_it_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: ``--out x.json`` wrote JSON Lines under a .json name, which a JSON reader refuses."""
    pipeline = _pipeline_file(tmp_path)
    for name in ("x.json", "x.csv", "x"):
        assert main(["annotate", str(pipeline), "-k", "4", "--out", str(tmp_path / name), "--quiet"]) == 1
        err = capsys.readouterr().err
        assert "--out must end in .jsonl or .parquet" in err and not (tmp_path / name).exists()
        assert ("name it .jsonl" in err) == (name == "x.json")


def test_an_existing_or_empty_column_is_refused_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rollouts: list[int]
) -> None:
    """Regression: ``--column level`` silently replaced the taskset's own ``level`` column; an empty name wrote a
    column named ``""``."""
    pipeline = _pipeline_file(tmp_path)
    out = tmp_path / "x.jsonl"
    assert main(["annotate", str(pipeline), "-k", "4", "--out", str(out), "--column", "level", "--quiet"]) == 1
    assert "--column 'level' is already a column" in capsys.readouterr().err and rollouts == []
    assert main(["annotate", str(pipeline), "-k", "4", "--out", str(out), "--column", "", "--quiet"]) == 1
    assert "empty name" in capsys.readouterr().err and rollouts == []
    assert main(["annotate", str(pipeline), "-k", "4", "--out", str(out), "--column", "level", "--overwrite",
                 "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert list(rows[0]) == ["id", "level", "difficulty", "weak_pass_rate", "strong_pass_rate"]  # in place
    assert all(0.0 <= r["level"] <= 1.0 for r in rows) and len(rows) == 16


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_an_out_folder_or_a_fifo_partial_is_refused_before_any_rollout(tmp_path: Path, rollouts: list[int]) -> None:
    """A folder at ``--out`` failed only when the finished file was moved there, after every rollout; a FIFO at
    ``OUT.partial`` blocked the command forever."""
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(FlexkitError, match="is a directory, not a regular file"):
        _annotate(tmp_path, "folder.jsonl")
    os.mkfifo(tmp_path / "fifo.jsonl.partial")
    with pytest.raises(FlexkitError, match="is a FIFO"):
        _annotate(tmp_path, "fifo.jsonl")
    assert rollouts == []


# -- 6: Parquet output ---------------------------------------------------------------------------------------------


def test_parquet_output_keeps_every_column_of_every_row(tmp_path: Path) -> None:
    """Regression: the Parquet schema was taken from row 0, so a column that row 0 lacks was dropped."""
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _rows(20)
    rows[5]["hint"] = "carry the one"
    rows[7]["tags"] = ["a", "b"]
    table = pq.read_table(_annotate(tmp_path, "out.parquet", _jsonl_taskset(tmp_path, rows)))
    assert table.column_names == ["id", "level", "difficulty", "question", "pass_rate", "hint", "tags"]
    got = table.to_pylist()
    assert got[5]["hint"] == "carry the one" and got[7]["tags"] == ["a", "b"]
    assert got[0]["hint"] is None and [r["question"] for r in got] == [r["question"] for r in rows]


def test_a_mixed_type_column_is_refused_before_any_rollout_for_parquet(tmp_path: Path, rollouts: list[int]) -> None:
    """Regression: a column holding numbers and strings failed inside pyarrow after every rollout."""
    pytest.importorskip("pyarrow")
    rows = _rows(20)
    rows[9]["level"] = "hard"
    data = _jsonl_taskset(tmp_path, rows)
    with pytest.raises(TasksetError, match=r"column 'level' cannot be written to Parquet: it holds int, str values"):
        _annotate(tmp_path, "out.parquet", data)
    assert rollouts == [] and not (tmp_path / "out.parquet.partial").exists()
    assert len(_annotate(tmp_path, "out.jsonl", data).read_text().splitlines()) == 20  # JSON Lines holds it


@pytest.mark.parametrize("column", ["when", "blob"])
def test_values_json_cannot_hold_are_refused_before_any_rollout(
    tmp_path: Path, rollouts: list[int], column: str
) -> None:
    """Regression: a Parquet taskset with a timestamp or binary column failed with a raw TypeError from
    ``json.dumps`` after the first chunk's rollouts."""
    pa = pytest.importorskip("pyarrow")
    import datetime

    import pyarrow.parquet as pq

    rows = _rows(20)
    values = {"when": [datetime.datetime(2026, 1, 1 + i % 28) for i in range(20)], "blob": [b"\x00\x01"] * 20}
    table = pa.table({"id": [r["id"] for r in rows], "difficulty": [r["difficulty"] for r in rows],
                      column: values[column]})
    pq.write_table(table, tmp_path / "tasks.parquet")
    data = {**SIM, "tasksets": [{"name": "graded", "path": "tasks.parquet"}]}
    for out in ("out.jsonl", "out.parquet"):
        with pytest.raises(TasksetError, match=rf"column '{column}' holds a (datetime|bytes) at row 0"):
            _annotate(tmp_path, out, data)
    assert rollouts == []


# -- 7: checkpoints of another pipeline ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "size", "why"), [
    ("graded", 20, r"tasksets\[0\]\.size: 20 in the checkpoint, 30 now"),
    ("other", 30, r"tasksets\[0\]\.name: 'other' in the checkpoint, 'graded' now"),
])
def test_a_checkpoint_of_another_taskset_is_refused_before_any_rollout(
    tmp_path: Path, rollouts: list[int], name: str, size: int, why: str
) -> None:
    """Regression: a checkpoint of a smaller taskset ended in an IndexError (the simulator's per-task state), one
    of another taskset of the same size was used silently."""
    other = {**SIM, "tasksets": [{**SIM["tasksets"][0], "name": name, "size": size}]}
    run = _train(tmp_path, "other-run", seed=1, data=other)
    with pytest.raises(CheckpointError, match=f"from a run of another pipeline: {why}"):
        _annotate(tmp_path, "out.jsonl", checkpoint=run)
    assert rollouts == [] and not (tmp_path / "out.jsonl.partial").exists()


def test_a_checkpoint_of_another_trainer_or_no_run_is_refused(tmp_path: Path, rollouts: list[int]) -> None:
    """A folder without a checkpoint, and a checkpoint of another trainer type, are flexkit errors too."""
    from flexkit.pipeline._checkpoint import save_state

    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        _annotate(tmp_path, "out.jsonl", checkpoint=tmp_path / "empty")
    fingerprint = pipeline_from_dict(SIM, base_dir=tmp_path).fingerprint()
    fingerprint["trainer"] = {"type": "toyrl", "params": {}}
    save_state(tmp_path / "toy" / "checkpoint", {"pipeline": {}, "extra": {"trainer": {"model": {}}}},
               meta={"fingerprint": fingerprint})
    with pytest.raises(CheckpointError, match="trainer: 'toyrl' in the checkpoint, 'simulator' now"):
        _annotate(tmp_path, "out.jsonl", checkpoint=tmp_path / "toy")
    assert rollouts == []
