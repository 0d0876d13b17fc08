"""``flexkit plot`` of compare results: ``results.json`` files read back into their settings' runs (curves
exactly as compare recorded them), settings of several comparisons drawn together, and clear refusals."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from flexkit.cli.main import main
from flexkit.compare import Comparison, compare
from flexkit.compare._saved import merge_saved, read_results, short_labels, source_label
from flexkit.config._overrides import parse_setting
from flexkit.errors import ConfigError
from tests.compare.test_compare import PIPELINE, SPECS

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    tmp = tmp_path_factory.mktemp("saved")
    path = tmp / "sim.toml"
    path.write_text(PIPELINE)
    return compare(path, [parse_setting(s) for s in SPECS], [0, 1], tmp / "first", [0.3, 0.4],
                   progress=io.StringIO())


def test_results_read_back_as_compare_recorded_them(compared: Comparison) -> None:
    saved = read_results(compared.out_dir)  # a folder holding results.json
    assert saved.path == compared.out_dir / "results.json" and saved.targets == [0.3, 0.4]
    assert [r.setting.name for r in saved.results] == ["random", "adaptive"]
    for got, want in zip(saved.results, compared.results, strict=True):
        assert got.rollouts_per_step == want.rollouts_per_step
        for a, b in zip(got.runs, want.runs, strict=True):
            assert (a.seed, a.curve, a.rollout_curve, a.level_curves) == (b.seed, b.curve, b.rollout_curve,
                                                                           b.level_curves)
            assert a.final == pytest.approx(b.final)


def test_settings_of_the_same_name_are_told_apart_by_their_file(compared: Comparison, tmp_path: Path) -> None:
    other = tmp_path / "frontier-addition-uniform.json"
    other.write_text((compared.out_dir / "results.json").read_text())
    merged = merge_saved([read_results(compared.out_dir), read_results(other)])
    assert [r.setting.name for r in merged] == [
        "random (first)", "adaptive (first)", "random (frontier-addition-uniform)",
        "adaptive (frontier-addition-uniform)"]
    assert source_label(other) == "frontier-addition-uniform"
    assert short_labels(["frontier-addition-uniform", "frontier-addition-confirm-uniform"]) == [
        "uniform", "confirm-uniform"]
    assert short_labels(["add-a", "add-ab"]) == ["a", "ab"] and short_labels(["x-a", "x-a"]) == ["a", "a"]
    assert short_labels(["same", "same"]) == ["same", "same"] and short_labels(["one"]) == ["one"]


def test_plot_draws_several_comparisons_together(compared: Comparison, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    assert main(["plot", str(compared.out_dir / "results.json"), str(compared.out_dir), "--out", str(out),
                 "--dpi", "30"]) == 0
    assert capsys.readouterr().out.split() == [str(out / "accuracy.png"), str(out / "levels.png")]
    assert (out / "accuracy.png").read_bytes().startswith(PNG) and (out / "levels.png").read_bytes().startswith(PNG)


def test_a_run_folder_still_plots_as_one_run(compared: Comparison, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run_dir = compared.results[0].runs[0].run_dir
    assert main(["plot", str(run_dir), "--dpi", "30"]) == 0
    assert str(run_dir / "plots" / "overview.png") in capsys.readouterr().out


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not JSON"),
    ('{"runs": []}', r"settings: expected a list"),
    ('{"settings": [{"name": "a", "runs": [{"seed": 0, "curve": [[1, 2, 3]]}]}]}',
     r"settings\[0\]\.runs\[0\]\.curve\[0\]: expected an \[x, y\] pair"),
    ('{"settings": [{"name": "a", "runs": [{"seed": "zero"}]}]}', r"settings\[0\]\.runs\[0\]\.seed: expected a number"),
    ('{"settings": [{"runs": []}]}', r"settings\[0\]\.name"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ('{"settings": [{"name": "a", "runs": [{"seed": 0, "curve": [[Infinity, 0.5]]}]}]}',
     r"settings\[0\]\.runs\[0\]\.curve\[0\]: expected an integer, got inf"),
    ('{"settings": [{"name": "a", "runs": [{"seed": NaN}]}]}', r"settings\[0\]\.runs\[0\]\.seed: expected an integer"),
    ('{"settings": [{"name": "a", "runs": [{"seed": 1' + "0" * 400 + '}]}]}', r"\.seed: number too large"),
    ('{"settings": [{"name": "a", "rollouts_per_step": -Infinity}]}', r"settings\[0\]\.rollouts_per_step"),
    ('{"settings": [{"name": "a", "runs": [{"seed": 0, "level_curves": {"easy": [[0, 0.5]]}}]}]}',
     r"settings\[0\]\.runs\[0\]\.level_curves\.easy: expected a key eval_accuracy/<level>"),
])
def test_a_file_that_is_not_compare_results_is_refused_naming_the_key(tmp_path: Path, text: str,
                                                                      message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        read_results(path)
    assert str(path) in str(info.value)


def test_plot_refuses_a_mix_of_run_folders_and_results(compared: Comparison, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = compared.results[0].runs[0].run_dir
    assert main(["plot", str(compared.out_dir), str(run_dir)]) == 1
    assert "not compare results" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    assert main(["plot", str(missing)]) == 1


def test_plot_refuses_results_without_a_finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    empty = tmp_path / "empty.json"
    empty.write_text('{"settings": [{"name": "a", "runs": []}]}')
    assert main(["plot", str(empty), "--out", str(tmp_path / "out")]) != 0
    assert "nothing to draw: no finished run in" in capsys.readouterr().err
    assert not (tmp_path / "out" / "accuracy.png").exists()
