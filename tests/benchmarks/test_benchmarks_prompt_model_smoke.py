"""The prompt-model benchmark's smoke mode (``python benchmarks/prompt_model.py --quick``) reports its row with
finite costs and the memory figures docs/task-selection.md quotes. No timing is asserted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.benchmarks.loading import benchmark_module


def test_quick_run_reports_the_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    with benchmark_module("prompt_model.py") as bench:
        assert bench.main(["--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["n"] for row in rows] == [10_000]
    row = rows[0]
    for key in ("build_s", "select_ms", "feedback_ms", "pool_score_s"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["features_kept"] and row["features_mb"] > 0
    assert 60 < row["state_kb"] < 80  # two floats per bucket (2^12 + 1) and the group posteriors
    assert "10,000" in capsys.readouterr().out
