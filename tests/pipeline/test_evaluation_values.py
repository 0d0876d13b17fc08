"""``Pipeline.evaluation`` (and the scheduler's, which every path goes through) hands the selectors each number
as a Python number, whatever array type holds it: numpy scalars, 0-d numpy arrays and 0-d torch tensors were
dropped before (a frontier guard never saw the accuracy a host adapter passed as a tensor). A value that is not
a number is named in a warning, not dropped in silence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog

from flexkit._metric_names import plain_evaluation
from flexkit._state_problems import NOT_A_NUMBER, plain_number
from flexkit.pipeline._pipeline import Pipeline, load_pipeline

torch = pytest.importorskip("torch")

GUARDED = """
[run]
batch_size = 8
seed = 0

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 200
levels = [1, 2]

[tasksets.selector]
type = "frontier"
feature_keys = ["level"]
retain = 1.0
retain_above = 0.9
guard_metric = "val_accuracy/{}"
"""

NUMBERS = {
    "python float": 0.25,
    "python int": 1,
    "numpy float64": np.float64(0.25),
    "numpy float32": np.float32(0.25),
    "numpy int64": np.int64(1),
    "0-d numpy array": np.array(0.25),
    "0-d torch tensor": torch.tensor(0.25),
    "0-d torch float64 tensor": torch.tensor(0.25, dtype=torch.float64),
    "0-d torch int tensor": torch.tensor(1),
}


def _pipeline(tmp_path: Path) -> Pipeline:
    path = tmp_path / "pipeline.toml"
    path.write_text(GUARDED)
    return load_pipeline(path)


def _seen(pipe: Pipeline, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the taskset's selector receives from each evaluation."""
    seen: list[dict[str, Any]] = []
    selector = pipe.scheduler.entries[0].selector
    monkeypatch.setattr(selector, "observe_evaluation", seen.append)
    return seen


@pytest.mark.parametrize("kind", sorted(NUMBERS))
def test_regression_every_kind_of_number_reaches_the_selectors_as_a_python_number(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    pipe = _pipeline(tmp_path)
    seen = _seen(pipe, monkeypatch)
    pipe.evaluation({"val_accuracy/1": NUMBERS[kind]})
    value = seen[0]["val_accuracy/1"]
    assert type(value) in (int, float) and value == pytest.approx(NUMBERS[kind].item()
                                                                  if hasattr(NUMBERS[kind], "item")
                                                                  else NUMBERS[kind])


@pytest.mark.parametrize("kind", ["numpy float64", "0-d numpy array", "0-d torch tensor"])
def test_regression_a_frontier_guard_reads_the_accuracy_whatever_holds_it(tmp_path: Path, kind: str) -> None:
    pipe = _pipeline(tmp_path)
    pipe.evaluation({"val_accuracy/1": NUMBERS[kind], "val_accuracy/2": torch.tensor(0.5)})
    held_out = pipe.scheduler.entries[0].selector.held_out
    assert held_out.latest.tolist() == [0.25, 0.5]  # before: NaN for the 0-d array and the tensors


def test_none_and_bools_are_kept_and_no_warning_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = _pipeline(tmp_path)
    seen = _seen(pipe, monkeypatch)
    with structlog.testing.capture_logs() as logs:
        pipe.evaluation({"val_accuracy/1": None, "converged": True, "val_accuracy/2": float("nan")})
    assert seen[0]["val_accuracy/1"] is None and seen[0]["converged"] is True
    assert not [entry for entry in logs if entry["log_level"] == "warning"]


@pytest.mark.parametrize("value", ["0.5", [0.5], np.array([0.5, 0.5]), torch.tensor([0.5, 0.5]), {"a": 1}])
def test_regression_a_value_that_is_not_a_number_is_named_in_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    pipe = _pipeline(tmp_path)
    seen = _seen(pipe, monkeypatch)
    with structlog.testing.capture_logs() as logs:
        pipe.evaluation({"val_accuracy/1": 0.5, "odd": value})
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and "'odd'" in warnings[0] and type(value).__name__ in warnings[0], logs
    assert seen[0]["val_accuracy/1"] == 0.5 and seen[0]["odd"] is value  # kept, for a selector that reads it


def test_plain_number_calls_item_only_on_numpy_and_tensor_types() -> None:
    class Impostor:
        shape = ()

        def item(self) -> float:
            raise AssertionError("item() called on a type from no array library")

    assert plain_number(Impostor()) is NOT_A_NUMBER
    assert plain_number(np.bool_(True)) is True  # a numpy bool: a bool, as Python's
    assert plain_evaluation({"x": torch.tensor(2.0)}) == {"x": 2.0}
