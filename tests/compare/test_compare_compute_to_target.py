"""flexkit compare: the compute to each target (rollouts, trained samples, optimizer steps and wall seconds at the
first evaluation reaching it) in ``results.json`` and ``results.md``, and the trained samples per rollout.

The runs are real run folders of a comparison whose ``metrics.jsonl`` are then replaced with synthetic records;
the same command again reuses the runs and re-reports them, as it does with other ``--target`` values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from flexkit.compare import Comparison, compare, parse_setting
from flexkit.compare._saved import read_results
from tests.compare.test_compare import PIPELINE
from tests.fixtures import ROOT


def _record(step: int, rollouts: int, *, kept: float | None = None, replayed: int | None = None,
            accuracy: float | None = None, seconds: float | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"step": step, "flexkit/run/rollouts": rollouts}
    if kept is not None:
        record["flexkit/sample/kept_fraction"] = kept
    if replayed is not None:
        record["flexkit/replay/responses"] = replayed
    if accuracy is not None:
        record["flexkit/eval/accuracy"] = accuracy
    if seconds is not None:
        record["flexkit/run/seconds"] = seconds
    return record


#: Seed 0: trained samples per step 16, 8 + 4 replayed, 0 (no update), 32, 16 + 8 replayed, 24: cumulated 16, 28,
#: 28, 60, 84, 108; optimizer steps 1, 2, 2, 3, 4, 5. It reaches 0.3 at step 3 and 0.5 at step 5.
SEED0 = [_record(-1, 0, accuracy=0.1, seconds=0.25),
         _record(0, 32, kept=0.5, seconds=1.0),
         _record(1, 64, kept=0.25, replayed=4, accuracy=0.2, seconds=2.0),
         _record(2, 96, kept=0.0, seconds=3.0),
         _record(3, 128, kept=1.0, accuracy=0.35, seconds=4.5),
         _record(4, 160, kept=0.5, replayed=8, seconds=5.0),
         _record(5, 192, kept=0.75, accuracy=0.6, seconds=6.3)]
#: Seed 1: no filter (every response trains): 32, 64, 96; it reaches 0.3 at step 2 and never 0.5.
SEED1 = [_record(-1, 0, accuracy=0.1, seconds=0.1),
         _record(0, 32, seconds=0.5),
         _record(1, 64, accuracy=0.25, seconds=1.5),
         _record(2, 96, accuracy=0.4, seconds=2.1)]


def _without_clock(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as a run folder from before ``flexkit/run/seconds`` holds them."""
    return [{k: v for k, v in r.items() if k != "flexkit/run/seconds"} for r in records]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A pipeline file and a finished comparison of it (setting ``a``, seeds 0 and 1)."""
    tmp = tmp_path_factory.mktemp("compute")
    path = tmp / "sim.toml"
    path.write_text(PIPELINE)
    compare(path, [parse_setting("a:")], [0, 1], tmp / "out", 0.3, progress=None, plots=False)
    return path, tmp / "out"


def _report(folder: tuple[Path, Path], seed0: Sequence[dict[str, Any]], seed1: Sequence[dict[str, Any]],
            targets: Sequence[float] = (0.3, 0.5)) -> tuple[Comparison, dict[str, Any]]:
    """The comparison re-reported over runs holding ``seed0`` and ``seed1`` as their records, and its
    ``results.json``."""
    path, out = folder
    for seed, records in ((0, seed0), (1, seed1)):
        (out / "a" / f"seed{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    comparison = compare(path, [parse_setting("a:")], [0, 1], out, list(targets), progress=None, plots=False)
    return comparison, json.loads((out / "results.json").read_text())


def test_compute_at_the_first_evaluation_reaching_each_target(folder: tuple[Path, Path]) -> None:
    comparison, data = _report(folder, SEED0, SEED1)
    one, two = comparison.results[0].runs
    assert (one.rollouts_to_targets, one.trained_samples_to_targets, one.optimizer_steps_to_targets,
            one.seconds_to_targets) == ([128, 192], [60, 108], [3, 5], [4.5, 6.3])
    assert (two.rollouts_to_targets, two.trained_samples_to_targets, two.optimizer_steps_to_targets,
            two.seconds_to_targets) == ([96, None], [96, None], [3, None], [2.1, None])
    setting = data["settings"][0]
    first, second = setting["targets"]
    assert first["trained_samples"] == {"mean": 78.0, "ci95": None, "n": 2, "values": [60, 96]}
    assert first["optimizer_steps"] == {"mean": 3.0, "ci95": None, "n": 2, "values": [3, 3]}
    assert first["seconds"] == {"mean": pytest.approx(3.3), "ci95": None, "n": 2, "values": [4.5, 2.1]}
    # the keys of before are kept, as they were
    assert (first["target"], first["steps"]["values"], first["rollouts"]["values"], first["reached"]) == (
        0.3, [4, 3], [128, 96], "2/2")
    # seed 1 never reaches 0.5: it counts as not reached, as for rollouts
    assert second["reached"] == "1/2" and second["rollouts"]["values"] == [192]
    assert second["trained_samples"] == {"mean": 108.0, "ci95": None, "n": 1, "values": [108]}
    assert second["optimizer_steps"]["values"] == [5] and second["seconds"]["values"] == [6.3]
    runs = setting["runs"]
    assert [r["trained_samples_to_targets"] for r in runs] == [[60, 108], [96, None]]
    assert [r["optimizer_steps_to_targets"] for r in runs] == [[3, 5], [3, None]]
    assert [r["seconds_to_targets"] for r in runs] == [[4.5, 6.3], [2.1, None]]
    assert [r["rollouts_to_targets"] for r in runs] == [[128, 192], [96, None]]
    # the whole runs: 108 + 96 samples trained on for 192 + 96 rollouts
    assert [r["trained_samples"] for r in runs] == [108, 96] and [r["rollouts"] for r in runs] == [192, 96]
    assert setting["trained_samples_per_rollout"] == pytest.approx(204 / 288)


def test_a_target_no_run_reaches(folder: tuple[Path, Path]) -> None:
    comparison, data = _report(folder, SEED0, SEED1, targets=(0.3, 0.99))
    never = data["settings"][0]["targets"][1]
    assert never["reached"] == "0/2"
    assert [never[key] for key in ("steps", "rollouts", "trained_samples", "optimizer_steps", "seconds")] == [None] * 5
    assert all(r["trained_samples_to_targets"][1] is None and r["seconds_to_targets"][1] is None
               for r in data["settings"][0]["runs"])
    row = comparison.markdown.split("| setting | rollouts to 0.3 | trained samples to 0.3 |")[1].splitlines()[2]
    assert row.endswith("| not reached (0/2) | not reached (0/2) | not reached (0/2) | not reached (0/2) |")


def test_results_md_shows_the_compute_to_each_target_and_the_trained_samples_per_rollout(
        folder: tuple[Path, Path]) -> None:
    comparison, _data = _report(folder, SEED0, SEED1)
    md = comparison.markdown
    assert "Compute to each target (at the first evaluation at or above it" in md
    assert ("| setting | rollouts to 0.3 | trained samples to 0.3 | optimizer steps to 0.3 | seconds to 0.3 "
            "| rollouts to 0.5 | trained samples to 0.5 | optimizer steps to 0.5 | seconds to 0.5 |") in md
    assert ("| a | 112 (n=2) | 78 (n=2) | 3 (n=2) | 3.3 (n=2) | 192 (1/2 reached) | 108 (1/2 reached) "
            "| 5 (1/2 reached) | 6.3 (1/2 reached) |") in md
    cost = md.split("| setting | steps | optimizer steps | trained samples | rollouts | seconds |")[1]
    assert cost.startswith(" trained samples per rollout |\n")
    assert cost.splitlines()[2].startswith("| a | ") and cost.splitlines()[2].endswith(" | 0.71 |")
    one, _data = _report(folder, SEED0, SEED1, targets=(0.3,))  # one target: the columns say "to target"
    assert "| setting | rollouts to target | trained samples to target | optimizer steps to target | seconds to " \
           "target |\n|---|---|---|---|---|\n| a | 112 (n=2) | 78 (n=2) | 3 (n=2) | 3.3 (n=2) |" in one.markdown


def test_run_folders_from_before_the_clock_re_report_with_other_targets(folder: tuple[Path, Path]) -> None:
    comparison, data = _report(folder, _without_clock(SEED0), _without_clock(SEED1), targets=(0.2, 0.5))
    first, second = data["settings"][0]["targets"]
    assert first["seconds"] is None and second["seconds"] is None  # not logged
    assert first["trained_samples"]["values"] == [28, 64] and first["optimizer_steps"]["values"] == [2, 2]
    assert [r["seconds_to_targets"] for r in data["settings"][0]["runs"]] == [[None, None], [None, None]]
    assert "| a | 64 (n=2) | 46 (n=2) | 2 (n=2) | not logged | 192 (1/2 reached) | 108 (1/2 reached) " \
           "| 5 (1/2 reached) | not logged |" in comparison.markdown
    # one run with a clock, one without
    mixed, _data = _report(folder, SEED0, _without_clock(SEED1), targets=(0.3,))
    assert "| a | 112 (n=2) | 78 (n=2) | 3 (n=2) | 4.5 (1 logged) |" in mixed.markdown


def test_results_json_files_without_the_new_keys_read_back(folder: tuple[Path, Path]) -> None:
    old = ROOT / "docs" / "results" / "pool-plain.json"
    data = json.loads(old.read_text())
    assert "trained_samples_to_targets" not in data["settings"][0]["runs"][0]  # written before the keys existed
    saved = read_results(old)
    assert saved.results[0].runs and all(r.trained_samples_to_targets == [] for r in saved.results[0].runs)
    _report(folder, SEED0, SEED1)
    again = read_results(folder[1])
    assert [len(r.curve) for r in again.results[0].runs] == [4, 3]
