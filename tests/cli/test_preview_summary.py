"""``flexkit preview`` summarises each step by taskset, by level or by bins of the feedback field, and shows the
refill rounds of a dynamic-sampling pipeline."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from flexkit.cli._preview import field_bins
from flexkit.cli.main import main
from tests.fixtures import ROOT

pytest.importorskip("flexkit_toyrl", reason="the example pipelines need the embedded trainer's storage")

#: An example with [sample.refill] (DAPO's filter): 64 groups per step, at most 4 rounds.
REFILL_EXAMPLE = str(ROOT / "examples" / "frontier" / "addition_dapo.toml")


def test_refill_rounds_and_levels_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = REFILL_EXAMPLE
    assert main(["preview", quickstart, "--steps", "3", "--feedback", "random", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]  # steps, not scheduler reads (a step reads once per round)
    for record in records:
        drawn = sum(len(ix) for ix in record["tasksets"].values())
        assert record["rounds"] >= 1 and drawn == 64 * record["rounds"]
        assert record["kept_groups"] == record["target_groups"] == 64 or record["rounds"] == 4  # max_rounds
        assert sum(record["levels"].values()) == drawn and set(record["levels"]) <= {"1", "2", "3", "4", "5", "6"}
    assert main(["preview", quickstart, "--steps", "1", "--feedback", "random"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[1].startswith("  by level: 1: ") and text[2].startswith("  refill: ")
    assert "kept 64 of 64 groups" in text[2] or "4 rounds" in text[2]


def test_without_feedback_a_refill_pipeline_is_shown_one_read_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preview", REFILL_EXAMPLE, "--steps", "2", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("rounds" not in r and len(r["tasksets"]["addition"]) == 64 for r in records)


def test_feedback_field_bins(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "multi_taskset_difficulty.toml")
    assert main(["preview", example, "--steps", "2", "--feedback", "weak_pass_rate", "--json"]) == 0
    for record in (json.loads(line) for line in capsys.readouterr().out.splitlines()):
        bins = record["bins"]["weak_pass_rate"]
        assert list(bins) == ["0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1"]
        assert sum(bins.values()) == sum(len(ix) for ix in record["tasksets"].values())


def test_field_bins_clip_and_skip_missing_values() -> None:
    tasks = [SimpleNamespace(data={"p": v}) for v in (-0.5, 0.0, 0.25, 0.99, 1.0, 7.0, None, True)]
    assert field_bins(tasks, "p") == {"0-0.25": 2, "0.25-0.5": 1, "0.5-0.75": 0, "0.75-1": 3}
