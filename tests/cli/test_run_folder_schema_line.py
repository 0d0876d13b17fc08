"""A run folder's ``pipeline.toml`` keeps a valid ``#:schema`` path (relative to where it is written)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._folder import start_run_folder
from flexkit.run._schema_line import retarget_schema_line
from tests.fixtures import ROOT


def _schema_target(path: Path) -> Path:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("#:schema ")
    return (path.parent / first.removeprefix("#:schema ")).resolve()


def test_the_run_folder_copy_points_at_the_same_schema(tmp_path: Path) -> None:
    body = "\n".join(line for line in (ROOT / "examples" / "simulated.toml").read_text(encoding="utf-8").splitlines()
                     if not line.startswith("#:schema"))
    source = tmp_path / "project" / "pipelines" / "p.toml"
    source.parent.mkdir(parents=True)
    source.write_text("#:schema ../schemas/pipeline.schema.json\n" + body + "\n", encoding="utf-8")
    schema = tmp_path / "project" / "schemas" / "pipeline.schema.json"
    schema.parent.mkdir()
    schema.write_text((ROOT / "schemas" / "pipeline.schema.json").read_text(encoding="utf-8"), encoding="utf-8")
    run_dir = tmp_path / "elsewhere" / "runs" / "r1"
    start_run_folder(load_pipeline(source), run_dir)
    copied = run_dir / "pipeline.toml"
    assert _schema_target(copied) == schema.resolve() and _schema_target(copied).is_file()
    assert copied.read_text(encoding="utf-8").splitlines()[1:] == source.read_text(encoding="utf-8").splitlines()[1:]


def test_an_example_run_folder_keeps_its_schema(tmp_path: Path) -> None:
    example = ROOT / "examples" / "simulated.toml"
    start_run_folder(load_pipeline(example), tmp_path / "run")
    assert _schema_target(tmp_path / "run" / "pipeline.toml") == _schema_target(example)
    assert _schema_target(example).is_file()


def test_lines_other_than_a_relative_schema_path_are_copied_as_they_are() -> None:
    here, there = Path("/a/b"), Path("/c")
    for data in (b"[run]\n#:schema x.json\n", b"#:schema https://example.org/s.json\n[run]\n",
                 b"#:schema /abs/s.json\r\n", b""):
        assert retarget_schema_line(data, here, there) == data
    assert retarget_schema_line(b"#:schema ../s.json\r\n[run]\r\n", here, there) == b"#:schema ../a/s.json\r\n[run]\r\n"
    assert retarget_schema_line(b"#:schema s.json", here, Path("/a/b/runs/x")) == b"#:schema ../../s.json"


@given(st.binary(max_size=200))
def test_files_without_the_directive_are_copied_byte_for_byte(data: bytes) -> None:
    if not data.startswith(b"#:schema "):
        assert retarget_schema_line(data, Path("/x"), Path("/y/z")) == data
