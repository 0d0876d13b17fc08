"""Tests of taskset storage: JSON Lines indexing and reads, JSON, Parquet, in-memory tasksets, features."""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit import tasksets
from flexkit.errors import FlexkitError, TasksetError
from flexkit.plugins.builtins import flexkit_register_storages
from flexkit.tasksets import (
    FileStorageConfig,
    InMemoryTaskset,
    JsonlTaskset,
    JsonTaskset,
    LazyFeatures,
    Taskset,
    lazy_features,
    open_file_taskset,
    resolve_format,
)


def write_jsonl(path: Path, rows: list[dict[str, Any]], newline: str = "\n") -> Path:
    path.write_text("".join(json.dumps(r) + newline for r in rows), encoding="utf-8")
    return path


def open_ts(path: Path, name: str = "math", **config: Any) -> Taskset:
    return open_file_taskset(FileStorageConfig(path=str(path), **config), name=name, base_dir=path.parent)


ROWS = [{"id": i, "prompt": f"question {i} ü", "difficulty": i / 10, "passes": i % 3} for i in range(10)]


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "math.jsonl", ROWS)


# -- JSON Lines: rows -----------------------------------------------------------------------------------


def test_read_exact_rows_in_asked_order_with_repeats(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    assert isinstance(ts, JsonlTaskset)
    assert len(ts) == 10
    assert ts.read([0]) == [ROWS[0]]
    indices = [7, 2, 9, 2, 0, 7, 7]
    assert ts.read(indices) == [ROWS[i] for i in indices]
    assert ts.read(np.array([5, 4], dtype=np.int32)) == [ROWS[5], ROWS[4]]
    assert ts.read([]) == []


def test_read_returns_independent_dicts(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    first, again = ts.read([3, 3])
    assert first is not again
    first["taskset_id"] = 1
    assert again == ROWS[3]
    assert ts.read([3]) == [ROWS[3]]


@pytest.mark.parametrize("bad", [[10], [-1], [0, 11]])
def test_out_of_range_index_is_an_error(jsonl: Path, bad: list[int]) -> None:
    with pytest.raises(
        TasksetError, match=r"taskset 'math' .*math\.jsonl\): index -?\d+ is out of range for 10"
    ):
        open_ts(jsonl).read(bad)


@pytest.mark.parametrize("bad", [[1.0], [True], [[0, 1]], ["0"]])
def test_non_integer_indices_are_an_error(jsonl: Path, bad: list[Any]) -> None:
    with pytest.raises(TasksetError, match="indices must"):
        open_ts(jsonl).read(bad)


def test_blank_lines_crlf_and_no_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        b'\n{"a": 1}\r\n\r\n   \n\t\r\n  {"a": 2}\n{"a": 3}\r\n\n{"a": 4}'  # last line without newline
    )
    ts = open_ts(path)
    assert len(ts) == 4
    assert ts.read([3, 2, 1, 0]) == [{"a": 4}, {"a": 3}, {"a": 2}, {"a": 1}]
    assert [ts.line_number(i) for i in range(4)] == [2, 6, 7, 9]
    assert ts.column("a").tolist() == [1.0, 2.0, 3.0, 4.0]


def test_trailing_blank_tail_without_newline_is_not_a_row(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n  \r')
    assert open_ts(path).read([0]) == [{"a": 1}] and len(open_ts(path)) == 1


LINE = st.one_of(
    st.builds(
        lambda i, pad: " " * pad + json.dumps({"i": i, "s": "x" * (i % 7)}),
        st.integers(0, 10**6),
        st.integers(0, 2),
    ),
    st.sampled_from(["", " ", "\t", "\r", "  \r"]),  # blank lines
)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(LINE, max_size=40),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    chunk=st.integers(1, 48),
)
def test_index_matches_a_naive_parse(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], crlf: bool, final_newline: bool, chunk: int
) -> None:
    text = ("\r\n" if crlf else "\n").join(lines) + ("\n" if final_newline and lines else "")
    path = tmp_path_factory.mktemp("idx") / "t.jsonl"
    path.write_bytes(text.encode())
    expected = [(n, json.loads(s)) for n, s in enumerate(text.split("\n"), 1) if s.strip()]
    with mock.patch.object(tasksets._jsonl, "_INDEX_CHUNK", chunk):  # lines straddle many chunk boundaries
        if not expected:
            with pytest.raises(TasksetError, match="empty taskset"):
                open_ts(path)
            return
        ts = open_ts(path)
    assert isinstance(ts, JsonlTaskset)
    assert len(ts) == len(expected)
    assert ts.read(range(len(ts))) == [row for _, row in expected]
    assert [ts.line_number(i) for i in range(len(ts))] == [n for n, _ in expected]
    ts.close()


