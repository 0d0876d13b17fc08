"""The Ray scheduler-actor benchmark's smoke mode (``python benchmarks/service.py --quick``) runs and reports a row per
worker count with positive counts, so the benchmark cannot rot. No timing is asserted anywhere. The Ray run is
skipped when ray or flexkit-rft-ray is not installed."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.loading import benchmark_module

SERVICE_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "service.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_module("service.py") as module:
        yield module


def test_quick_run_reports_every_worker_count(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ray")
    pytest.importorskip("flexkit_ray")
    out = tmp_path / "service.json"
    assert bench.main(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())

    assert set(result) == {"machine", "settings", "ledger_alone", "rows", "capacity"}
    assert result["settings"]["workers"] == list(bench.QUICK_WORKERS) and result["settings"]["reps"] == 1
    assert result["machine"]["cores"] >= 1 and result["machine"]["ray"]
    assert result["ledger_alone"]["calls"] >= 5 and result["ledger_alone"]["lease_us"] > 0
    assert [row["workers"] for row in result["rows"]] == list(bench.QUICK_WORKERS)
    for row in result["rows"]:
        assert row["client_actors"] == row["workers"] and row["reps"] == 1
        assert row["leases"] > 0 and row["feedbacks"] > 0
        for key in ("leases_per_s", "feedbacks_per_s", "lease_p50_ms", "lease_p99_ms", "feedback_p50_ms",
                    "feedback_p99_ms"):
            assert math.isfinite(row[key]) and row[key] > 0, key
        assert row["actor_cpu"] >= 0 and row["clients_cpu"] >= 0
        assert len(row["leases_per_s_reps"]) == 1
    cap = result["capacity"]
    assert cap["workers_served"] == pytest.approx(cap["max_leases_per_s"] * cap["step_s"])
    assert "one actor:" in printed and "leases/s" in printed


def test_window_stats_and_capacity(bench: ModuleType) -> None:
    spans = [(0.5, 1.5), (1.0, 1.2), (1.5, 2.5), (2.0, 3.5)]  # (start, finish); the window is [1, 3]
    stats = bench._window_stats(spans, 1.0, 3.0)
    assert stats["calls"] == 3 and stats["per_s"] == pytest.approx(1.5)
    assert stats["p50_ms"] == pytest.approx(600.0)  # calls started and finished inside: 0.2 s and 1.0 s
    rows = [{"workers": 1, "leases_per_s": 100.0}, {"workers": 8, "leases_per_s": 250.0}]
    assert bench.capacity(rows, step_s=4.0) == {"max_leases_per_s": 250.0, "at_workers": 8, "step_s": 4.0,
                                               "workers_served": 1000.0}
