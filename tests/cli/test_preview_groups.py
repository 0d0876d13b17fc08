"""``flexkit preview`` shows the drawn tasks' mix over the selector's grouping column whatever its type: a string
label, a number column cut into the selector's ``bins``, or (for a selector that groups by nothing) the taskset's
first categorical column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexkit.cli.main import main
from flexkit.pipeline._grouping import first_categorical_column
from flexkit.pipeline._pipeline import load_pipeline

SOURCES = ("gsm8k", "math", "aime")


def _pipeline(tmp_path: Path, selector: str) -> Path:
    rows = [{"prompt": f"question {i}", "id": i, "source": SOURCES[i % 3], "difficulty": i / 60} for i in range(60)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 12\ntotal_steps = 5\n\n[[tasksets]]\nname = "mixed"\npath = "t.jsonl"\n\n'
                    f"[tasksets.selector]\n{selector}\n")
    return path


def _records(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:  # type: ignore[type-arg]
    assert main(["preview", str(path), "--steps", "3", "--json", *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _source_of(index: int) -> str:
    return SOURCES[index % 3]


def test_a_string_grouping_column_is_counted_per_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _pipeline(tmp_path, 'type = "frontier"\nfeature_keys = ["source"]')
    for record in _records(path, capsys, "--feedback", "random"):
        part = record["groups"]["mixed"]
        expected: dict[str, int] = {}
        for index in record["tasksets"]["mixed"]:
            expected[_source_of(index)] = expected.get(_source_of(index), 0) + 1
        assert part == {"by": "source", "counts": dict(sorted(expected.items()))}
        assert "levels" not in record  # no integer level column
    assert main(["preview", str(path), "--steps", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("  by source: aime: ")


def test_a_float_column_is_cut_into_the_selectors_bins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _pipeline(tmp_path, 'type = "frontier"\nfeature_keys = ["difficulty"]\nbins = 3')
    for record in _records(path, capsys):
        part = record["groups"]["mixed"]
        assert part["by"] == "difficulty (3 bins)"
        assert set(part["counts"]) <= {"[-inf, 0.328)", "[0.328, 0.656)", "[0.656, inf)"}
        assert list(part["counts"]) == sorted(part["counts"], key=lambda name: ("-inf" not in name, name))
        low = sum(1 for index in record["tasksets"]["mixed"] if index / 60 < 0.328)
        assert part["counts"].get("[-inf, 0.328)", 0) == low
        assert sum(part["counts"].values()) == 12


def test_without_feature_keys_the_first_categorical_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _pipeline(tmp_path, 'type = "shuffle"')
    pipe = load_pipeline(path)
    try:
        # prompt and id are unique per row, difficulty is no label: source is the first category
        assert first_categorical_column(pipe.scheduler.entries[0].taskset) == "source"
    finally:
        pipe.scheduler.close()
    for record in _records(path, capsys):
        assert record["groups"]["mixed"]["by"] == "source"
        assert sum(record["groups"]["mixed"]["counts"].values()) == 12


def test_a_taskset_without_a_categorical_column_has_no_group_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"id": i, "x": i / 10}) + "\n" for i in range(20)))
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 4\ntotal_steps = 2\n\n[[tasksets]]\nname = "plain"\npath = "t.jsonl"\n')
    assert main(["preview", str(path), "--steps", "1", "--json"]) == 0
    assert "groups" not in json.loads(capsys.readouterr().out)
