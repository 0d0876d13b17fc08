"""The progress display of a run that ends at its rollout budget ([run] max_rollouts)."""

from __future__ import annotations

import io
from pathlib import Path

from flexkit import pipeline_from_dict
from flexkit.run._runner import run_pipeline

DATA = {
    "run": {"batch_size": 8, "seed": 0, "total_steps": 1000, "max_rollouts": 960, "eval_every": 10},
    "tasksets": [{"name": "g", "storage_type": "simulated", "size": 200}],
    "trainer": {"type": "simulator", "group_size": 4},
}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_line_ends_when_the_budget_ends_the_run(tmp_path: Path) -> None:
    """Regression: the line ended only at total_steps, so the summary was printed on the progress line."""
    shown = _Terminal()
    result = run_pipeline(pipeline_from_dict(DATA, base_dir=tmp_path), run_dir=tmp_path / "a", progress=shown)
    assert result.steps == 30  # 960 rollouts / (8 tasks x 4 responses)
    last = shown.getvalue().split("\r")[-1]
    assert last.endswith("\n") and "rollouts 960/960" in last and "[####################]" in last


def test_plain_output_shows_the_budget_and_a_last_line(tmp_path: Path) -> None:
    shown = io.StringIO()
    run_pipeline(pipeline_from_dict(DATA, base_dir=tmp_path), run_dir=tmp_path / "b", progress=shown)
    lines = [line for line in shown.getvalue().splitlines() if "step " in line]
    assert lines[-1].startswith("[####################] step 30/1000") and "rollouts 960/960" in lines[-1]
    assert 9 <= len(lines) <= 12  # about one line per tenth of the budget
