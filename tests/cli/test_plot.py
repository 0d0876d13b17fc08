"""``flexkit plot RUN_DIR``: PNGs of a run's metrics, notes where the run has nothing to show, and a clear message
without matplotlib."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from flexkit.cli.main import main
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.plot._figures import _FIGURES, PLOT_FILES, _count_axis, _Run, _smooth, compact_count, plot_run
from flexkit.run._runner import run_pipeline
from tests.cli.test_runner import PIPELINE, read_metrics, write

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plot")
    path = write(tmp, PIPELINE.replace("total_steps = 60", "total_steps = 30"))
    run_pipeline(load_pipeline(path), run_dir=tmp / "run", progress=None)
    return tmp / "run"


DRAWN = [name for name in PLOT_FILES if name not in ("replay.png", "floor.png")]  # no [replay], no floor


def test_plot_writes_every_png_the_run_has_data_for(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir), "--dpi", "40"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(run_dir / "plots" / name) for name in DRAWN]
    for name in DRAWN:
        assert (run_dir / "plots" / name).read_bytes().startswith(PNG)
    assert err == ("note: not drawn: replay.png: the run has no [replay]\n"
                   "note: not drawn: floor.png: the selectors keep no floor (frontier's retain); the selectors have "
                   "no held-out guard (frontier's guard_metric)\n")
    assert not (run_dir / "plots" / "replay.png").exists()


def test_plot_of_a_run_without_evaluations_estimates_or_sample_stage(tmp_path: Path) -> None:
    """Figures without data are not written, and one note says why: no flat ``filtering.png`` without a sample
    stage, no text-only panels."""
    pytest.importorskip("matplotlib")
    text = PIPELINE.split("[sample]")[0].replace("eval_every = 10", "eval_every = 0").replace(
        'type = "difficulty_based"\nfeature_keys = ["weak_pass_rate", "strong_pass_rate"]\ntarget_reward = 0.5\n'
        "tau = 0.2", 'type = "random"') + '[trainer]\ntype = "simulator"\n'
    run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "run", progress=None)
    records = read_metrics(tmp_path / "run")
    assert "flexkit/predicted_pass_rate" not in records[0] and "flexkit/sample/filter_rounds" in records[0]
    notes: list[str] = []
    written = plot_run(tmp_path / "run", tmp_path / "pngs", dpi=40, on_skip=notes.append)
    assert written == [tmp_path / "pngs" / "overview.png", tmp_path / "pngs" / "mix.png"]
    assert all(path.read_bytes().startswith(PNG) for path in written)
    assert notes == ["accuracy.png: no evaluations: set [run] eval_every > 0",
                     "pass_rates.png: the selectors keep no pass-rate estimate (random, shuffle, ...); "
                     "difficulty_based, learnability and thompson_target do; the selectors have no pass-rate model "
                     "over the prompts (frontier's text_key)",
                     "filtering.png: the run has no [sample] stage", "replay.png: the run has no [replay]",
                     "floor.png: the selectors keep no floor (frontier's retain); the selectors have no held-out "
                     "guard (frontier's guard_metric)"]
    run = _Run(tmp_path / "run", records)
    assert not run.has_sample_stage
    assert [panel.draw.__name__ for panel in _FIGURES["overview.png"] if panel.missing(run) is None] == [
        "_taskset_mix", "_level_mix"]


def test_a_run_with_replay_gets_its_figure_and_panel(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    copy = tmp_path / "replayed"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("plots"))
    records = read_metrics(copy)
    for record in records[1:]:
        groups = record["step"] % 5
        record.update({"flexkit/replay/groups": groups, "flexkit/replay/responses": 4 * groups})
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = _Run(copy, records)
    assert [panel.draw.__name__ for panel in _FIGURES["overview.png"] if panel.missing(run) is None][-1] == (
        "_replay_groups")
    assert run.series("flexkit/replay/groups")[1].tolist()[:6] == [0, 1, 2, 3, 4, 0]
    notes: list[str] = []
    written = plot_run(copy, dpi=30, files=("overview.png", "replay.png"), on_skip=notes.append)
    assert [path.name for path in written] == ["overview.png", "replay.png"] and not notes


def test_each_level_keeps_its_colour_in_every_panel(run_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    records = read_metrics(run_dir)
    run = _Run(run_dir, records)
    assert run.levels == ["1", "2", "3", "4"]
    colors = [run.level_color(level) for level in run.levels]
    assert len(set(colors)) == 4  # distinct hues, not four greens
    from matplotlib.figure import Figure

    fig = Figure()
    step_ax, mix_ax = fig.subplots(1, 2)
    _FIGURES["accuracy.png"][0].draw(step_ax, run)
    _FIGURES["mix.png"][1].draw(mix_ax, run)
    lines = {line.get_label(): line.get_color() for line in step_ax.get_lines()}
    areas = {area.get_label(): area.get_facecolor()[0][:3] for area in mix_ax.collections}
    for level, color in zip(run.levels, colors, strict=True):
        assert tuple(lines[f"level {level}"][:3]) == tuple(areas[f"level {level}"]) == tuple(color[:3])


@pytest.mark.parametrize(("value", "label"), [(0, "0"), (950, "950"), (1500, "1.5k"), (100_000, "100k"),
                                              (120_000, "120k"), (1_200_000, "1.2M"), (999_999, "1M"),
                                              (3e9, "3G"), (0.5, "0.5")])
def test_rollout_ticks_are_compact(value: float, label: str) -> None:
    assert compact_count(value) == label


def test_the_rollout_axis_has_few_compact_ticks(run_dir: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    run = _Run(run_dir, read_metrics(run_dir))
    fig = Figure(figsize=(4.2, 3.3))
    ax = fig.subplots()
    ax.plot([0, 120_320], [0, 1])
    _count_axis(ax.xaxis)
    fig.canvas.draw()
    labels = [tick.get_text() for tick in ax.get_xticklabels() if tick.get_text()]
    assert 3 <= len(labels) <= 7 and all(len(text) <= 4 for text in labels), labels
    assert "120k" in labels and run.rollouts > 0


def test_the_series_the_plots_draw(run_dir: Path) -> None:
    records = read_metrics(run_dir)
    run = _Run(run_dir, records)
    assert run.steps == 30 and run.targets == [0.5]
    assert [r["step"] for r in run.evals] == [-1, 9, 19, 29]  # the evaluation before training comes first
    xs, names, shares = run.mix("flexkit/taskset_mix")
    assert names == ["easy", "hard"] and len(xs) == 30 and np.allclose(shares.sum(axis=0), 1)
    _xs, levels, _shares = run.mix("flexkit/level_mix")
    assert levels == ["1", "2", "3", "4"]
    selected, pool, steps = run.histograms(slice(0, 10))
    assert pool.sum() == 300 * 10 and steps == "steps 1–10"
    assert selected.sum() == sum(r["flexkit/taskset_mix"].get("hard", 0) for r in records[1:11])
    assert np.allclose(_smooth(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])


def test_plot_without_matplotlib_says_how_to_install_it(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["plot", str(run_dir)]) == 1
    assert 'flexkit plot needs matplotlib: pip install "flexkit-rft[plot]"' in capsys.readouterr().err


def test_plot_of_a_folder_that_is_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(["plot", str(tmp_path / "nothing")]) == 1
    assert "no run folder" in capsys.readouterr().err
    assert main(["plot", str(tmp_path)]) == 1
    assert "no metrics to plot" in capsys.readouterr().err


def _with_floor(run_dir: Path, copy: Path, learnt: bool) -> list[dict]:  # type: ignore[type-arg]
    """``run_dir``'s run with ``frontier``'s per-group summaries added: level 1 learnt from step 10 (its floor share
    the guard's, which a slide at step 20 raises), the other levels not (floor share 0)."""
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("plots"))
    records = read_metrics(copy)
    for record in records[1:]:
        guard = 1.0 if 20 <= record["step"] < 25 else 0.5
        for level in ("1", "2", "3", "4"):
            on = learnt and level == "1" and record["step"] >= 10
            record[f"flexkit/selector/hard/floor_share/level={level}"] = guard if on else 0.0
            record[f"flexkit/selector/hard/guard_share/level={level}"] = guard if level == "1" else 0.5
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_regression_the_floor_and_the_guards_share_per_group_are_drawn(run_dir: Path, tmp_path: Path) -> None:
    """The floor and the guard's share were drawn nowhere: ``floor.png`` draws both per group from the selectors'
    summaries (one row per group: equal shares hide no group), and the overview a floor panel."""
    pytest.importorskip("matplotlib")
    records = _with_floor(run_dir, tmp_path / "floored", learnt=True)
    run = _Run(tmp_path / "floored", records)
    assert list(run.floor) == ["level=1", "level=2", "level=3", "level=4"] and list(run.guard) == list(run.floor)
    assert run.floor["level=1"][1].tolist()[9:12] == [0.0, 0.5, 0.5] and run.guard["level=1"][1][20] == 1.0
    notes: list[str] = []
    written = plot_run(tmp_path / "floored", dpi=30, files=("overview.png", "floor.png"), on_skip=notes.append)
    assert [path.name for path in written] == ["overview.png", "floor.png"] and not notes
    assert "_floor_shares" in [panel.draw.__name__ for panel in _FIGURES["overview.png"] if panel.missing(run) is None]


