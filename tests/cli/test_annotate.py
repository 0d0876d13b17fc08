"""flexkit annotate: measured pass rates per task, written next to the rows, with progress and resume."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from flexkit import FlexkitError, pipeline_from_dict
from flexkit.annotate._command import annotate
from flexkit.cli.main import main

DATA = {
    "run": {"batch_size": 16, "seed": 0, "total_steps": 5},
    "tasksets": [{"name": "graded", "storage_type": "simulated", "size": 100, "levels": [1, 2, 3, 4]}],
    "trainer": {"type": "simulator", "group_size": 4},
}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_pass_rates_follow_difficulty_and_rows_are_kept(tmp_path: Path) -> None:
    out = annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=tmp_path / "new" / "a.jsonl", samples=32,
                   column="start_pass_rate", progress=None)
    rows = _rows(out)
    assert len(rows) == 100 and not (tmp_path / "new" / "a.jsonl.partial").exists()  # the folder was made
    taskset = pipeline_from_dict(DATA, base_dir=tmp_path).scheduler.entries[0].taskset
    assert [{k: v for k, v in r.items() if k != "start_pass_rate"} for r in rows] == taskset.read(list(range(100)))
    rates = np.array([r["start_pass_rate"] for r in rows])
    assert ((rates * 32) % 1 == 0).all()  # 32 responses each: 8 rollouts of the group size 4
    levels = np.array([r["level"] for r in rows])
    by_level = [rates[levels == lv].mean() for lv in (1, 2, 3, 4)]
    assert by_level == sorted(by_level, reverse=True) and by_level[0] > by_level[-1] + 0.3


class _Interrupt(Exception):
    pass


class _StopAfter(io.StringIO):
    """A progress stream that interrupts the annotation after ``n`` chunks were written."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def write(self, text: str) -> int:
        self.n -= 1
        if self.n < 0:
            raise _Interrupt
        return super().write(text)


def test_an_interrupted_annotation_continues_where_it_stopped(tmp_path: Path) -> None:
    out = tmp_path / "b.jsonl"
    with pytest.raises(_Interrupt):
        annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=out, samples=4, progress=_StopAfter(2))
    partial = tmp_path / "b.jsonl.partial"
    written = partial.read_text().splitlines()
    assert len(written) == 1 + 3 * 16  # header + the chunks finished before the interruption
    with partial.open("a") as fh:
        fh.write('{"torn": ')  # a kill in the middle of a line
    progress = io.StringIO()
    annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=out, samples=4, progress=progress)
    rows = _rows(out)
    assert len(rows) == 100
    assert rows[:48] == [json.loads(line) for line in written[1:]]  # finished rows are kept as they were
    assert progress.getvalue().splitlines()[0].startswith("annotated 64/100")
    with pytest.raises(FlexkitError, match="written by an older flexkit version"):
        (tmp_path / "c.jsonl.partial").write_text(json.dumps({"flexkit_annotate": {"samples": 1}}) + "\n")
        annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=tmp_path / "c.jsonl", samples=4, progress=None)
    with pytest.raises(_Interrupt):  # a partial of samples=4, column pass_rate
        annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=out, samples=4, progress=_StopAfter(0))
    with pytest.raises(FlexkitError, match=r"other arguments or inputs: --samples; --column changed since"):
        annotate(pipeline_from_dict(DATA, base_dir=tmp_path), out=out, samples=8, column="other", progress=None)


def test_cli_annotate_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = tmp_path / "p.toml"
    pipeline.write_text('[run]\nbatch_size = 16\n[[tasksets]]\nname = "g"\nstorage_type = "simulated"\nsize = 40\n'
                        '[trainer]\ntype = "simulator"\n')
    assert main(["annotate", str(pipeline), "-k", "8", "--out", str(tmp_path / "x.jsonl"), "--quiet"]) == 0
    assert len(_rows(tmp_path / "x.jsonl")) == 40
    assert main(["annotate", str(pipeline), "-k", "8", "--out", str(tmp_path / "x.csv"), "--quiet"]) == 1
    assert "must end in .jsonl or .parquet" in capsys.readouterr().err
    assert main(["annotate", str(pipeline), "-k", "0", "--out", str(tmp_path / "y.jsonl")]) == 2
    capsys.readouterr()
    assert main(["annotate", str(pipeline), "-k", str(10**20), "--out", str(tmp_path / "y.jsonl")]) == 1
    assert "samples must be between 1 and 1,000,000" in capsys.readouterr().err  # it used to loop for ever
    assert main(["annotate", str(pipeline), "-k", "8", "--out", str(tmp_path / "z.jsonl"), "--taskset", "nope",
                 "--quiet"]) == 1
    assert "no taskset 'nope'" in capsys.readouterr().err


def test_a_trained_checkpoint_is_the_stronger_reference(tmp_path: Path) -> None:
    from flexkit.run._runner import run_pipeline

    pq = pytest.importorskip("pyarrow.parquet")  # the stronger reference is written as Parquet

    trained = {**DATA, "run": {**DATA["run"], "total_steps": 40, "eval_every": 0},
               "trainer": {"type": "simulator", "group_size": 4, "learning_rate": 1.0}}
    run_pipeline(pipeline_from_dict(trained, base_dir=tmp_path), run_dir=tmp_path / "run", progress=None)
    start = annotate(pipeline_from_dict(trained, base_dir=tmp_path), out=tmp_path / "s.jsonl", samples=16,
                     progress=None)
    strong = annotate(pipeline_from_dict(trained, base_dir=tmp_path), out=tmp_path / "t.parquet", samples=16,
                      checkpoint=tmp_path / "run", progress=None)
    strong_rates = np.array(pq.read_table(strong).column("pass_rate").to_pylist())
    start_rates = np.array([r["pass_rate"] for r in _rows(start)])
    assert strong_rates.mean() > start_rates.mean() + 0.05
    with pytest.raises(FlexkitError, match=r"no checkpoint in .*missing"):
        annotate(pipeline_from_dict(trained, base_dir=tmp_path), out=tmp_path / "u.jsonl", samples=4,
                 checkpoint=tmp_path / "missing", progress=None)
