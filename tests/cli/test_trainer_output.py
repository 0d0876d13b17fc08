"""What a trainer hands the runner is checked: metrics become plain numbers, anything else and names the runner
writes itself are refused naming the trainer; feedback reads the rewards as the rollout returned them, even when
``compute_advantages`` rewrites them in place."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from flexkit.errors import ComponentError
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from flexkit.run._trainer_output import RESERVED_KEYS, trainer_metrics
from tests.cli.test_runner import PIPELINE, write
from tests.fixtures import read_metrics, without_clock

PLUGIN = """\
import attrs
import numpy as np
import torch

from flexkit import hookimpl
from flexkit.run.simulator import SimulatorConfig, SimulatorTrainer

EXTRA = {}


class Reporting(SimulatorTrainer):
    def update(self, batch, weights, *, step):
        out = dict(super().update(batch, weights, step=step))
        out.update(EXTRA)
        return out


class Centring(SimulatorTrainer):
    \"\"\"Written to the documented order: it centres, in place, the reward array its experiences hold.\"\"\"

    def rollout(self, tasks, *, step):
        rollout = super().rollout(tasks, step=step)
        experiences = rollout.batch.feedback_columns()  # experiences of its own, beside the batch
        self._rewards = experiences["reward"]
        return attrs.evolve(rollout, experiences=experiences)

    def compute_advantages(self, batch, *, step):
        super().compute_advantages(batch, step=step)
        g = self.config.group_size
        view = self._rewards.reshape(-1, g)
        view -= view.mean(axis=1, keepdims=True)


@hookimpl
def flexkit_register_trainers(register):
    register("reporting", Reporting, SimulatorConfig)
    register("centring", Centring, SimulatorConfig)
