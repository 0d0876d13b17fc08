"""The benchmark suite's smoke mode (``python benchmarks/run.py --quick``) runs and reports a row per selector and
size, so the suite cannot rot. No timing is asserted anywhere."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.loading import benchmark_module

RUN_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_module("run.py") as module:
        yield module


def test_quick_run_reports_every_selector_and_size(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())

    rows = {(row["selector"], row["n"]): row for row in result["rows"]}
    labels = [case[0] for case in bench.CASES] + [label for label, _ in bench.REFERENCE_CASES]
    assert set(rows) == {(label, n) for label in labels for n in bench.QUICK_SIZES}
    assert result["settings"]["sizes"] == list(bench.QUICK_SIZES)
    assert result["machine"]["cores"] >= 1
    for (label, n), row in rows.items():
        assert row["reps"] == 3
        for key in ("median_ms", "min_ms", "alone_ms"):
            assert math.isfinite(row[key]) and row[key] > 0, (label, n, key)
        assert row["state_bytes_per_task"] >= 0
        assert f"{n:,d}" in printed and label in printed
    for tau in ("1", "0"):
        row = rows[(f"difficulty_based tau={tau}", 10**5)]
        assert row["ratio"] == pytest.approx(row["reference_ms"] / row["median_ms"])
        assert 0 < row["state_bytes_per_task"] < 16.0  # α̃, β̃ and id of the recently observed tasks only
    assert rows[("shuffle", 10**4)]["state_bytes_per_task"] > 0  # its permutation


def test_state_bytes_counts_nested_arrays(bench: ModuleType) -> None:
    import numpy as np

    state = {"a": np.zeros(4), "b": {"c": np.zeros(3, dtype=np.float32), "d": [np.zeros(2, dtype=np.int8)]}, "e": 1}
    assert bench.state_bytes(state) == 32 + 12 + 2


def test_shuffle_batches_across_epoch_boundaries_do_not_break_the_benchmark(bench: ModuleType) -> None:
    # regression: at N = 1,000 a 256-task shuffle batch spans an epoch boundary every ~4 steps and can hold
    # a task twice; raw feedback with a repeated index was refused and the benchmark crashed
    shuffle = [case for case in bench.CASES if case[0] == "shuffle"]
    rows = bench.bench_size(1000, 12, 2, cases=shuffle, reference=False)
    assert [row["selector"] for row in rows] == ["shuffle"] and rows[0]["median_ms"] > 0