def test_a_floor_no_group_ever_used_is_left_out(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    records = _with_floor(run_dir, tmp_path / "unused", learnt=False)
    notes: list[str] = []
    written = plot_run(tmp_path / "unused", dpi=30, files=("floor.png",), on_skip=notes.append)
    assert [path.name for path in written] == ["floor.png"]  # the guard's share alone
    run = _Run(tmp_path / "unused", records)
    assert _FIGURES["floor.png"][0].missing(run) == "no group was learnt: the floor was never used"


def test_regression_legends_sit_below_their_panel_off_the_data(run_dir: Path) -> None:
    """The accuracy legend covered level 1's line at 1.0 and the mix legend the stacked shares: both now sit under
    the axes."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    run = _Run(run_dir, read_metrics(run_dir))
    fig = Figure(figsize=(8.4, 3.3), layout="constrained")
    step_ax, mix_ax = fig.subplots(1, 2)
    _FIGURES["accuracy.png"][0].draw(step_ax, run)
    _FIGURES["mix.png"][1].draw(mix_ax, run)
    fig.canvas.draw()
    for ax in (step_ax, mix_ax):
        legend, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.y1 <= frame.y0, ax.get_title()
    records = read_metrics(run_dir)
    for record in records[1:]:
        record["flexkit/level_mix"].update({"5": 1, "6": 1})  # six levels, as the quickstart's
    alone = Figure(figsize=(4.2, 3.3), layout="constrained")  # mix.png of one taskset: one panel wide
    ax = alone.subplots()
    _FIGURES["mix.png"][1].draw(ax, _Run(run_dir, records))
    alone.canvas.draw()
    legend, page = ax.get_legend().get_window_extent(), alone.bbox
    assert page.x0 <= legend.x0 and legend.x1 <= page.x1  # six levels' labels were cut off at both sides


@pytest.mark.parametrize("columns", [1, 2, 3])
def test_regression_the_title_fits_the_figure(columns: int) -> None:
    """A one-panel figure's title (the run folder's name and its counts) ran past both edges of the figure; it is
    wrapped to the figure's width now."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from flexkit.plot._figures import set_title

    fig = Figure(figsize=(4.2 * columns, 3.3), layout="constrained", dpi=100)
    fig.subplots(1, columns)
    title = "2026-12-06T14-55-55-quickstart-on-my-own-data: 235 steps, 120,320 rollouts " * columns
    set_title(fig, title.strip(), columns=columns)
    fig.canvas.draw()
    box, frame = fig._suptitle.get_window_extent(), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)