def test_large_file_offsets_and_lazy_rows(tmp_path: Path) -> None:
    n = 100_000
    path = tmp_path / "big.jsonl"
    rows = [{"id": i, "p": "x" * (i % 13), "d": (i * 7919) % 1000 / 1000} for i in range(n)]
    write_jsonl(path, rows)
    spy = mock.patch.object(JsonlTaskset, "_parse", autospec=True, side_effect=JsonlTaskset._parse)
    with mock.patch.object(tasksets._jsonl, "_INDEX_CHUNK", 1 << 16), spy as parse:  # many chunks
        ts = open_ts(path)
        assert parse.call_count == 0  # indexing parses nothing
        assert len(ts) == n
        assert ts.read([99_999]) == [rows[99_999]]
        assert parse.call_count == 1
    sample = np.random.default_rng(0).integers(0, n, size=500)
    assert ts.read(sample) == [rows[i] for i in sample]
    contiguous = list(range(40_000, 40_256))  # one merged read
    assert ts.read(contiguous) == rows[40_000:40_256]
    column = ts.column("d")
    assert column.dtype == np.float64 and column.shape == (n,)
    np.testing.assert_array_equal(column, [r["d"] for r in rows])


def test_invalid_json_line_reports_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2,}\n{"a": 3}\n')
    ts = open_ts(path)  # opening does not parse rows
    assert ts.read([0, 2]) == [{"a": 1}, {"a": 3}]
    with pytest.raises(TasksetError, match=r"taskset 'math' \(.*bad\.jsonl\): line 3: invalid JSON"):
        ts.read([1])
    with pytest.raises(TasksetError, match="line 3: invalid JSON"):
        ts.column("a")


@pytest.mark.parametrize(
    ("line", "kind"), [("[1, 2]", "list"), ("3", "int"), ("null", "null"), ('"s"', "str")]
)
def test_row_that_is_not_an_object_is_an_error(tmp_path: Path, line: str, kind: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n' + line + "\n")
    with pytest.raises(TasksetError, match=f"line 2: a row must be a JSON object, got {kind}"):
        open_ts(path).read([1])


def test_two_values_on_one_line_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"a": 2} {"a": 3}\n')
    with pytest.raises(TasksetError, match="line 2: invalid JSON: Extra data"):
        open_ts(path).read([1])


def test_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    assert open_ts(path).read([0, 1]) == [{"a": 1}, {"a": 2}]


