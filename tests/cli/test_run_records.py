"""What ``flexkit run`` records and shows beyond the step metrics: the evaluation before training, the level mix,
the selectors' predicted pass rates, the run's wall clock, and a trainer's progress during a long phase."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from flexkit import make_selector
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._estimates import PASS_RATE_BINS, EstimateSnapshot, level_mix, predicted_pass_rates
from flexkit.run._runner import _Progress, run_pipeline
from flexkit.scheduler._scheduler import Task
from tests.cli.test_runner import PIPELINE, write
from tests.fixtures import crash_run, read_metrics, without_clock_text

SLOW_SETUP = """\
from flexkit import hookimpl
from flexkit.run.simulator import SimulatorConfig, SimulatorTrainer


class SlowSetup(SimulatorTrainer):
    def setup(self, pipeline):
        super().setup(pipeline)
        for i in range(20):
            self.report_progress("loading", i + 1, 20)


@hookimpl
def flexkit_register_trainers(register):
    register("slow_setup", SlowSetup, SimulatorConfig)
"""


def test_the_first_record_is_the_evaluation_before_training(tmp_path: Path) -> None:
    result = run_pipeline(load_pipeline(write(tmp_path)), run_dir=tmp_path / "run", progress=None)
    first, *steps = read_metrics(tmp_path / "run")
    test = {k: v for k, v in first.items() if not k.startswith("flexkit/val/")}
    assert test == {"step": -1, "flexkit/run/rollouts": 0, "flexkit/run/generated_tokens": 0,
                    **{f"flexkit/eval/{k.removeprefix('eval_')}": v for k, v in result.first_eval.items()},
                    "flexkit/run/seconds": first["flexkit/run/seconds"]}
    assert {k for k in first if k.startswith("flexkit/val/")} == {  # the validation split, recorded beside it
        f"flexkit/val/{k.removeprefix('eval_')}" for k in result.first_eval}
    assert [m["step"] for m in steps] == list(range(60))


def test_every_record_ends_with_the_wall_seconds_so_far_and_a_resume_goes_on_from_them(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    records = read_metrics(tmp_path / "run")
    seconds = [r["flexkit/run/seconds"] for r in records]
    assert all(list(r)[-1] == "flexkit/run/seconds" for r in records)  # the step -1 record's too
    assert all(isinstance(s, int | float) for s in seconds) and seconds[0] >= 0 and seconds == sorted(seconds)
    # killed after step 32 (checkpoint at step 20): the resumed steps count on from the last record kept
    crash_run(load_pipeline(path), tmp_path / "broken", 33)
    lines = (tmp_path / "broken" / "metrics.jsonl").read_text().splitlines()
    kept = next(i for i, line in enumerate(lines) if json.loads(line)["step"] == 19)
    lines[kept] = json.dumps({**json.loads(lines[kept]), "flexkit/run/seconds": 1000.0})
    (tmp_path / "broken" / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    resumed = read_metrics(tmp_path / "broken")
    assert [r["step"] for r in resumed] == list(range(-1, 60)) and resumed[kept]["flexkit/run/seconds"] == 1000.0
    assert all(1000.0 <= r["flexkit/run/seconds"] < 1000.0 + 3600 for r in resumed[kept + 1:])
    assert resumed[kept - 1]["flexkit/run/seconds"] < 1000.0


def test_no_initial_record_without_evaluations(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE.replace("eval_every = 10", "eval_every = 0"))
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    assert read_metrics(tmp_path / "run")[0]["step"] == 0


def test_steps_record_the_level_mix_and_the_predicted_pass_rates(tmp_path: Path) -> None:
    run_pipeline(load_pipeline(write(tmp_path)), run_dir=tmp_path / "run", progress=None)
    steps = read_metrics(tmp_path / "run")[1:]
    for m in steps:
        assert sum(m["flexkit/level_mix"].values()) == 16 and set(m["flexkit/level_mix"]) <= {"1", "2", "3", "4"}
        histograms = m["flexkit/predicted_pass_rate"]  # taskset "hard": a difficulty_based selector; "easy" none
        assert len(histograms["pool"]) == len(histograms["selected"]) == PASS_RATE_BINS
        assert sum(histograms["pool"]) == 300
        assert sum(histograms["selected"]) == m["flexkit/taskset_mix"].get("hard", 0)
    assert any(m["flexkit/taskset_mix"].get("hard") for m in steps)


def test_a_trainer_reports_progress_on_the_display(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_SETUP)
    path = write(tmp_path, PIPELINE.replace('type = "simulator"', 'type = "slow_setup"'))
    shown = io.StringIO()
    run_pipeline(load_pipeline(path, plugins=[str(tmp_path / "slow.py")]), run_dir=tmp_path / "run",
                 progress=shown)
    lines = shown.getvalue().splitlines()
    loading = [line for line in lines if line.startswith("loading: ")]
    assert [line.split()[1] for line in loading] == [f"{2 * i}/20" for i in range(1, 11)]  # every 10%
    assert lines.index(loading[-1]) < next(i for i, line in enumerate(lines) if "step " in line)


def test_the_progress_display_on_a_terminal_rewrites_one_line() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = _Progress(10, screen)
    for i in range(1, 501):
        bar.phase("warm start", i, 500)
    text = screen.getvalue()
    assert text.startswith("\rwarm start: 1/500") and text.endswith("\rwarm start: 500/500 (0s)\n")
    assert text.count("\r") < 10  # throttled
    _Progress(10, None).phase("warm start", 1, 2)  # no display: nothing happens


def test_predicted_pass_rates_of_the_built_in_selectors() -> None:
    features = {"weak_pass_rate": np.linspace(0, 1, 20), "strong_pass_rate": np.linspace(0.2, 1, 20)}
    based = make_selector("difficulty_based", size=20, seed=0, features=features)
    values = predicted_pass_rates(based, 20)
    alpha, beta = based.posterior()
    assert values is not None and np.allclose(values, alpha / (alpha + beta))
    learn = make_selector("learnability", size=20, seed=0)
    learn.feedback(np.array([3]), np.array([1.0]))
    assert np.allclose(predicted_pass_rates(learn, 20), learn.estimates())
    thompson = make_selector("thompson_target", size=20, seed=0)
    assert np.allclose(predicted_pass_rates(thompson, 20), thompson.posterior_mean())
    assert predicted_pass_rates(make_selector("random", size=20, seed=0), 20) is None


def test_a_selector_reporting_nonsense_is_ignored() -> None:
    class Odd:
        def predicted_pass_rates(self) -> np.ndarray:
            return np.array([0.5, 1.5])

    assert predicted_pass_rates(Odd(), 2) is None
    assert predicted_pass_rates(Odd(), 3) is None


def test_snapshot_histograms_and_level_mix() -> None:
    snapshot = EstimateSnapshot({1: np.array([0.02, 0.52, 0.97, 1.0])})
    def task(tid: int, index: int, row: dict) -> Task:
        return Task(taskset_id=tid, taskset="ab"[tid], index=index, data=row)

    tasks = [task(0, 0, {"level": 2}), task(1, 1, {"level": 1}), task(1, 3, {"level": 2}), task(1, 2, {"level": True})]
    record = snapshot.record(tasks)
    assert PASS_RATE_BINS == 20
    assert record == {"selected": [0] * 10 + [1] + [0] * 8 + [2], "pool": [1] + [0] * 9 + [1] + [0] * 8 + [2]}
    assert EstimateSnapshot({}).record(tasks) is None
    assert level_mix(tasks) == {"1": 1, "2": 2}  # a bool is no level
    assert level_mix([task(0, 0, {"x": 1})]) is None
    json.dumps(record)


@pytest.mark.parametrize("every", [0, 10])
def test_resume_keeps_the_new_records_byte_identical(tmp_path: Path, every: int) -> None:
    from flexkit.cli.main import main

    path = write(tmp_path, PIPELINE.replace("eval_every = 10", f"eval_every = {every}"))
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    crash_run(load_pipeline(path), tmp_path / "broken", 33)
    assert main(["run", str(path), "--resume", str(tmp_path / "broken"), "--quiet"]) == 0
    resumed, uninterrupted = ((tmp_path / run / "metrics.jsonl").read_text() for run in ("broken", "full"))
    assert without_clock_text(resumed) == without_clock_text(uninterrupted)  # byte for byte, but the clock


def test_predicted_pass_rates_are_copied_from_the_selector() -> None:
    class Own:
        def __init__(self) -> None:
            self.estimate = np.full(4, 0.25)

        def predicted_pass_rates(self) -> np.ndarray:
            return self.estimate  # its own state array, which it goes on updating

    selector = Own()
    values = predicted_pass_rates(selector, 4)
    assert values is not None and values is not selector.estimate
    selector.estimate[:] = 0.75  # the next feedback, e.g. in the background thread
    assert values.tolist() == [0.25] * 4
    snapshot = EstimateSnapshot({0: values})
    selector.estimate[:] = 1.0
    assert snapshot.estimates[0].tolist() == [0.25] * 4


def test_a_record_holds_the_finite_numbers_of_each_selectors_summary() -> None:
    """A selector's summary reaches ``metrics.jsonl`` under the host metrics' names; values a JSON record cannot
    hold as numbers (NaN, infinity, strings, bools) are left out."""
    import contextlib
    from types import SimpleNamespace

    from flexkit.run._estimates import selector_summaries

    class Plugin:
        def summary(self) -> dict[str, object]:
            return {"width": 3, "mean": 0.25, "unknown": float("nan"), "far": float("inf"), "name": "x", "on": True}

    scheduler = SimpleNamespace(entries=[SimpleNamespace(name="math", selector=Plugin())],
                                idle=contextlib.nullcontext)
    assert selector_summaries(scheduler) == {"flexkit/selector/math/width": 3.0, "flexkit/selector/math/mean": 0.25}
