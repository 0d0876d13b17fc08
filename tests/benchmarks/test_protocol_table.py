"""``benchmarks/protocol_table.py`` writes the protocol tables' rows from ``results.json`` as the files hold them,
and its ratios count a run that misses a target at the budget (the protocols' rule)."""

from __future__ import annotations

import json

from tests.benchmarks.loading import benchmark_module
from tests.fixtures import ROOT

VALIDATION = ROOT / "docs" / "results" / "validation"


def test_a_row_shows_the_files_figures() -> None:
    with benchmark_module("protocol_table.py") as table:
        (row,) = table.rows([VALIDATION / "sub-recipe.json"])
    assert row.startswith("| `recipe` | 0.287 ± 0.029 | 0.198 / 0.242 / 0.288 | 652,800 (3/5) / not reached (0/5)")
    assert "| 0.972 / 0.637 / 0.112 | 1.37 | 691 ± 282 | [sub-recipe](validation/sub-recipe.json) |" in row


def test_a_miss_counts_at_the_budget() -> None:
    recipe = json.loads((VALIDATION / "sub-recipe.json").read_text())["settings"][0]
    with benchmark_module("protocol_table.py") as table:
        # reached by 3 of 5 runs after 499,200 / 665,600 / 793,600 rollouts; the two misses count at 800,000
        assert table.missed_at_budget(recipe, 0, 800_000) == (499_200 + 665_600 + 793_600 + 2 * 800_000) / 5
        assert table.missed_at_budget(recipe, 1, 800_000) == 800_000
