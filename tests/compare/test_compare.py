"""flexkit compare: --set parsing and overrides, Student-t intervals, run layout, reports and plot."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import pytest

from flexkit import ConfigError, FlexkitError
from flexkit.cli.main import main
from flexkit.compare import (
    Comparison,
    Setting,
    apply_overrides,
    compare,
    mean_interval,
    parse_seeds,
    parse_setting,
    parse_value,
    t_quantile,
    write_plot,
)
from tests.fixtures import read_metrics

PIPELINE = """
[run]
batch_size = 8
seed = 0
total_steps = 30
eval_every = 10
checkpoint_every = 30

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 200
levels = [1, 2, 3, 4]

[tasksets.selector]
type = "difficulty_based"
feature_keys = ["weak_pass_rate", "strong_pass_rate"]
target_reward = 0.5
tau = 0.1

[trainer]
type = "simulator"
group_size = 4
eval_tasks_per_level = 20
learning_rate = 0.2
"""

SPECS = ['random:tasksets.0.selector={type = "random"}', "adaptive:"]


@pytest.fixture(scope="module")
def pipeline_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipe") / "sim.toml"
    path.write_text(PIPELINE)
    return path


@pytest.fixture(scope="module")
def compared(pipeline_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, str]:
    """One comparison (2 settings x 2 seeds) shared by the module's tests, with its progress output."""
    out = tmp_path_factory.mktemp("cmp") / "out"
    stream = io.StringIO()
    result = compare(pipeline_file, [parse_setting(s) for s in SPECS], [0, 1], out, progress=stream)
    return result, stream.getvalue()


@pytest.fixture
def comparison(compared: tuple[Comparison, str]) -> Comparison:
    return compared[0]


# ------------------------------------------------------------------------------------------- intervals


def test_t_quantiles() -> None:
    assert t_quantile(1) == pytest.approx(12.7062)
    assert t_quantile(4) == pytest.approx(2.7764)
    assert t_quantile(30) == pytest.approx(2.0423)
    assert t_quantile(35) == pytest.approx(2.0423)  # between table rows: the more conservative one
    assert t_quantile(60) == pytest.approx(2.0003)
    assert t_quantile(10_000) == 1.96
    with pytest.raises(ValueError):
        t_quantile(0)


def test_mean_interval_on_known_numbers() -> None:
    mean, half = mean_interval([1, 2, 3, 4, 5])  # s = sqrt(2.5), se = s / sqrt(5), t_{0.975,4} = 2.7764
    assert mean == 3 and half == pytest.approx(2.7764 * math.sqrt(2.5 / 5))
    mean, half = mean_interval([0.5, 0.7])
    assert mean == pytest.approx(0.6) and half == pytest.approx(12.7062 * 0.1)
    assert mean_interval([0.42]) == (0.42, None)
    assert mean_interval([2.0, 2.0, 2.0]) == (2.0, 0.0)
    with pytest.raises(ValueError):
        mean_interval([])


# ------------------------------------------------------------------------------------------- parsing


def test_parse_setting_keys_and_values() -> None:
    s = parse_setting('dbs:tasksets.0.selector.tau=0.5,tasksets[1].selector.feature_keys=["a", "b"],'
                      'run.eval_every=5,x.flag=true,x.name="a,b",tasksets.0.selector={type = "random", m = 2}')
    assert s.name == "dbs"
    got = [(o.key, o.parts, o.value) for o in s.overrides]
    assert got == [
        ("tasksets.0.selector.tau", ("tasksets", "0", "selector", "tau"), 0.5),
        ("tasksets[1].selector.feature_keys", ("tasksets", "1", "selector", "feature_keys"), ["a", "b"]),
        ("run.eval_every", ("run", "eval_every"), 5),
        ("x.flag", ("x", "flag"), True),
        ("x.name", ("x", "name"), "a,b"),
        ("tasksets.0.selector", ("tasksets", "0", "selector"), {"type": "random", "m": 2}),
    ]
    assert parse_setting("baseline:") == Setting("baseline", (), "baseline:")
    assert parse_value("random") == "random"  # a bare word whose quotes a shell removed
    assert parse_value("'lit'") == "lit" and parse_value("1e-3") == 1e-3