"""


def _pipeline(tmp_path: Path, trainer: str, steps: int = 12) -> Path:
    (tmp_path / "trainers.py").write_text(PLUGIN)
    text = PIPELINE.replace("total_steps = 60", f"total_steps = {steps}").replace('type = "simulator"',
                                                                                 f'type = "{trainer}"')
    return write(tmp_path, 'plugins = ["./trainers.py"]\n' + text)


def _run_with(tmp_path: Path, extra: dict) -> Path:
    path = _pipeline(tmp_path, "reporting")
    pipe = load_pipeline(path)
    module = sys.modules[pipe.plugins.component("trainer", "reporting").factory.__module__]
    module.EXTRA.clear()
    module.EXTRA.update(extra)
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    return tmp_path / "run"


def test_numpy_scalars_and_0d_tensors_become_python_numbers(tmp_path: Path) -> None:
    run_dir = _run_with(tmp_path, {"f32": np.float32(0.5), "i64": np.int64(3), "t": torch.tensor(2.5),
                                   "a": np.array(1.5), "flag": np.bool_(True)})
    record = read_metrics(run_dir)[1]
    assert record["f32"] == 0.5 and record["i64"] == 3 and record["t"] == 2.5 and record["a"] == 1.5
    assert record["flag"] is True


@pytest.mark.parametrize("value", [[1.0, 2.0], "high", torch.ones(2), {"x": 1.0}])
def test_a_metric_that_is_not_a_number_is_refused_naming_the_trainer(tmp_path: Path, value: object) -> None:
    with pytest.raises(ComponentError, match=r"trainer 'reporting'.*update returned .* as metric 'bad'"):
        _run_with(tmp_path, {"bad": value})
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [-1]  # the step was not recorded


@pytest.mark.parametrize("key", ["step", "rollouts", "taskset_mix", "sample/kept_fraction", "eval_accuracy",
                                 "flexkit/run/rollouts", "flexkit/sample/kept_groups", "flexkit/eval/accuracy"])
def test_regression_a_trainer_metric_cannot_overwrite_a_key_the_runner_writes(tmp_path: Path, key: str) -> None:
    """Regression: a trainer metric named ``step`` replaced the record's step, and ``--resume`` then cut
    ``metrics.jsonl`` at the wrong line and lost records."""
    with pytest.raises(ComponentError, match=rf"trainer 'reporting'.*a metric named '{key}'.*runner writes itself"):
        _run_with(tmp_path, {key: 0})


def test_trainer_metrics_checks_every_source() -> None:
    class T:
        pass

    assert trainer_metrics(T(), {"eval_accuracy": np.float64(0.5)}, "evaluate") == {"eval_accuracy": 0.5}
    assert trainer_metrics(T(), None, "update") == {}
    for key in [*RESERVED_KEYS, "flexkit/eval/accuracy", "flexkit/anything"]:
        with pytest.raises(ComponentError, match="runner writes itself"):
            trainer_metrics(T(), {key: 1.0}, "evaluate")
    with pytest.raises(ComponentError, match="metric names must be strings"):
        trainer_metrics(T(), {("a", 1): 1.0}, "rollout")
    with pytest.raises(ComponentError, match="must return a mapping"):
        trainer_metrics(T(), [1.0], "update")


def test_the_two_evaluations_keep_to_their_own_names() -> None:
    """Test (``evaluate``) and validation (``validate``) names never mix: a validation number is never read as a
    test one, nor the other way round; the other sources take neither prefix."""

    class T:
        pass

    assert trainer_metrics(T(), {"val_accuracy/1": 0.5, "val_loss": 2}, "validate") == {"val_accuracy/1": 0.5,
                                                                                          "val_loss": 2}
    with pytest.raises(ComponentError, match=r"validate \(the validation split\).*'eval_accuracy/1'.*'val_accuracy/1'"):
        trainer_metrics(T(), {"eval_accuracy/1": 0.5}, "validate")
    with pytest.raises(ComponentError, match=r"evaluate \(the test split\).*'val_accuracy'.*return them from validate"):
        trainer_metrics(T(), {"val_accuracy": 0.5}, "evaluate")
    for source in ("rollout", "update"):
        with pytest.raises(ComponentError, match="runner writes itself"):
            trainer_metrics(T(), {"val_accuracy": 0.5}, source)


def test_regression_feedback_reads_the_rewards_not_the_advantages(tmp_path: Path) -> None:
    """Regression: feedback ran after ``compute_advantages``, so a trainer written to the documented order that
    centres its rewards in place fed its selectors advantages. Feedback now reads a snapshot taken right after
    the rollout: the run is that of a trainer that does not centre anything."""
    for name in ("plain", "c"):
        (tmp_path / name).mkdir()
    plain = _pipeline(tmp_path / "plain", "simulator")
    run_pipeline(load_pipeline(plain), run_dir=tmp_path / "plain_run", progress=None)
    centring = _pipeline(tmp_path / "c", "centring")
    run_pipeline(load_pipeline(centring), run_dir=tmp_path / "centring_run", progress=None)

    def records(run: str) -> list[dict]:
        return [{k: v for k, v in r.items() if "time" not in k} for r in without_clock(read_metrics(tmp_path / run))]

    assert records("centring_run") == records("plain_run")
    assert all(0.0 <= r["flexkit/feedback/pass_rate_mean"] <= 1.0 for r in records("centring_run")[1:])
    assert json.loads((tmp_path / "centring_run" / "metrics.jsonl").read_text().splitlines()[1])["step"] == 0


def test_regression_the_simulator_refuses_groups_of_one_answer() -> None:
    """With one answer per task the simulator's reward-variance signal is always 0: a run learnt nothing, and
    with DAPO's filter kept nothing, without a word."""
    from flexkit import ConfigError
    from flexkit.pipeline._pipeline import pipeline_from_dict

    data = {"run": {"batch_size": 4, "total_steps": 1},
            "tasksets": [{"name": "s", "storage_type": "simulated", "size": 20}],
            "trainer": {"type": "simulator", "group_size": 1}}
    with pytest.raises(ConfigError, match=r"trainer\.group_size: must be >= 2, got 1"):
        pipeline_from_dict(data)
