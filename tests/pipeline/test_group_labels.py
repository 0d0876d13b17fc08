"""A host names an evaluation row's group (:func:`flexkit.host.group_label`) exactly as the pool names the task
groups the guard watches, whatever the column holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flexkit
from flexkit.host import GUARD_TEMPLATE, group_label


@pytest.mark.parametrize("values", [[True, False], [1, 2, 3], [1.0, 2.5], ["gsm8k", "math"], [10**20, 7]])
def test_regression_evaluation_rows_are_named_as_the_pools_groups(tmp_path: Path, values: list[Any]) -> None:
    """A bool grouping column named its pool groups "true" / "false" but its evaluation rows "True" / "False", so
    a guard on it never saw the held-out accuracy the host reported."""
    rows = [{"prompt": f"q{i}", "tag": values[i % len(values)]} for i in range(12)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipe = flexkit.pipeline_from_dict({"run": {"batch_size": 2, "seed": 0, "total_steps": 2},
                                       "tasksets": [{"name": "t", "path": "t.jsonl",
                                                     "selector": {"type": "frontier", "feature_keys": ["tag"]}}]},
                                      base_dir=tmp_path)
    selector = pipe.scheduler.entries[0].selector
    watched = sorted(selector.held_out.metrics)
    reported = sorted({GUARD_TEMPLATE.format(group_label(v)) for v in values})
    assert watched == reported
    numpy_values = [np.asarray(v).item() if not isinstance(v, str) else v for v in values]
    assert sorted({GUARD_TEMPLATE.format(group_label(np.asarray(v)[()])) for v in numpy_values}) == reported
