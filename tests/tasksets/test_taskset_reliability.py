"""Taskset files that must never give a silent wrong state, a hang or a late failure: paths through symbolic
links, FIFOs, rows that can never be read, files changed under a reader, and thousands of open tasksets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexkit._files import NotRegularFileError, open_regular, require_regular_file, resolve_path
from flexkit.errors import CheckpointError, FlexkitError, TasksetError
from flexkit.tasksets import FileStorageConfig, JsonlTaskset, JsonTaskset, open_file_taskset
from flexkit.tasksets._base import check_rows
from flexkit.tasksets._fdpool import POOL, FdPool
from tests.fixtures import ROOT

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def open_ts(path: Path, base_dir: Path | None = None, **config: Any) -> Any:
    return open_file_taskset(FileStorageConfig(path=str(path), **config), name="t", base_dir=base_dir or path.parent)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- paths are resolved as the operating system resolves them -------------------------------------------


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_dotdot_after_a_symlink_opens_the_file_the_os_opens(tmp_path: Path) -> None:
    # base/link -> other/deep ; base/link/../data.jsonl is other/data.jsonl for the OS, base/data.jsonl lexically
    (tmp_path / "other" / "deep").mkdir(parents=True)
    (tmp_path / "base").mkdir()
    os.symlink(tmp_path / "other" / "deep", tmp_path / "base" / "link")
    write_rows(tmp_path / "other" / "data.jsonl", [{"who": "target"}])
    write_rows(tmp_path / "base" / "data.jsonl", [{"who": "lexical"}])
    with open(tmp_path / "base" / "link" / ".." / "data.jsonl") as f:  # what the OS opens
        assert json.loads(f.readline()) == {"who": "target"}
    ts = open_ts(Path("link/../data.jsonl"), base_dir=tmp_path / "base")
    assert ts.read([0]) == [{"who": "target"}]
    assert ts.path == str(tmp_path / "other" / "data.jsonl")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_symlinked_file_keeps_its_own_name_for_the_format(tmp_path: Path) -> None:
    blob = write_rows(tmp_path / "blob-without-suffix", [{"a": 1}])  # e.g. a Hugging Face cache blob
    os.symlink(blob, tmp_path / "tasks.jsonl")
    ts = open_ts(tmp_path / "tasks.jsonl")
    assert isinstance(ts, JsonlTaskset) and ts.read([0]) == [{"a": 1}]
    assert resolve_path(tmp_path / "tasks.jsonl") == str(tmp_path / "tasks.jsonl")


def test_resolve_path_handles_dot_components(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert resolve_path(tmp_path / "a" / "..") == str(tmp_path)
    assert resolve_path(tmp_path / "a" / "." / "x.jsonl") == str(tmp_path / "a" / "x.jsonl")


# -- only regular files are opened ---------------------------------------------------------------------


@needs_fifo
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_a_fifo_taskset_is_refused_not_waited_on(tmp_path: Path, suffix: str) -> None:
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    with pytest.raises(TasksetError, match=r"is a FIFO \(named pipe\), not a regular file"):
        open_ts(fifo)


@needs_fifo
@pytest.mark.parametrize("reader", [JsonlTaskset, JsonTaskset])
def test_readers_refuse_a_fifo_themselves(tmp_path: Path, reader: type) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(TasksetError, match="FIFO"):
        reader(str(fifo), name="t")


@needs_fifo
def test_file_helpers(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="FIFO"):
        open_regular(fifo)
    with pytest.raises(IsADirectoryError):
        open_regular(tmp_path)
    with pytest.raises(CheckpointError, match=r"checkpoint file .*pipe is a FIFO \(named pipe\), not a regular"):
        require_regular_file(fifo, "checkpoint file", CheckpointError)
    with pytest.raises(FlexkitError, match="is a directory"):
        require_regular_file(tmp_path, "checkpoint file")
    require_regular_file(tmp_path / "missing", "checkpoint file")  # the caller's open reports a missing file
    regular = tmp_path / "f"
    regular.write_text("x")
    require_regular_file(regular, "checkpoint file")
    fd, st = open_regular(regular)
    os.close(fd)
    assert st.st_size == 1


@needs_fifo
def test_validate_refuses_a_fifo_taskset_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "tasks.jsonl")
    pipeline = tmp_path / "p.toml"
    pipeline.write_text('[run]\nbatch_size = 1\n[[tasksets]]\nname = "t"\npath = "tasks.jsonl"\n')
    result = subprocess.run([sys.executable, "-m", "flexkit", "validate", str(pipeline)], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "tasksets[0]: taskset 't'" in result.stderr and "FIFO" in result.stderr


# -- what can never be read is refused when the file is opened --------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[{"a": 1}, {"a": 2}]\n', r"line 1: a row must be a JSON object, got list \(the file looks like one JSON "
                                    r"array: name it \.json"),
        (b'[\n  {"a": 1},\n  {"a": 2}\n]\n', r"line 1: invalid JSON: .*looks like one JSON array"),
        (b'{"a": 1}\n{"a":\n 2}\n', r"line 2: invalid JSON"),  # a pretty-printed object
        (b'{"a": 1}\n{"a": 2}\n{"a": 3', r"line 3: invalid JSON"),  # a torn last line
        (b'{"a": 1}\r\n\r\n7\r\n', r"line 3: a row must be a JSON object, got int"),
        ('{"a": 1}\n{"a": 2}\n'.encode("utf-16"), r"line 1: the file starts with a UTF-16 LE byte-order mark"),
        ('{"a": 1}\n{"a": 2}\n'.encode("utf-16-be"), r"line 1: invalid JSON: a NUL byte; the file is not UTF-8"),
        (b'{"a": 1}\n{"a": "x\x00"}\n', r"line 2: invalid JSON: a NUL byte"),
        (b'{"a": 1}\n\n{"a": "\xc3("}\n', r"line 3: invalid JSON: not UTF-8 text \(byte 0xc3\)"),
    ],
)
def test_rows_that_can_never_be_read_are_refused_at_open(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(TasksetError, match=message):
        open_ts(path)


def test_open_time_checks_hold_across_index_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flexkit.tasksets import _jsonl as jsonl

    monkeypatch.setattr(jsonl, "_INDEX_CHUNK", 64)
    good = [{"id": i, "text": "é" * (i % 7)} for i in range(300)]
    path = write_rows(tmp_path / "t.jsonl", good)
    assert open_ts(path).read(range(300)) == good
    lines = path.read_bytes().splitlines(keepends=True)
    lines[250] = b'"not an object"\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(TasksetError, match="line 251: a row must be a JSON object, got str"):
        open_ts(path)


def test_valid_variants_still_open(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n  {"a": 2}  \n\xef\xbb\xbf{"a": 3}\n\t\n{"a": {"b": [1, "}"]}}')
    assert open_ts(path).read(range(4)) == [{"a": 1}, {"a": 2}, {"a": 3}, {"a": {"b": [1, "}"]}}]


def test_check_rows_finds_a_malformed_line_in_the_middle(tmp_path: Path) -> None:
    rows = [{"id": i} for i in range(1000)]
    path = write_rows(tmp_path / "t.jsonl", rows)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[600] = b'{"id": 600,}\n'  # looks like an object, is not JSON: found by a full pass
    path.write_bytes(b"".join(lines))
    ts = open_ts(path)
    assert ts.read([0, 999]) == [rows[0], rows[999]]  # opening is cheap and reads what it can
    with pytest.raises(TasksetError, match=r"line 601: invalid JSON"):
        ts.check_rows()
    with pytest.raises(TasksetError, match=r"line 601: invalid JSON"):
        check_rows(ts)


def test_check_rows_of_every_reader(tmp_path: Path) -> None:
    rows = [{"id": i} for i in range(10)]
    assert open_ts(write_rows(tmp_path / "t.jsonl", rows)).check_rows() == 10
    (tmp_path / "t.json").write_text(json.dumps(rows))
    assert open_ts(tmp_path / "t.json").check_rows() == 10

    class ThirdParty:  # only len/read: checked by reading every row in batches
        def __init__(self) -> None:
            self.seen: list[int] = []

        def __len__(self) -> int:
            return 5000

        def read(self, indices: Any) -> list[dict[str, Any]]:
            self.seen.extend(int(i) for i in indices)
            return [{} for _ in indices]

    third = ThirdParty()
    assert check_rows(third) == 5000 and third.seen == list(range(5000))


# -- a file changed under a reader is refused, never read at stale offsets -------------------------------------


def test_a_file_replaced_after_indexing_is_refused(tmp_path: Path) -> None:
    rows = [{"id": i, "text": "abc"} for i in range(10)]
    path = write_rows(tmp_path / "t.jsonl", rows)
    ts = open_ts(path)
    ts.close()
    replacement = tmp_path / "new.jsonl"
    write_rows(replacement, [{"id": i, "text": "abcdefgh"} for i in range(10)])  # longer rows: shifted offsets
    os.replace(replacement, path)
    with pytest.raises(TasksetError, match="the file changed since it was indexed"):
        ts.read([3])


def test_a_file_rewritten_with_the_same_size_is_refused(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "t.jsonl", [{"id": i} for i in range(10)])
    ts = open_ts(path)
    st = path.stat()
    path.write_bytes(path.read_bytes().replace(b'"id"', b'"ID"'))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(TasksetError, match="changed"):
        ts.read([0])


# -- descriptors are pooled: thousands of tasksets fit the open-file limit ------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="resource limits are POSIX")
def test_1200_tasksets_under_a_low_open_file_limit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, os, resource, sys
        from pathlib import Path
        from flexkit.tasksets import JsonlTaskset
        root = Path(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        tasksets = []
        for t in range(1200):
            path = root / f"t{t}.jsonl"
            path.write_text("".join(json.dumps({"t": t, "i": i}) + "\\n" for i in range(3)))
            tasksets.append(JsonlTaskset(str(path), name=f"t{t}"))
        for rounds in range(2):
            for t, ts in enumerate(tasksets):
                assert ts.read([2, 0]) == [{"t": t, "i": 2}, {"t": t, "i": 0}]
                assert ts.column("i").tolist() == [0, 1, 2]
        open_fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
        print("ok", open_fds)
        """
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    status, open_fds = result.stdout.split()
    assert status == "ok" and int(open_fds) < 200


