"""Run folders written before the metric names were unified (``rollouts``, ``kept_groups``, ``eval_accuracy``,
``sample/...``) still read: ``flexkit compare``, ``flexkit plot``, ``--resume`` and the run summary read them as
they read a new run's records.

``data/metrics_before_0_names.jsonl`` is the ``metrics.jsonl`` that ``flexkit run`` wrote for :data:`PIPELINE`
before the change (dynamic sampling, so its records hold the step's ``kept_groups`` beside the last refill
round's ``sample/kept_groups``). The same pipeline run now writes the same values under the new names.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from flexkit import pipeline_from_dict
from flexkit._metric_names import (
    EVAL_ACCURACY,
    FILTER_ROUNDS,
    KEPT_FRACTION,
    KEPT_GROUPS,
    RUN_ROLLOUTS,
    upgrade_record,
)
from flexkit.compare._records import RunRecords, read_run_records
from flexkit.plot._figures import _Run
from flexkit.run._result import summary_lines
from flexkit.run._runner import run_pipeline
from tests.fixtures import crash_run, read_metrics, within_rounding, without_clock

OLD_METRICS = Path(__file__).parent / "data" / "metrics_before_0_names.jsonl"

PIPELINE: dict[str, Any] = {
    "run": {"batch_size": 8, "seed": 2, "total_steps": 6, "eval_every": 2, "checkpoint_every": 3},
    "tasksets": [{"name": "graded", "storage_type": "simulated", "size": 200, "levels": [1, 2, 3, 4],
                  "selector": {"type": "learnability", "feature_keys": ["level"]}}],
    "sample": {"mechanism": "select", "scorer": {"type": "group_reward_range"},
               "actuator": {"type": "zero_variance_filter", "max_rounds": 3}, "refill": {}},
    "trainer": {"type": "simulator", "group_size": 4},
}


def _old_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in OLD_METRICS.read_text().splitlines()]


@pytest.fixture(scope="module")
def new_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The pipeline run now: its run folder and result."""
    tmp = tmp_path_factory.mktemp("new_names")
    result = run_pipeline(pipeline_from_dict(PIPELINE, base_dir=tmp), run_dir=tmp / "run", progress=None)
    return tmp / "run", result


def _old_folder(new_run: Path, tmp_path: Path) -> Path:
    """A copy of the new run folder holding the old run's ``metrics.jsonl``."""
    old = tmp_path / "old"
    shutil.copytree(new_run, old)
    shutil.copy(OLD_METRICS, old / "metrics.jsonl")
    return old


