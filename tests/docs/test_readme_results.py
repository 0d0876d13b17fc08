"""The README's results table shows what the committed ``results.json`` files say, and nothing else.

``python -m tests.docs.test_readme_results`` prints the table's rows from those files.
"""

from __future__ import annotations

import json
from typing import Any

from flexkit.config._loader import read_toml_file
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.selectors.frontier import FrontierConfig
from tests.fixtures import ROOT

#: The recipe's row label (the quickstart's selector and replay), and its setting name in the results files.
RECIPE = "`frontier` recipe (guarded floor + replay), no filter"
RECIPE_SETTING = "frontier-window-half-floor-loop-replay64"
#: The README's rows in order: (pool, arm, seeds) -> (results file under docs/results/, setting name).
ROWS: dict[tuple[str, str, str], tuple[str, str]] = {
    ("addition", "uniform sampling, no filter", "0–4"): ("frontier-addition-uniform.json", "uniform"),
    ("addition", "uniform + DAPO filter", "0–4"): ("frontier-addition-dapo.json", "uniform-dapo"),
    ("addition", "`frontier` by level + DAPO filter", "0–4"): ("frontier-addition-dapo.json", "frontier-dapo"),
    ("addition", "`frontier` by level, no filter", "0–4"): ("frontier-addition-frontier.json", "frontier"),
    ("addition", RECIPE, "0–4"): ("probes/frontier-addition-window-half-floor-loop-replay64-seeds0to4.json",
                                  RECIPE_SETTING),
    ("addition", "uniform sampling, no filter", "5–9 (fresh)"): ("frontier-addition-confirm-uniform.json", "uniform"),
    ("addition", "`frontier` by level, no filter", "5–9 (fresh)"): ("frontier-addition-confirm-frontier.json",
                                                                    "frontier"),
    ("addition", RECIPE, "5–9 (fresh)"): ("probes/frontier-addition-confirm-window-half-floor-loop-replay64.json",
                                          RECIPE_SETTING),
    ("multiplication", "uniform sampling, no filter", "0–4"): ("frontier-multiplication-uniform.json", "uniform"),
    ("multiplication", "`frontier` by level, no filter", "0–4"): ("frontier-multiplication-frontier.json",
                                                                   "frontier"),
    ("multiplication", RECIPE, "0–4"): (
        "probes/frontier-multiplication-window-half-floor-loop-replay64-seeds0to4.json", RECIPE_SETTING),
    ("multiplication", "uniform sampling, no filter", "5–9 (fresh)"): ("frontier-multiplication-confirm-uniform.json",
                                                                       "uniform"),
    ("multiplication", "`frontier` by level, no filter", "5–9 (fresh)"): (
        "frontier-multiplication-confirm-frontier.json", "frontier"),
    ("multiplication", RECIPE, "5–9 (fresh)"): (
        "probes/frontier-multiplication-confirm-window-half-floor-loop-replay64.json", RECIPE_SETTING),
}
#: The budgets (rollouts) whose accuracy the table shows, and its targets.
BUDGETS, TARGETS = (400_000, 800_000), (0.30, 0.40, 0.50)
HEADER = ["pool", "arm", "seeds", "accuracy at 400k / 800k rollouts", "rollouts to 0.30", "to 0.40", "to 0.50"]


def _results(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "docs" / "results" / name).read_text())


def _setting(name: str, setting: str) -> dict[str, Any]:
    return next(s for s in _results(name)["settings"] if s["name"] == setting)


def _rollouts(target: dict[str, Any]) -> str:
    if target["rollouts"] is None:
        return f"not reached ({target['reached']})"
    return f"{target['rollouts']['mean']:,.0f} ({target['reached']})"


def expected_cells(name: str, setting: str) -> list[str]:
    """The table's cells after the seeds for one setting of a results file: means over its seeds."""
    found = _setting(name, setting)
    accuracy = {b["budget"]: b["accuracy"]["mean"] for b in found["budgets"]}
    targets = {t["target"]: t for t in found["targets"]}
    return [" / ".join(f"{accuracy[b]:.3f}" for b in BUDGETS), *(_rollouts(targets[t]) for t in TARGETS)]


def _table() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split("<!-- results-table: start -->", 1)[1].split("<!-- results-table: end -->", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in body.strip().splitlines()]


def test_every_row_is_the_mean_of_its_results_json() -> None:
    table = _table()
    assert table[0] == HEADER
    assert [tuple(row[:3]) for row in table[2:]] == list(ROWS)
    for row in table[2:]:
        assert row[3:] == expected_cells(*ROWS[(row[0], row[1], row[2])]), row[:3]


def test_the_table_includes_uniform_sampling_with_no_filter_on_every_pool() -> None:
    pools = {pool for pool, arm, _seeds in ROWS if arm == "uniform sampling, no filter"}
    assert pools == {pool for pool, _arm, _seeds in ROWS}


def test_the_quickstart_runs_the_recipe_the_table_measured() -> None:
    """The main job's selector and replay are exactly the overrides of every recipe row's results file."""
    quickstart = read_toml_file(ROOT / "examples" / "quickstart.toml")
    quickstart_selector = load_pipeline(ROOT / "examples" / "quickstart.toml").config.tasksets[0].selector.config
    recipe_files = [name for (_pool, arm, _seeds), (name, _setting) in ROWS.items() if arm == RECIPE]
    assert len(recipe_files) == 4  # both pools, design and fresh seeds
    for name in recipe_files:
        overrides = _setting(name, RECIPE_SETTING)["overrides"]
        # measured when the guard read the test split (docs/results.md says so); the quickstart's guard reads the
        # validation split, the one change of its selector since
        measured = dict(overrides["tasksets.0.selector"])
        assert measured["guard_metric"] == "eval_accuracy/{}", name
        measured["guard_metric"] = "val_accuracy/{}"
        assert measured.pop("type") == quickstart["tasksets"][0]["selector"]["type"] == "frontier", name
        # the quickstart writes the type and the column; frontier's defaults are the rest of what was measured
        assert FrontierConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in measured.items()}) == (
            quickstart_selector), name
        assert overrides["replay"] == quickstart["replay"], name
        pool = read_toml_file(ROOT / _results(name)["path"])
        assert quickstart["run"]["batch_size"] == pool["run"]["batch_size"], name


if __name__ == "__main__":
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for key, where in ROWS.items():
        print("| " + " | ".join([*key, *expected_cells(*where)]) + " |")
