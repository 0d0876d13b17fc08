"""flexkit compare: several targets and budgets, the cost of each run (steps, optimizer steps, trained samples,
rollouts, seconds), per-level results and plot, and the rule that prints no interval under three seeds."""

from __future__ import annotations

import io
import itertools
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.cli.main import main
from flexkit.compare import (
    MIN_INTERVAL_VALUES,
    Comparison,
    RunOutcome,
    Setting,
    SettingResult,
    compare,
    mean_interval,
    parse_setting,
    render_table,
    reported_interval,
    write_level_plot,
)
from flexkit.compare._records import read_run_records
from flexkit.compare._report import level_shares
from flexkit.compare._statistics import (
    FORGETTING_MEASURES,
    accuracy_at,
    below_best,
    final_drop,
    largest_drop,
    steps_to,
)
from tests.compare.test_compare import PIPELINE
from tests.fixtures import read_metrics

REFILL = ('dapo:sample={mechanism = "select", scorer = {type = "group_reward_range"}, actuator = '
          '{type = "zero_variance_filter", max_rounds = 3}, refill = {}}')
TARGETS = [0.3, 0.35, 0.99]  # 0.99: never reached
BUDGETS = [320, 640, 960]


@pytest.fixture(scope="module")
def pipeline_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipe") / "sim.toml"
    path.write_text(PIPELINE)
    return path