def _without_validation(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the keys that postdate the old run folder: the validation split's ``flexkit/val/...``,
    the selectors' summaries ``flexkit/selector/...`` and the wall clock, ``flexkit/run/seconds``."""
    return [{k: v for k, v in r.items() if not k.startswith(("flexkit/val/", "flexkit/selector/"))}
            for r in without_clock(records)]


def _without_seconds(records: RunRecords) -> RunRecords:
    """``records`` without the wall seconds of their evaluations (``flexkit/run/seconds``, which postdates the old
    run folder and differs between runs)."""
    return attrs.evolve(records, spent_curve=[attrs.evolve(s, seconds=None) for s in records.spent_curve])


def test_the_old_records_are_the_new_ones_under_old_names(new_run: tuple[Path, Any]) -> None:
    """Only the names changed: every old record read under the new names is the new record, value for value
    (whole numbers stay whole). The old records' last-round ``sample/kept_groups`` and ``sample/kept_fraction``
    differed from the step's ``kept_groups`` and ``kept_fraction``; the step's are the ones kept."""
    old = _old_records()
    new = _without_validation(read_metrics(new_run[0]))
    assert [sorted(upgrade_record(r)) for r in old] == [sorted(r) for r in new]
    assert within_rounding([upgrade_record(r) for r in old], new)  # written on another CPU
    assert all(type(upgrade_record(o)[k]) is type(v) for o, n in zip(old, new, strict=True) for k, v in n.items())
    refills = [(o, n) for o, n in zip(old, new, strict=True) if o.get("filter_rounds", 1) > 1]
    assert refills and any(o["sample/kept_groups"] != o["kept_groups"] for o, _n in refills)
    assert all(n[KEPT_GROUPS] == o["kept_groups"] and n[KEPT_FRACTION] == o["kept_fraction"] for o, n in refills)


def test_compare_reads_an_old_run_folder_as_a_new_one(new_run: tuple[Path, Any], tmp_path: Path) -> None:
    run_dir, result = new_run
    old = _old_folder(run_dir, tmp_path)
    for first in (result.first_eval, {}):  # with the runner's first evaluation, and without
        before, after = read_run_records(old, first, 32), read_run_records(run_dir, first, 32)
        assert {s.seconds for s in before.spent_curve} == {None}  # no clock in the old records
        assert within_rounding(attrs.asdict(before), attrs.asdict(_without_seconds(after)))  # another CPU's
    records = read_run_records(old, result.first_eval, 32)
    assert len(records.curve) == 4 and set(records.level_curves) == {f"eval_accuracy/{n}" for n in (1, 2, 3, 4)}
    assert records.trained_samples == 4 * sum(r["kept_groups"] for r in _old_records()[1:])  # the step's groups


def test_plot_reads_an_old_run_folder_as_a_new_one(new_run: tuple[Path, Any], tmp_path: Path) -> None:
    run_dir = new_run[0]
    old_dir = _old_folder(run_dir, tmp_path)
    old, new = _Run(old_dir, read_metrics_upgraded(old_dir)), _Run(run_dir, read_metrics_upgraded(run_dir))
    assert (old.steps, old.rollouts, len(old.evals)) == (new.steps, new.rollouts, len(new.evals)) == (6, 448, 4)
    for key in (KEPT_FRACTION, FILTER_ROUNDS):
        assert [a.tolist() for a in old.series(key)] == [a.tolist() for a in new.series(key)]
    if importlib.util.find_spec("matplotlib") is not None:
        from flexkit.plot._figures import plot_run

        notes: list[str] = []
        written = plot_run(old_dir, dpi=30, files=("overview.png",), on_skip=notes.append)
        assert len(written) == 1 and not notes


def read_metrics_upgraded(run_dir: Path) -> list[dict[str, Any]]:
    """What ``flexkit plot`` and ``compare`` read: the records under the current names."""
    from flexkit.run._folder import METRICS_FILE
    from flexkit.run._folder import read_metrics as read_folder

    return [record for _line, record in read_folder(run_dir / METRICS_FILE)]


def test_resume_continues_an_old_run_folder(new_run: tuple[Path, Any], tmp_path: Path) -> None:
    """A run started before the change and resumed after it: the old lines are kept as written, the new ones
    follow under the new names, and every reader sees the uninterrupted run."""
    run_dir, result = new_run
    rounds = [r["filter_rounds"] for r in _old_records()[1:]]
    broken = tmp_path / "broken"
    crash_run(pipeline_from_dict(PIPELINE, base_dir=tmp_path), broken, sum(rounds[:4]) + 1)  # in step 4
    old_lines = OLD_METRICS.read_text().splitlines(keepends=True)
    (broken / "metrics.jsonl").write_text("".join(old_lines[:5]))  # steps -1..3, as the old code wrote them
    resumed = run_pipeline(pipeline_from_dict(PIPELINE, base_dir=tmp_path), run_dir=broken, resume=True,
                           progress=None)
    lines = (broken / "metrics.jsonl").read_text().splitlines(keepends=True)
    assert lines[:4] == old_lines[:4]  # cut back to the checkpoint's step 3, kept as written
    assert all(RUN_ROLLOUTS in json.loads(line) for line in lines[4:])
    assert _without_validation(read_metrics_upgraded(broken)) == _without_validation(read_metrics_upgraded(run_dir))
    assert _without_seconds(read_run_records(broken, result.first_eval, 32)) == _without_seconds(
        read_run_records(run_dir, result.first_eval, 32))
    assert summary_lines(resumed)[1:] == summary_lines(result)[1:]


def test_a_finished_old_run_resumes_to_its_summary(new_run: tuple[Path, Any], tmp_path: Path) -> None:
    """``--resume`` of a finished old run trains nothing and prints the summary, rollouts included."""
    run_dir, result = new_run
    old = _old_folder(run_dir, tmp_path)
    again = run_pipeline(pipeline_from_dict(PIPELINE, base_dir=tmp_path), run_dir=old, resume=True, progress=None)
    assert again.last_metrics[RUN_ROLLOUTS] == _old_records()[-1]["rollouts"] == 448
    assert again.last_metrics[EVAL_ACCURACY] == _old_records()[-1]["eval_accuracy"]
    assert summary_lines(again)[1:] == summary_lines(result)[1:]
    assert any(line.startswith("rollouts generated: 448") for line in summary_lines(again))
    assert OLD_METRICS.read_bytes() == (old / "metrics.jsonl").read_bytes()  # nothing rewritten
