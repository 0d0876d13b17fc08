"""``flexkit run --tensorboard`` / ``--wandb``: the host integrations' ``flexkit/...`` metrics in TensorBoard and
in an offline W&B run; the run folder's metrics are unchanged."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

import pytest

from flexkit.cli._trackers import Trackers, merge_feedback
from flexkit.cli.main import main
from flexkit.errors import FlexkitError
from flexkit.scheduler.feedback import SELECTOR_METRIC
from tests.fixtures import ROOT, read_metrics, without_clock

SIMULATED = str(ROOT / "examples" / "simulated.toml")


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_merge_feedback_joins_the_rounds() -> None:
    rounds = [{SELECTOR_METRIC: {0: {"indices": [1], "values": [0.5]}}},
              {SELECTOR_METRIC: {0: {"indices": [2], "values": [1.0]}, 1: {"indices": [0], "values": [0.0]}}}]
    assert merge_feedback(rounds) == {SELECTOR_METRIC: {0: {"indices": [1, 2], "values": [0.5, 1.0]},
                                                        1: {"indices": [0], "values": [0.0]}}}


def test_tensorboard_gets_the_flexkit_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorboard")
    plain, tracked = tmp_path / "plain", tmp_path / "tracked"
    overrides = "run.total_steps=6,run.eval_every=3"
    assert main(["run", SIMULATED, "--out", str(plain), "--quiet", "--set", overrides]) == 0
    assert main(["run", SIMULATED, "--out", str(tracked), "--quiet", "--set", overrides, "--tensorboard"]) == 0
    # the run folder is the source of truth, unchanged (but for the wall clock)
    assert without_clock(read_metrics(plain)) == without_clock(read_metrics(tracked))
    scalars = _scalars(tracked / "tensorboard")
    assert [s for s, _v in scalars["flexkit/step"]] == list(range(1, 7))
    assert [s for s, _v in scalars["flexkit/eval/accuracy"]] == [0, 3, 6]
    records = read_metrics(tracked)[1:]
    assert [v for _s, v in scalars["flexkit/rollouts"]] == [256.0] * 6  # this step's responses
    mean = "flexkit/feedback/pass_rate_mean"
    assert scalars[mean][0][1] == pytest.approx(records[0][mean])
    assert scalars["flexkit/run/reward_mean"][-1][1] == pytest.approx(records[-1]["reward_mean"])
    # the record's numbers reach the trackers under the same names, with the same values
    for name in ("flexkit/run/rollouts", "flexkit/sample/kept_groups", "flexkit/sample/filter_rounds"):
        assert [v for _s, v in scalars[name]] == pytest.approx([float(r[name]) for r in records])
    assert [v for _s, v in scalars["flexkit/eval/accuracy"]] == pytest.approx(  # TensorBoard keeps float32
        [r["flexkit/eval/accuracy"] for r in read_metrics(tracked) if "flexkit/eval/accuracy" in r], rel=1e-6)


def test_a_missing_tracker_package_says_what_to_install(tmp_path: Path) -> None:
    with mock.patch.dict(sys.modules, {"tensorboard": None}), pytest.raises(FlexkitError, match=r"\[tensorboard\]"):
        Trackers(tmp_path, tensorboard=True)
    with mock.patch.dict(sys.modules, {"wandb": None}), pytest.raises(FlexkitError, match=r"\[wandb\]"):
        Trackers(tmp_path, wandb=True)
    assert not any(tmp_path.iterdir())  # nothing written before the first step


def test_wandb_offline_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = tmp_path / "run"
    assert main(["run", SIMULATED, "--out", str(run), "--quiet", "--set", "run.total_steps=3", "--wandb"]) == 0
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and any(offline[0].glob("*.wandb")), os.listdir(run / "wandb")
