"""flexkit run parses every row of a JSON Lines taskset before training (a bad row fails at the start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit import ConfigError, pipeline_from_dict
from flexkit.run._runner import run_pipeline


def test_a_bad_row_deep_in_the_file_fails_the_run_before_its_first_step(tmp_path: Path) -> None:
    """Regression: a row that starts with '{' and ends with '}' but is not JSON passed the open check and
    killed the run at the step that first drew it."""
    rows = ['{"difficulty": 1.0}\n'] * 50 + ['{"difficulty": 1.0,}\n'] + ['{"difficulty": 2.0}\n'] * 49
    (tmp_path / "tasks.jsonl").write_text("".join(rows))
    data = {"run": {"batch_size": 4, "total_steps": 3, "eval_every": 0},
            "tasksets": [{"name": "t", "path": "tasks.jsonl", "selector": {"type": "sequential"}}],
            "trainer": {"type": "simulator"}}
    with pytest.raises(ConfigError, match=r"tasksets\[0\].*line 51"):
        run_pipeline(pipeline_from_dict(data, base_dir=tmp_path), run_dir=tmp_path / "run", progress=None)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