def test_regression_a_dollar_in_the_run_folders_name_is_text() -> None:
    """A run folder named ``cost$5_vs_$10`` made the title matplotlib math, and saving the figure raised."""
    pytest.importorskip("matplotlib")
    import io

    from matplotlib.figure import Figure

    from flexkit.plot._figures import set_title

    fig = Figure(figsize=(4.2, 3.3), layout="constrained")
    fig.subplots()
    set_title(fig, "cost$5_vs_$10: 3 steps, 1,536 rollouts", columns=1)
    fig.savefig(io.BytesIO(), format="png", dpi=40)
    assert fig._suptitle.get_text() == "cost$5_vs_$10: 3 steps, 1,536 rollouts"



def test_the_prompt_models_calibration_panel(run_dir: Path, tmp_path: Path) -> None:
    """frontier with text_key records each quantile group's predicted and observed pass rate; pass_rates.png draws
    them against each other at the end, one point per group, beside the diagonal."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    records = read_metrics(run_dir)
    for record in records:
        if record.get("step", -1) >= 0:
            for q, (predicted, observed) in enumerate([(0.1, 0.15), (0.5, 0.4), (0.9, 0.95)], start=1):
                record[f"flexkit/selector/t0/predicted/predicted_q{q}"] = predicted
                record[f"flexkit/selector/t0/pass_rate/predicted_q{q}"] = observed
    run = _Run(run_dir, records)
    assert list(run.predicted) == ["predicted_q1", "predicted_q2", "predicted_q3"]
    panel = _FIGURES["pass_rates.png"][-1]
    assert panel.missing(run) is None and panel.missing(_Run(run_dir, read_metrics(run_dir))) is not None
    fig = Figure()
    ax = fig.subplots()
    panel.draw(ax, run)
    points = ax.collections[0].get_offsets()
    assert np.allclose(points, [[0.1, 0.15], [0.5, 0.4], [0.9, 0.95]])
    assert [text.get_text() for text in ax.texts] == ["q1", "q2", "q3"]


def test_the_calibration_panel_adds_the_validation_rows(run_dir: Path) -> None:
    """With the validation rows' predictions recorded on evaluation steps (val_predicted / val_observed), the panel
    draws them as a second set of points, from the last evaluation that has them (a group without rows there is left
    out, not drawn from an older evaluation), with a legend."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    records = read_metrics(run_dir)
    steps = [r for r in records if r.get("step", -1) >= 0]
    for i, record in enumerate(steps):
        for q in (1, 2):
            record[f"flexkit/selector/t0/predicted/predicted_q{q}"] = 0.2 * q
            record[f"flexkit/selector/t0/pass_rate/predicted_q{q}"] = 0.25 * q
        if i in (0, 1):  # two evaluations; the panel reads the last
            record["flexkit/selector/t0/val_predicted/predicted_q1"] = 0.1 + i
            record["flexkit/selector/t0/val_observed/predicted_q1"] = 0.3
        if i == 0:  # q2 held validation rows at the first evaluation only: no point at the last
            record["flexkit/selector/t0/val_predicted/predicted_q2"] = 0.7
            record["flexkit/selector/t0/val_observed/predicted_q2"] = 0.9
    run = _Run(run_dir, records)
    assert list(run.val_predicted) == ["predicted_q1", "predicted_q2"]
    fig = Figure()
    ax = fig.subplots()
    _FIGURES["pass_rates.png"][-1].draw(ax, run)
    assert np.allclose(ax.collections[0].get_offsets(), [[0.2, 0.25], [0.4, 0.5]])
    assert np.allclose(ax.collections[1].get_offsets(), [[1.1, 0.3]])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["feedback", "validation rows"]