def test_pool_keeps_at_most_capacity_idle_descriptors(tmp_path: Path) -> None:
    pool = FdPool(capacity=3)
    paths = [write_rows(tmp_path / f"{i}.jsonl", [{"i": i}]) for i in range(6)]
    opened: list[int] = []

    def opener(p: Path) -> Any:
        def open_it() -> int:
            fd = os.open(p, os.O_RDONLY)
            opened.append(fd)
            return fd
        return open_it

    for key, p in enumerate(paths):
        with pool.borrow(key, opener(p)) as fd:
            assert os.pread(fd, 100, 0).startswith(b"{")
    assert len(pool) == 3 and len(opened) == 6
    with pool.borrow(5, opener(paths[5])):  # still open: no new descriptor
        pass
    assert len(opened) == 6
    with pool.borrow(0, opener(paths[0])) as fd0:  # reopened; evicts the least recently used idle one
        with pool.borrow(1, opener(paths[1])), pool.borrow(2, opener(paths[2])), pool.borrow(4, opener(paths[4])):
            assert len(pool) >= 3
        pool.discard(0)  # borrowed: closed only when given back
        assert os.pread(fd0, 100, 0).startswith(b"{")
    with pytest.raises(OSError):
        os.fstat(fd0)
    pool.clear()
    assert len(pool) == 0
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_pool_retries_after_running_out_of_descriptors(tmp_path: Path) -> None:
    import errno

    pool = FdPool(capacity=10)
    path = write_rows(tmp_path / "a.jsonl", [{"a": 1}])
    with pool.borrow("idle", lambda: os.open(path, os.O_RDONLY)):
        pass
    calls = []

    def flaky() -> int:
        calls.append(len(pool))
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return os.open(path, os.O_RDONLY)

    with pool.borrow("new", flaky):
        pass
    assert calls == [1, 0]  # the idle descriptor was closed before the retry
    pool.clear()


def test_tasksets_hold_no_descriptor_when_closed_or_collected(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "t.jsonl", [{"i": i} for i in range(5)])
    POOL.clear()
    ts = JsonlTaskset(str(path), name="t")
    assert len(POOL) == 1
    ts.close()
    assert len(POOL) == 0
    assert ts.read([1]) == [{"i": 1}]
    del ts
    import gc

    gc.collect()
    assert len(POOL) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_with_its_own_descriptors(tmp_path: Path) -> None:
    rows = [{"i": i} for i in range(50)]
    ts = JsonlTaskset(str(write_rows(tmp_path / "t.jsonl", rows)), name="t")
    ts.read([0])
    script = textwrap.dedent(
        """
        import json, os, sys
        from flexkit.tasksets import JsonlTaskset
        ts = JsonlTaskset(sys.argv[1], name="t")
        ts.read([0])
        pid = os.fork()
        if pid == 0:
            ok = ts.read([49, 3]) == [{"i": 49}, {"i": 3}]
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ts.read([7]) == [{"i": 7}]
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", script, ts.path], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
    assert np.array_equal(ts.column("i"), np.arange(50))