def test_invalid_utf8_is_reported_with_line_number(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(TasksetError, match="line 2: invalid JSON"):
        open_ts(path).read([1])


# -- opening errors and paths ---------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    config = FileStorageConfig(path="data/math.jsonl")
    with pytest.raises(TasksetError) as info:
        open_file_taskset(config, name="math", base_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"taskset 'math' ({tmp_path / 'data' / 'math.jsonl'}): no such file")
    assert "'data/math.jsonl' resolved against" in message
    assert info.value.taskset == "math" and info.value.path == str(tmp_path / "data" / "math.jsonl")
    assert isinstance(info.value, FlexkitError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("content", [b"", b"\n\n", b"  \r\n\t\n"])
def test_empty_jsonl_is_an_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    with pytest.raises(TasksetError, match=r"taskset 'e' \(.*empty\.jsonl\): empty taskset"):
        open_ts(path, name="e")


def test_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(TasksetError, match="is a directory"):
        open_ts(tmp_path / "dir.jsonl")


def test_relative_path_resolved_against_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "math.jsonl", ROWS)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory does not matter
    ts = open_file_taskset(FileStorageConfig(path="data/math.jsonl"), name="math", base_dir=tmp_path)
    assert ts.path == str(tmp_path / "data" / "math.jsonl")
    assert ts.read([1]) == [ROWS[1]]
    ts = open_file_taskset(FileStorageConfig(path="../data/math.jsonl"), name="m", base_dir=str(elsewhere))
    assert ts.path == str(tmp_path / "data" / "math.jsonl")
    # absolute paths ignore base_dir
    absolute = str(tmp_path / "data" / "math.jsonl")
    ts = open_file_taskset(FileStorageConfig(path=absolute), name="m", base_dir="/nonexistent")
    assert ts.path == absolute
    # without base_dir: the working directory
    monkeypatch.chdir(tmp_path)
    assert open_file_taskset(FileStorageConfig(path="data/math.jsonl"), name="m").path == absolute


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_jsonl(tmp_path / "math.jsonl", ROWS)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    ts = open_file_taskset(FileStorageConfig(path="~/math.jsonl"), name="m", base_dir="/nonexistent")
    assert ts.path == str(tmp_path / "math.jsonl")


def test_format_from_suffix_and_explicit(tmp_path: Path) -> None:
    assert resolve_format("a/b.JSONL") == "jsonl"
    assert resolve_format("b.ndjson") == "jsonl"
    assert resolve_format("b.json") == "json"
    assert resolve_format("b.parquet") == "parquet"
    assert resolve_format("b.txt", "jsonl") == "jsonl"
    path = write_jsonl(tmp_path / "tasks.txt", ROWS)
    with pytest.raises(
        TasksetError, match=r"taskset 'math' \(.*tasks\.txt\): cannot tell the format.*'\.txt'"
    ):
        open_ts(path)
    assert open_ts(path, format="jsonl").read([2]) == [ROWS[2]]


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        FileStorageConfig(path="a.jsonl", format="csv")
    with pytest.raises(TypeError):
        FileStorageConfig()  # type: ignore[call-arg]
    with pytest.raises(TasksetError, match="path is empty"):
        open_file_taskset(FileStorageConfig(path=""), name="m", base_dir=".")


def test_regression_a_path_with_a_nul_character_is_a_taskset_error() -> None:
    """Found by the config fuzz test: the OS's bare ValueError ("embedded null byte") became a ComponentError
    blaming the file storage, not an error on the taskset's path."""
    with pytest.raises(TasksetError, match=r"taskset 'm'.*contains a NUL character"):
        open_file_taskset(FileStorageConfig(path="data/a.jsonl\x00.txt"), name="m", base_dir=".")


def test_plugin_registers_the_file_storage() -> None:
    registered: list[tuple[Any, ...]] = []
    flexkit_register_storages(register=lambda *args, **kwargs: registered.append(args))
    assert [args for args in registered if args[0] == "file"] == [("file", open_file_taskset, FileStorageConfig)]


def test_factory_accepts_future_context(jsonl: Path) -> None:
    ts = open_file_taskset(FileStorageConfig(path="math.jsonl"), name="m", base_dir=jsonl.parent, extra=1)
    assert len(ts) == 10


# -- features -------------------------------------------------------------------------------------------


def test_column_values_cached_and_read_only(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    column = ts.column("difficulty")
    np.testing.assert_array_equal(column, [r["difficulty"] for r in ROWS])
    assert column.dtype == np.float64
    assert ts.column("difficulty") is column
    with pytest.raises(ValueError):
        column[0] = 5.0
    assert ts.column("passes").tolist() == [float(i % 3) for i in range(10)]


def test_missing_feature_key_with_did_you_mean(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    pattern = (
        r"taskset 'math' \(.*math\.jsonl\): no feature 'dificulty' in the first row; "
        r"did you mean 'difficulty'\?"
    )
    with pytest.raises(TasksetError, match=pattern):
        ts.features(["dificulty"])  # checked when the mapping is made
    with pytest.raises(TasksetError, match=pattern):
        ts.column("dificulty")
    with pytest.raises(TasksetError, match=pattern):
        LazyFeatures(ts, ["dificulty"])["dificulty"]  # and on access


def test_feature_missing_in_a_later_row_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"d": 1}\n\n{"d": 2}\n{"e": 3}\n')
    ts = open_ts(path)
    features = ts.features(["d"])  # the first row has it
    with pytest.raises(TasksetError, match="no feature 'd' at line 4"):
        features["d"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('"hard"', '"hard"'),
        ("true", "true"),
        ("null", "null"),
        ("NaN", "nan"),
        ("Infinity", "inf"),
        ("[1]", r"\[1\]"),
    ],
)
def test_non_numeric_feature_is_an_error(tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"d": 0.5}\n{"d": ' + value + "}\n")
    with pytest.raises(TasksetError, match=f"feature 'd' must be a finite number, got {shown} at line 2"):
        open_ts(path).column("d")


def test_features_mapping_is_lazy(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    with mock.patch.object(JsonlTaskset, "column", autospec=True, side_effect=JsonlTaskset.column) as column:
        features = ts.features(["difficulty", "passes", "difficulty"])
        assert list(features) == ["difficulty", "passes"] and len(features) == 2
        assert "passes" in features and "id" not in features
        assert column.call_count == 0 and features.loaded == ()
        np.testing.assert_array_equal(features["passes"], [i % 3 for i in range(10)])
        assert features["passes"] is features["passes"]
        assert column.call_count == 1
        assert features.loaded == ("passes",)
        with pytest.raises(KeyError):
            features["id"]  # not requested
        assert features.get("id") is None
    assert "difficulty" not in ts._columns  # never loaded


def test_lazy_features_for_third_party_storages() -> None:
    class Minimal:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def __len__(self) -> int:
            return 2

        def column(self, key: str) -> np.ndarray:
            self.calls.append(key)
            return np.array([1.0, 2.0])

    storage = Minimal()
    features = lazy_features(storage, ["a", "b"])
    assert storage.calls == []
    assert features["b"].tolist() == [1.0, 2.0] and storage.calls == ["b"]
    assert isinstance(lazy_features(InMemoryTaskset("m", size=2), []), LazyFeatures)


# -- threads, pickling ----------------------------------------------------------------------------------


def test_concurrent_reads_get_the_right_rows(tmp_path: Path) -> None:
    rows = [{"id": i, "text": "y" * (i % 50)} for i in range(5000)]
    ts = open_ts(write_jsonl(tmp_path / "t.jsonl", rows))
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        try:
            for _ in range(100):
                idx = rng.integers(0, len(rows), size=int(rng.integers(1, 64)))
                if seed % 2:
                    idx = np.arange(idx[0], min(idx[0] + 100, len(rows)))  # contiguous, merged reads
                got = ts.read(idx)
                assert got == [rows[i] for i in idx]
            assert ts.column("id").tolist() == list(range(len(rows)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_pickle_and_close_then_read(jsonl: Path) -> None:
    ts = open_ts(jsonl)
    ts.close()
    assert ts.read([4]) == [ROWS[4]]  # reopens
    clone = pickle.loads(pickle.dumps(ts))
    assert clone.read([9, 1]) == [ROWS[9], ROWS[1]] and len(clone) == 10
    with open_ts(jsonl) as ctx:
        assert ctx.read([0]) == [ROWS[0]]
    assert "JsonlTaskset(name='math'" in repr(ts) and "rows=10" in repr(ts)


def test_shrunk_file_is_reported(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", ROWS)
    ts = open_ts(path)
    ts.close()
    path.write_text('{"id": 0}\n')
    with pytest.raises(TasksetError, match="changed"):
        ts.read([9])


# -- JSON -----------------------------------------------------------------------------------------------


def test_json_list_of_objects(tmp_path: Path) -> None:
    path = tmp_path / "math.json"
    path.write_text(json.dumps(ROWS, indent=2))
    ts = open_ts(path)
    assert isinstance(ts, JsonTaskset) and len(ts) == 10
    assert ts.read([3, 1, 3]) == [ROWS[3], ROWS[1], ROWS[3]]
    row = ts.read([3])[0]
    row["prompt"] = "changed"
    assert ts.read([3]) == [ROWS[3]]
    np.testing.assert_array_equal(ts.features(["difficulty"])["difficulty"], [r["difficulty"] for r in ROWS])
    with pytest.raises(TasksetError, match="did you mean 'passes'"):
        ts.column("pases")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"data": []}', "a .json taskset must hold a list of objects, got a dict"),
        ("[]", "empty taskset"),
        ('[{"a": 1}, 2]', "item 1: a row must be a JSON object, got int"),
        ('[\n{"a": 1},\n{"a": }\n]', "invalid JSON at line 3"),
    ],
)
def test_json_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(TasksetError, match=r"taskset 'math' \(.*t\.json\): " + message):
        open_ts(path)


def test_json_non_numeric_feature(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('[{"d": 1}, {"d": false}]')
    with pytest.raises(TasksetError, match="feature 'd' must be a finite number, got false at item 1"):
        open_ts(path).column("d")


# -- Parquet --------------------------------------------------------------------------------------------


def test_parquet(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "math.parquet"
    table = pa.Table.from_pylist(ROWS)
    pq.write_table(table, path, row_group_size=3)
    ts = open_ts(path)
    assert len(ts) == 10
    assert ts.read([8, 0, 8]) == [ROWS[8], ROWS[0], ROWS[8]]
    np.testing.assert_array_equal(ts.column("difficulty"), [r["difficulty"] for r in ROWS])
    assert ts.column("passes").dtype == np.float64
    with pytest.raises(TasksetError, match="did you mean 'difficulty'"):
        ts.features(["dificulty"])
    with pytest.raises(TasksetError, match="must be a numeric column"):
        ts.column("prompt")
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.Table.from_pylist([{"d": 1.0}, {"d": None}]), nulls)
    with pytest.raises(TasksetError, match="got null at row 1"):
        open_ts(nulls).column("d")
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"d": pa.array([], type=pa.float64())}), empty)
    with pytest.raises(TasksetError, match="empty taskset"):
        open_ts(empty)


def test_parquet_without_pyarrow_says_how_to_install(tmp_path: Path) -> None:
    path = tmp_path / "math.parquet"
    path.write_bytes(b"PAR1")
    with (
        mock.patch.dict(sys.modules, {"pyarrow": None, "pyarrow.parquet": None}),
        pytest.raises(TasksetError, match=r'taskset \'math\' \(.*\): .*pip install "flexkit-rft\[parquet\]"'),
    ):
        open_ts(path)


# -- in memory ------------------------------------------------------------------------------------------


def test_in_memory_rows_columns_and_size() -> None:
    ts = InMemoryTaskset("mem", rows=ROWS)
    assert len(ts) == 10 and ts.path is None
    assert ts.read([2, 2]) == [ROWS[2], ROWS[2]]
    ts.read([2])[0]["id"] = -1
    assert ROWS[2]["id"] == 2
    np.testing.assert_array_equal(ts.column("passes"), [i % 3 for i in range(10)])

    cols = InMemoryTaskset("mem", columns={"d": [0.1, 0.2, 0.3]})
    assert len(cols) == 3
    assert cols.read([1]) == [{"d": 0.2}]
    assert cols.features(["d"])["d"].tolist() == [0.1, 0.2, 0.3]
    with pytest.raises(TasksetError, match=r"^taskset 'mem': no feature 'e'"):
        cols.column("e")

    sized = InMemoryTaskset("mem", size=4)
    assert len(sized) == 4 and sized.read([3]) == [{}]
    assert len(sized.features([])) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give rows, columns or size"),
        ({"size": 0}, "empty taskset"),
        ({"rows": [{"a": 1}], "size": 2}, "lengths disagree"),
        ({"columns": {"a": [1.0, 2.0]}, "size": 3}, "lengths disagree"),
        ({"columns": {"a": [1.0, float("nan")]}}, "must be a finite number, got nan at row 1"),
        ({"columns": {"a": [[1.0]]}}, "flat array"),
        ({"rows": [1]}, "row 0: a row must be a dict"),
    ],
)
def test_in_memory_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TasksetError, match=message):
        InMemoryTaskset("mem", **kwargs)


def test_error_pickles() -> None:
    error = TasksetError("no such file", taskset="m", path=os.path.join("d", "m.jsonl"))
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