@pytest.fixture(scope="module")
def several(pipeline_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    """Two settings (one with dynamic sampling) x 3 seeds, three targets and three budgets."""
    out = tmp_path_factory.mktemp("cmp") / "out"
    return compare(pipeline_file, [parse_setting("plain:"), parse_setting(REFILL)], [0, 1, 2], out,
                   target_accuracy=TARGETS, budget=BUDGETS, progress=None)


def test_each_target_and_budget_is_measured_per_run(several: Comparison) -> None:
    assert several.targets == TARGETS and several.budgets == BUDGETS
    assert several.target == 0.3 and several.budget == 960  # the first target, the largest budget
    for res in several.results:
        assert len(res.runs) == 3
        for run in res.runs:
            assert run.steps_to_targets == [steps_to(run.curve, t) for t in TARGETS]
            assert run.rollouts_to_targets == [steps_to(run.rollout_curve, t) for t in TARGETS]
            assert run.steps_to_targets[2] is None and run.steps_to_target == run.steps_to_targets[0]
            assert run.accuracy_at_budgets == [accuracy_at(run.rollout_curve, b) for b in BUDGETS]
            assert run.accuracy_at_budget == run.accuracy_at_budgets[2]
            # the last evaluation at or before each budget
            for budget, acc in zip(BUDGETS, run.accuracy_at_budgets, strict=True):
                assert acc == [a for x, a in run.rollout_curve if x <= budget][-1]


def test_several_targets_in_the_tables_and_json(several: Comparison) -> None:
    table = render_table(several.results, several.targets, several.budgets)
    header = table.splitlines()[0]
    for column in ("accuracy at 320", "accuracy at 640", "accuracy at 960", "rollouts to 0.3", "rollouts to 0.35",
                   "rollouts to 0.99", "steps to 0.3", "steps to 0.99"):
        assert f"| {column} |" in header
    for row in table.splitlines()[2:]:
        assert "not reached (0/3)" in row  # 0.99: shown, never dropped
    data = json.loads((several.out_dir / "results.json").read_text())
    assert data["targets"] == TARGETS and data["budgets"] == BUDGETS and data["failed"] == []
    for setting, res in zip(data["settings"], several.results, strict=True):
        assert [t["target"] for t in setting["targets"]] == TARGETS
        never = setting["targets"][2]
        assert never["reached"] == "0/3" and never["rollouts"] is None and never["steps"] is None
        first = setting["targets"][0]
        values = [r.rollouts_to_targets[0] for r in res.runs if r.rollouts_to_targets[0] is not None]
        assert first["reached"] == f"{len(values)}/3"
        if values:
            assert first["rollouts"]["values"] == values
        assert [b["budget"] for b in setting["budgets"]] == BUDGETS
        assert setting["budgets"][0]["accuracy"]["values"] == [r.accuracy_at_budgets[0] for r in res.runs]
    md = several.markdown
    assert "target eval accuracies: 0.3, 0.35, 0.99 (--target)" in md
    assert "rollout budgets: 320, 640, 960 (--budget)" in md
    assert "--target 0.3,0.35,0.99 --budget 320,640,960" in data["command"]


def test_cost_per_run_is_read_from_the_records(several: Comparison) -> None:
    plain, dapo = several.results
    for run in plain.runs:  # no filter: every response enters the loss, every step updates
        assert run.steps == 30 and run.optimizer_steps == 30
        assert run.trained_samples == run.rollouts == 30 * 8 * 4
    for run in dapo.runs:  # dynamic sampling: the kept groups' answers train; refills cost rollouts
        records = [r for r in read_metrics(run.run_dir) if r["step"] >= 0]
        assert run.steps == len(records) == 30
        assert run.trained_samples == 4 * sum(r["flexkit/sample/kept_groups"] for r in records)  # G = 4
        assert run.trained_samples < run.rollouts == records[-1]["flexkit/run/rollouts"]
        assert run.optimizer_steps == sum(r["flexkit/sample/kept_groups"] > 0 for r in records)
    data = json.loads((several.out_dir / "results.json").read_text())
    for setting, res in zip(data["settings"], several.results, strict=True):
        for key in ("steps", "optimizer_steps", "trained_samples", "rollouts"):
            assert setting[key]["values"] == [getattr(r, key) for r in res.runs]
            assert setting[key]["n"] == 3 and setting[key]["ci95"] is not None
        assert setting["seconds"]["n"] == 3
        for run_json, run in zip(setting["runs"], res.runs, strict=True):
            assert run_json["trained_samples"] == run.trained_samples
            assert run_json["optimizer_steps"] == run.optimizer_steps
    md = several.markdown
    assert ("| setting | steps | optimizer steps | trained samples | rollouts | seconds "
            "| trained samples per rollout |") in md
    assert "| plain | 30 ± 0 | 30 ± 0 | 960 ± 0 | 960 ± 0 |" in md
    plain_row = next(line for line in md.splitlines() if line.startswith("| plain | 30 ± 0 | 30 ± 0 | 960 ± 0 |"))
    assert plain_row.endswith(" | 1.00 |")  # no filter: every rollout trains once
    assert data["settings"][0]["trained_samples_per_rollout"] == 1.0
    assert data["settings"][1]["trained_samples_per_rollout"] == pytest.approx(
        sum(r.trained_samples for r in dapo.runs) / sum(r.rollouts for r in dapo.runs))


def test_compute_to_each_target_is_read_at_the_crossing_record(several: Comparison) -> None:
    plain, dapo = several.results
    for res in several.results:
        for run in res.runs:
            records = read_metrics(run.run_dir)
            for i, steps in enumerate(run.steps_to_targets):
                if steps is None:  # 0.99: never reached, none of the four
                    assert (run.trained_samples_to_targets[i], run.optimizer_steps_to_targets[i],
                            run.seconds_to_targets[i]) == (None, None, None)
                    continue
                crossing = next(r for r in records if r["step"] == steps - 1)  # the evaluation after `steps` steps
                assert run.seconds_to_targets[i] == crossing["flexkit/run/seconds"] > 0
                assert run.optimizer_steps_to_targets[i] <= steps
                if res is plain:  # no filter: every response generated enters the loss
                    assert run.trained_samples_to_targets[i] == run.rollouts_to_targets[i] == steps * 32
                else:
                    kept = [r["flexkit/sample/kept_groups"] for r in records if 0 <= r["step"] < steps]
                    assert run.trained_samples_to_targets[i] == 4 * sum(kept)  # G = 4
    assert any(r.trained_samples_to_targets[0] < r.rollouts_to_targets[0] for r in dapo.runs)


def test_draws_per_level_are_summed_from_the_records(several: Comparison) -> None:
    data = json.loads((several.out_dir / "results.json").read_text())
    for setting, res in zip(data["settings"], several.results, strict=True):
        totals: dict[str, int] = {}
        for run, run_json in zip(res.runs, setting["runs"], strict=True):
            expected: dict[str, int] = {}
            for record in read_metrics(run.run_dir):
                for level, count in (record.get("flexkit/level_mix") or {}).items():
                    expected[level] = expected.get(level, 0) + count
            assert run.level_draws == expected and run_json["level_draws"] == expected
            assert sum(expected.values()) >= 30 * 8  # every step draws a batch of 8 (refills draw more)
            for level, count in expected.items():
                totals[level] = totals.get(level, 0) + count
        shares = setting["level_shares"]
        assert list(shares) == ["1", "2", "3", "4"]
        assert shares == pytest.approx({level: count / sum(totals.values()) for level, count in totals.items()})
    assert "Where the draws went: each level's share of the tasks drawn" in several.markdown
    assert "| setting | level 1 | level 2 | level 3 | level 4 |" in several.markdown


def test_level_shares_order_levels_and_skip_runs_without_a_mix(tmp_path: Path) -> None:
    def run(draws: dict[str, int]) -> RunOutcome:
        return RunOutcome(0, tmp_path, [], {}, 0.0, level_draws=draws)

    assert level_shares([run({"10": 1, "hard": 1, "2": 1}), run({"2": 1}), run({})]) == {
        "2": 0.5, "10": 0.25, "hard": 0.25}
    assert level_shares([run({}), run({})]) == {}


def test_draws_ignore_level_mixes_that_are_not_tables_of_counts(tmp_path: Path) -> None:
    lines = [{"step": 0, "flexkit/level_mix": {"1": 3, "2": True, "3": float("nan"), "5": float("inf"), "6": -4}},
             {"step": 1, "flexkit/level_mix": "1:3"},
             {"step": 2, "level_mix": {"1": 2, "4": 1.0}}]  # the name of earlier versions
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert read_run_records(tmp_path, {}, 8).level_draws == {"1": 5, "4": 1}


def test_per_level_final_accuracy_and_curves(several: Comparison) -> None:
    data = json.loads((several.out_dir / "results.json").read_text())
    for setting, res in zip(data["settings"], several.results, strict=True):
        for level in (1, 2, 3, 4):
            key = f"eval_accuracy/{level}"
            summary = setting["final"][key]
            assert summary["values"] == [r.final[key] for r in res.runs] and summary["ci95"] is not None
            for run in res.runs:  # one point per evaluation, at the run's own rollouts
                assert [x for x, _ in run.level_curves[key]] == [x for x, _ in run.rollout_curve]
                assert run.level_curves[key][-1][1] == run.final[key]


def test_forgetting_is_the_largest_drop_below_the_best_earlier_value(several: Comparison) -> None:
    assert largest_drop([(0, 0.5), (1, 0.9), (2, 0.6), (3, 1.0), (4, 0.8)]) == pytest.approx(0.3)
    assert largest_drop([(0, 0.1), (1, 0.2)]) == 0.0 and largest_drop([]) == 0.0
    data = json.loads((several.out_dir / "results.json").read_text())
    for setting, res in zip(data["settings"], several.results, strict=True):
        for key in (f"eval_accuracy/{level}" for level in (1, 2, 3, 4)):
            for name, measure, _ in FORGETTING_MEASURES:
                drops = [measure(run.level_curves[key]) for run in res.runs]
                assert [run[name][key] for run in setting["runs"]] == drops
                assert setting[name][key] == max(drops)
    assert "Forgetting: per level, the largest drop of held-out accuracy below its best earlier value" in (
        several.markdown)
    assert "| at the end, below the best |" in several.markdown
    assert "| share of evaluations more than 0.05 below the best |" in several.markdown
    assert [name for name, _, _ in FORGETTING_MEASURES] == ["largest_drop", "final_drop", "below_best"]


def test_below_best_counts_the_evaluations_a_level_spends_beyond_the_margin() -> None:
    # one dip that recovers at once: one evaluation of five
    assert below_best([(0, 1.0), (1, 0.9), (2, 1.0), (3, 1.0), (4, 1.0)]) == pytest.approx(0.2)
    # a slide that stays: every evaluation after it
    assert below_best([(0, 1.0), (1, 0.9), (2, 0.92), (3, 0.9), (4, 0.93)]) == pytest.approx(0.8)
    # within the margin (and exactly at it) never counts; the best is the best *so far*
    assert below_best([(0, 1.0), (1, 0.96), (2, 0.95)]) == 0.0
    assert below_best([(0, 0.1), (1, 0.5), (2, 0.9)]) == 0.0
    assert below_best([(0, 1.0), (1, 0.9)], margin=0.2) == 0.0 and below_best([]) == 0.0


def test_final_drop_counts_only_what_the_curve_ends_below_its_best() -> None:
    curve = [(0, 0.5), (1, 0.9), (2, 0.6), (3, 1.0), (4, 0.8)]
    assert final_drop(curve) == pytest.approx(0.2) and largest_drop(curve) == pytest.approx(0.3)
    assert final_drop([(0, 0.9), (1, 0.2), (2, 0.9)]) == 0.0  # a dip that recovers
    assert final_drop([]) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), max_size=30))
