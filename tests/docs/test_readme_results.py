"""The README's results table shows what the committed ``results.json`` files of the validation-split protocol
(docs/results/validation-protocol.md) say, and nothing else.

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
RECIPE = "recipe (`frontier` by level + `[replay]`)"
RECIPE_SETTING = "recipe"
#: Each pool's targets (test accuracy) as the validation-split protocol fixed them.
POOL_TARGETS = {"addition": (0.30, 0.40, 0.50), "multiplication": (0.30, 0.40, 0.50),
                "subtraction": (0.28, 0.38, 0.48)}
#: The README's rows in order: (pool, arm, seeds) -> (results file under docs/results/, setting name).
ROWS: dict[tuple[str, str, str], tuple[str, str]] = {
    (f"{pool} ({' / '.join(f'{t:.2f}' for t in POOL_TARGETS[pool])})", arm, "0–4"): (
        f"validation/{short}-{name}.json", setting)
    for pool, short in (("addition", "add"), ("multiplication", "mul"), ("subtraction", "sub"))
    for arm, name, setting in (("uniform sampling", "uniform", "uniform"),
                               ("uniform + `[replay]`", "uniform-replay", "uniform-replay"),
                               (RECIPE, "recipe", RECIPE_SETTING))
}
HEADER = ["pool (targets)", "arm", "seeds", "final test accuracy", "rollouts to target 1", "to target 2",
          "to target 3", "trained samples per rollout"]


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
    per = found["trained_samples"]["mean"] / found["rollouts"]["mean"]
    return [f"{found['final']['eval_accuracy']['mean']:.3f}", *(_rollouts(t) for t in found["targets"]),
            f"{per:.2f}"]


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


def test_the_table_holds_both_baselines_on_every_pool() -> None:
    """Uniform sampling, and uniform sampling with the recipe's replay (selection's own share), beside the recipe."""
    for pool in {pool for pool, _arm, _seeds in ROWS}:
        assert {arm for p, arm, _seeds in ROWS if p == pool} == {"uniform sampling", "uniform + `[replay]`", RECIPE}


def test_each_row_reads_its_pools_targets() -> None:
    for (pool, _arm, _seeds), (name, setting) in ROWS.items():
        targets = [t["target"] for t in _setting(name, setting)["targets"]]
        assert targets == list(POOL_TARGETS[pool.split(" ")[0]]), name


def test_the_quickstart_runs_the_recipe_the_table_measured() -> None:
    """The main job's selector and replay are what every recipe row's results file measured, key by key (the
    quickstart writes the type and the column; frontier's defaults are the rest)."""
    quickstart = read_toml_file(ROOT / "examples" / "quickstart.toml")
    quickstart_selector = load_pipeline(ROOT / "examples" / "quickstart.toml").config.tasksets[0].selector.config
    recipe_files = [name for (_pool, arm, _seeds), (name, _setting) in ROWS.items() if arm == RECIPE]
    assert len(recipe_files) == 3  # addition, multiplication, subtraction
    for name in recipe_files:
        overrides = _setting(name, RECIPE_SETTING)["overrides"]
        measured = dict(overrides["tasksets.0.selector"])
        assert measured.pop("type") == quickstart["tasksets"][0]["selector"]["type"] == "frontier", name
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