@pytest.mark.parametrize(("spec", "message"), [
    ("no-colon", "expected NAME:KEY=VALUE"),
    ("bad name:a=1", "bad setting name"),
    ("../x:a=1", "bad setting name"),
    ("s:a.b", "expected KEY=VALUE"),
    ("s:a..b=1", "bad key"),
    ("s:a={type=", "not a TOML value"),
    ("s:a=", "empty value"),
])
def test_parse_setting_errors_name_the_set(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_setting(spec)
    assert f"--set {spec}: " in str(info.value) and message in str(info.value)


def test_parse_seeds() -> None:
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds("0,3,7") == [0, 3, 7]
    for bad in ("0", "x", "1,1", "-1,2"):
        with pytest.raises(ValueError):
            parse_seeds(bad)
    assert parse_seeds("7,") == [7] and parse_seeds("0,") == [0]  # one seed


def test_a_count_of_zero_seeds_says_how_to_give_seed_0() -> None:
    """Regression: ``--seeds 0`` said "give at least one seed", which reads as if seed 0 were not one."""
    with pytest.raises(ValueError, match=r"a number alone is a count.*--seeds 0,"):
        parse_seeds("0")


DATA = {"run": {"seed": 0}, "tasksets": [{"name": "a", "selector": {"type": "difficulty_based", "tau": 0.1}}]}


def test_apply_overrides() -> None:
    s = parse_setting('x:tasksets.0.selector={type="random"},run.total_steps=9,sample.scorer.type="g",'
                      'tasksets.1={name="b"}')
    out = apply_overrides(DATA, s)
    assert out["tasksets"][0]["selector"] == {"type": "random"}  # an inline table replaces, not merges
    assert out["run"] == {"seed": 0, "total_steps": 9}
    assert out["sample"] == {"scorer": {"type": "g"}}  # missing tables are created
    assert out["tasksets"][1] == {"name": "b"}  # index == length appends
    assert DATA["tasksets"][0]["selector"]["type"] == "difficulty_based"  # the input is untouched


@pytest.mark.parametrize(("spec", "message"), [
    ("x:tasksets.3.selector.tau=1", "index 3 out of range (tasksets has 1 entries)"),
    ("x:tasksets.first.name=1", "tasksets is an array; expected an index, got 'first'"),
    ("x:run.seed.value=1", "run.seed is a int value (0), not a table or array"),
])
def test_apply_overrides_bad_paths(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides(DATA, parse_setting(spec))
    assert str(info.value).startswith(f"--set {spec}: ") and message in str(info.value)


# ------------------------------------------------------------------------------------------- end to end


def test_layout_and_reports(compared: tuple[Comparison, str], pipeline_file: Path) -> None:
    comparison, progress = compared
    out = comparison.out_dir
    for name in ("random", "adaptive"):
        for seed in (0, 1):
            run = out / name / f"seed{seed}"
            assert (run / "metrics.jsonl").is_file() and (run / "resolved.json").is_file()
            assert not (run / "pipeline.toml").exists()  # the file without the overrides would mislead
            meta = json.loads((run / "setting.json").read_text())
            assert meta["setting"] == name and meta["seed"] == seed
            assert json.loads((run / "resolved.json").read_text())["run"]["seed"] == seed
    resolved = json.loads((out / "random" / "seed0" / "resolved.json").read_text())
    assert resolved["tasksets"][0]["selector"]["type"] == "random"
    md = (out / "results.md").read_text()
    assert "| random |" in md and "| adaptive |" in md and "level 4" in md
    assert "flexkit compare " in md and "--set 'random:tasksets.0.selector={type = \"random\"}'" in md
    assert "--set adaptive:" in md and "--seeds 2" in md and str(pipeline_file) in md
    data = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in data["settings"]] == ["random", "adaptive"]
    assert data["seeds"] == [0, 1] and data["target"] == comparison.target
    for setting in data["settings"]:
        assert setting["rollouts_per_step"] == 8 * 4
        assert setting["final"]["eval_accuracy"]["n"] == 2
        for run in setting["runs"]:
            assert [step for step, _ in run["curve"]] == [0, 10, 20, 30]
    assert "[4/4] adaptive seed 1" in progress


def test_compare_reads_the_test_split_never_the_validation_split(comparison: Comparison) -> None:
    """The runs record both splits (the simulator has a validation set of other tasks); curves, finals, targets and
    level curves are the test split's (``flexkit/eval/accuracy...``) alone."""
    for result in comparison.results:
        for run in result.runs:
            evals = [r for r in read_metrics(run.run_dir) if "flexkit/eval/accuracy" in r]
            assert all("flexkit/val/accuracy" in r for r in evals)
            test = [r["flexkit/eval/accuracy"] for r in evals]
            assert [acc for _step, acc in run.curve] == test
            assert test != [r["flexkit/val/accuracy"] for r in evals]  # the splits differ: the curve is the test's
            assert run.final["eval_accuracy"] == test[-1]
            assert run.final["eval_accuracy/4"] == evals[-1]["flexkit/eval/accuracy/4"]
            assert all(key.startswith("eval_accuracy") for key in [*run.final, *run.level_curves])
            assert [acc for _r, acc in run.level_curves["eval_accuracy/1"]] == [
                r["flexkit/eval/accuracy/1"] for r in evals]


def test_each_run_gets_plots_linked_from_the_results(compared: tuple[Comparison, str]) -> None:
    pytest.importorskip("matplotlib")
    out = compared[0].out_dir
    md = (out / "results.md").read_text()
    for name in ("random", "adaptive"):
        for seed in (0, 1):
            assert (out / name / f"seed{seed}" / "plots" / "overview.png").is_file()
        links = [f"[seed {k}]({name}/seed{k}/plots/overview.png)" for k in (0, 1)]
        assert f"- **{name}**: {', '.join(links)}" in md
    assert "flexkit plot RUN_DIR" in md


def test_parallel_jobs_give_the_same_results(compared: tuple[Comparison, str], pipeline_file: Path,
                                              tmp_path: Path) -> None:
    serial = compared[0]
    parallel = compare(pipeline_file, [parse_setting(SPECS[1])], [0, 1], tmp_path / "par", progress=None,
                       jobs=2, plots=False)  # each run in a process of its own
    one, two = serial.results[1], parallel.results[0]
    assert [(r.seed, r.curve, r.final, r.trained_samples) for r in one.runs] == \
        [(r.seed, r.curve, r.final, r.trained_samples) for r in two.runs]
    with pytest.raises(ConfigError, match="--jobs"):
        compare(pipeline_file, [parse_setting(SPECS[1])], [0], tmp_path / "bad", progress=None, jobs=0)


def test_default_target_and_steps(comparison: Comparison) -> None:
    runs = [r for res in comparison.results for r in res.runs]
    initial = sum(r.curve[0][1] for r in runs) / len(runs)
    best = max(sum(r.final["eval_accuracy"] for r in res.runs) / len(res.runs) for res in comparison.results)
    assert comparison.target == pytest.approx(initial + 0.9 * (best - initial))
    for r in runs:
        expected = next((s for s, acc in r.curve if acc >= comparison.target), None)
        assert r.steps_to_target == expected


def test_png_when_matplotlib_is_available(comparison: Comparison) -> None:
    pytest.importorskip("matplotlib")
    assert comparison.plot == comparison.out_dir / "accuracy.png"
    assert comparison.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![eval accuracy vs step and vs rollouts](accuracy.png)" in comparison.markdown


def test_no_matplotlib_skips_plot_with_a_note(comparison: Comparison, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    stream = io.StringIO()
    assert write_plot(comparison.results, 0.5, tmp_path / "a.png", progress=stream) is None
    assert 'pip install "flexkit-rft[plot]"' in stream.getvalue() and not (tmp_path / "a.png").exists()


def test_cli_compare_explicit_target(pipeline_file: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["compare", str(pipeline_file), "--set", "a:trainer.learning_rate=0.5", "--set",
                 "b:trainer.learning_rate=0.0", "--seeds", "1", "--target", "0.3", "--out", str(out),
                 "--quiet"]) == 0
    stdout = capsys.readouterr().out
    assert "| a |" in stdout and "target eval accuracy: 0.300 (--target)" in stdout
    data = json.loads((out / "results.json").read_text())
    b = data["settings"][1]
    assert b["final"]["eval_accuracy"]["ci95"] is None  # one seed: no interval
    assert b["reached"] == "0/1" and "not reached (0/1)" in stdout  # learning_rate 0 never improves
    assert "--target 0.3" in data["command"]
    # the same folder with another setting under the same name: refused before any run
    assert main(["compare", str(pipeline_file), "--set", "a:", "--seeds", "1", "--out", str(out)]) == 1
    assert "a/seed0 already holds a run of another pipeline, setting or seed" in capsys.readouterr().err


def test_cli_compare_errors_name_the_setting(pipeline_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["compare", str(pipeline_file), "--set", "a:", "--set", "b:tasksets.0.selector.tua=1",
                 "--seeds", "1", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "[--set b:tasksets.0.selector.tua=1]" in err and "tasksets[0].selector.tua" in err
    assert not out.exists()  # validated before the first run
    assert main(["compare", str(pipeline_file), "--set", "a:tasksets.5.name=1", "--out", str(out)]) == 1
    assert "--set a:tasksets.5.name=1: tasksets.5.name: index 5 out of range" in capsys.readouterr().err
    assert main(["compare", str(pipeline_file), "--set", "a:", "--set", "a:run.total_steps=3",
                 "--out", str(out)]) == 1
    assert "repeated: a" in capsys.readouterr().err
    assert main(["compare", str(pipeline_file), "--set", "a:run.seed=3", "--out", str(out)]) == 1
    assert "run.seed is set by --seeds" in capsys.readouterr().err
    assert main(["compare", str(pipeline_file), "--seeds", "0", "--out", str(out)]) == 2


def test_compare_requires_evaluations(pipeline_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="eval_every"):
        compare(pipeline_file, [parse_setting("a:run.eval_every=0")], [0], tmp_path / "o", progress=None)
    with pytest.raises(ConfigError, match="at least one setting"):
        compare(pipeline_file, [], [0], tmp_path / "o", progress=None)
    assert issubclass(ConfigError, FlexkitError)


def test_rollouts_come_from_the_runs_own_counts(pipeline_file: Path, tmp_path: Path) -> None:
    """A dynamic-sampling setting spends more rollouts per step than batch × group; compare reports what the run
    counted, accuracy at a rollout budget, and wall-clock seconds."""
    refill = ('dapo:sample={mechanism = "select", scorer = {type = "group_reward_range"}, actuator = '
              '{type = "zero_variance_filter", max_rounds = 3}, refill = {}}')
    result = compare(pipeline_file, [parse_setting("plain:"), parse_setting(refill)], [0, 1], tmp_path / "out",
                     target_accuracy=0.3, budget=900, progress=None)
    plain, dapo = result.results
    for res in (plain, dapo):
        for run in res.runs:
            records = read_metrics(run.run_dir)
            evaluated = [r["flexkit/run/rollouts"] for r in records if r.get("flexkit/eval/accuracy") is not None]
            assert [x for x, _ in run.rollout_curve] == evaluated and evaluated[0] == 0  # "step": -1 first
            expected = next((x for x, acc in run.rollout_curve if acc >= 0.3), None)
            assert run.rollouts_to_target == expected
            assert run.accuracy_at_budget == next(acc for x, acc in reversed(run.rollout_curve) if x <= 900)
            assert run.seconds > 0
    assert all(x == 10 * 32 * i for run in plain.runs for i, (x, _) in enumerate(run.rollout_curve))
    assert any(run.rollouts > plain.runs[0].rollouts for run in dapo.runs)  # refills cost rollouts
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["budget"] == 900
    assert saved["settings"][1]["accuracy_at_budget"]["n"] == 2
    assert "accuracy at budget" in result.markdown and "900 rollouts (--budget)" in result.markdown
    short = compare(pipeline_file, [parse_setting("plain:")], [0], tmp_path / "short", budget=10**6, progress=None)
    assert short.results[0].runs[0].accuracy_at_budget is None  # stopped before spending the budget


def test_curves_take_the_initial_record_once_and_old_run_folders_still_read(tmp_path: Path) -> None:
    from flexkit.compare._run import _read_curves

    steps = '{"step": 0, "rollouts": 32}\n{"step": 1, "rollouts": 64, "eval_accuracy": 0.5}\n'
    (tmp_path / "metrics.jsonl").write_text('{"step": -1, "rollouts": 0, "eval_accuracy": 0.25}\n' + steps)
    assert _read_curves(tmp_path, {"eval_accuracy": 0.25}, 32) == ([(0, 0.25), (2, 0.5)], [(0, 0.25), (64, 0.5)])
    (tmp_path / "metrics.jsonl").write_text(steps)  # a run folder from before the initial record existed
    assert _read_curves(tmp_path, {"eval_accuracy": 0.25}, 32) == ([(0, 0.25), (2, 0.5)], [(0, 0.25), (64, 0.5)])