def test_largest_drop_is_zero_exactly_for_a_curve_that_never_falls(values: list[float]) -> None:
    curve = list(enumerate(values))
    never_falls = all(b >= a for a, b in itertools.pairwise(values))
    assert (largest_drop(curve) == 0.0) == never_falls
    assert largest_drop(curve) <= (max(values) - min(values) if values else 0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), max_size=30), st.floats(0, 0.5))
def test_below_best_is_nonzero_exactly_when_the_largest_drop_passes_the_margin(values: list[float],
                                                                                margin: float) -> None:
    curve = list(enumerate(values))
    share = below_best(curve, margin)
    assert 0.0 <= share <= 1.0
    assert (share > 0) == (largest_drop(curve) > margin + 1e-9)
    assert below_best(curve, margin + 0.1) <= share  # a wider margin never counts more


def test_levels_png(several: Comparison, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    assert several.level_plot == several.out_dir / "levels.png"
    assert several.level_plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![eval accuracy per level vs rollouts](levels.png)" in several.markdown
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    stream = io.StringIO()
    assert write_level_plot(several.results, tmp_path / "l.png", progress=stream) is None
    assert "levels.png skipped" in stream.getvalue() and 'pip install "flexkit-rft[plot]"' in stream.getvalue()


def _result(name: str, finals: list[float], reached: list[int | None]) -> SettingResult:
    runs = [RunOutcome(seed, Path(f"r{seed}"), [(0, 0.1), (10, acc)], {"eval_accuracy": acc}, 1.0,
                       steps_to_target=x, rollouts_to_target=x, accuracy_at_budget=acc)
            for seed, (acc, x) in enumerate(zip(finals, reached, strict=True))]
    return SettingResult(Setting(name), 32, runs)


def test_no_interval_from_fewer_than_three_values() -> None:
    table = render_table([_result("two", [0.4, 0.5], [10, 20]), _result("three", [0.4, 0.5, 0.6], [10, 20, 30]),
                          _result("one", [0.4], [10]), _result("some", [0.4, 0.5, 0.6], [10, 20, None])])
    rows = {row.split(" | ")[0].strip("| "): row for row in table.splitlines()[2:]}
    assert "±" not in rows["two"] and "| 0.450 (n=2) |" in rows["two"]
    assert "| 0.500 ± " in rows["three"]
    assert "±" not in rows["one"] and "| 0.400 |" in rows["one"]
    assert "| 15 (2/3 reached) |" in rows["some"]  # two values reached: the mean, no interval
    assert "| 0.500 ± " in rows["some"]  # the final accuracy has three values


def test_cli_several_targets_and_budgets(pipeline_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["compare", str(pipeline_file), "--set", "a:", "--seeds", "1", "--target", "0.3,0.99",
                 "--budget", "320,960", "--out", str(out), "--quiet"]) == 0
    stdout = capsys.readouterr().out
    assert "| rollouts to 0.3 |" in stdout and "| accuracy at 960 |" in stdout and "not reached (0/1)" in stdout
    assert "target eval accuracies: 0.3, 0.99 (--target)" in stdout
    for bad in (["--target", "0.3,x"], ["--budget", "0,10"], ["--budget", "1.5"], ["--target", "0.3,0.3"]):
        assert main(["compare", str(pipeline_file), "--set", "a:", "--out", str(tmp_path / "b"), *bad]) == 2
        assert bad[0] in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@given(st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=1, max_size=8))
@settings(max_examples=100, deadline=None)
def test_reported_interval_only_from_three_values(values: list[float]) -> None:
    mean, half = reported_interval(values)
    assert mean == pytest.approx(sum(values) / len(values))
    assert (half is None) == (len(values) < MIN_INTERVAL_VALUES)
    if half is not None:
        assert half == mean_interval(values)[1]
