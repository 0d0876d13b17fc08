"""The README's results table shows what the committed ``results.json`` files say, and nothing else."""

from __future__ import annotations

import json
import re

from tests.fixtures import ROOT

#: README row label -> (results file under docs/results/, setting name).
ROWS = {
    "uniform sampling, no filter": ("pool-plain.json", "A-random"),
    "uniform + DAPO filter": ("pool-dapo.json", "B-random-dapo"),
    "`difficulty_based`, measured priors + DAPO filter": ("pool-dapo.json", "C-difficulty-measured"),
    "`learnability` by level + DAPO filter": ("pool-online.json", "D-learnability-level"),
}


def _table() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split("<!-- results-table: start -->", 1)[1].split("<!-- results-table: end -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in body.strip().splitlines()]
    return {row[0]: row[1:] for row in rows[2:]}


def test_every_row_is_the_mean_of_its_results_json() -> None:
    table = _table()
    assert set(table) == set(ROWS)
    for label, (name, setting) in ROWS.items():
        data = json.loads((ROOT / "docs" / "results" / name).read_text())
        found = next(s for s in data["settings"] if s["name"] == setting)
        accuracy, rollouts = table[label]
        assert accuracy == f"{found['accuracy_at_budget']['mean']:.3f}", label
        reached, n = found["reached"].split("/")
        if found["rollouts_to_target"] is None:
            assert rollouts == f"not reached ({reached}/{n})", label
        else:
            assert rollouts == f"{found['rollouts_to_target']['mean']:,.0f} ({reached}/{n})", label
        assert data["budget"] == 400_000 and data["target"] == 0.30


def test_the_table_includes_uniform_sampling_with_no_filter() -> None:
    assert any(re.match(r"uniform sampling, no filter", label) for label in _table())
