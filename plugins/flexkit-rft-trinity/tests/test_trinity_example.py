"""examples/trinity/side_by_side.py runs (CPU, seconds) and shows what its docs page says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trinity", reason="the Trinity-RFT adapter's tests need trinity-rft (the test extra)")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def test_side_by_side_resumes_flexkit_exactly_and_trinity_not() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "trinity" / "side_by_side.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    out = done.stdout
    assert "flexkit difficulty_based: checkpoint" in out and "taskset state keys ['current_index', 'flexkit']" in out
    assert "trinity difficulty_based: checkpoint 92 bytes, taskset state keys ['current_index']" in out
    flexkit_part = out.split("flexkit difficulty_based:")[1]
    trinity_part = out.split("trinity difficulty_based:")[1].split("flexkit difficulty_based:")[0]
    assert "resumed after step 6: identical to the straight run" in flexkit_part
    assert "resumed after step 6: batches differ from the straight run at steps [7, 8, 9, 10, 11, 12]" in trinity_part
