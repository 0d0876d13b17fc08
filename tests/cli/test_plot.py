"""``flexkit plot RUN_DIR``: PNGs of a run's metrics, notes where the run has nothing to show, and a clear message
without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from flexkit.cli.main import main
from flexkit.pipeline.pipeline import load_pipeline
from flexkit.plot.figures import PLOT_FILES, _Run, _smooth, plot_run
from flexkit.run.runner import run_pipeline
from tests.cli.test_runner import PIPELINE, read_metrics, write

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plot")
    path = write(tmp, PIPELINE.replace("total_steps = 60", "total_steps = 30"))
    run_pipeline(load_pipeline(path), run_dir=tmp / "run", progress=None)
    return tmp / "run"


def test_plot_writes_every_png(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert main(["plot", str(run_dir), "--dpi", "40"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(run_dir / "plots" / name) for name in PLOT_FILES]
    for name in PLOT_FILES:
        assert (run_dir / "plots" / name).read_bytes().startswith(PNG)


def test_plot_of_a_run_without_evaluations_estimates_or_sample_stage(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    text = PIPELINE.split("[sample]")[0].replace("eval_every = 10", "eval_every = 0").replace(
        'type = "difficulty_based"\nfeature_keys = ["weak_pass_rate", "strong_pass_rate"]\ntarget_reward = 0.5\n'
        "tau = 0.2", 'type = "random"') + '[trainer]\ntype = "simulator"\n'
    run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "run", progress=None)
    assert "flexkit/predicted_pass_rate" not in read_metrics(tmp_path / "run")[0]
    written = plot_run(tmp_path / "run", tmp_path / "pngs", dpi=40, files=("overview.png",))
    assert written == [tmp_path / "pngs" / "overview.png"] and written[0].read_bytes().startswith(PNG)


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
