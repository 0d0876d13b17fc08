"""Plugin state in checkpoints: a state is checked to load back equal before anything is written, and a value
that cannot is refused naming the component and the key path inside its state."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexkit.errors import CheckpointError, StateError
from flexkit.pipeline._checkpoint import check_state
from flexkit.pipeline._pipeline import Pipeline, pipeline_from_dict
from tests.scheduler.test_scheduler import write_taskset

PLUGIN = """
import attrs
from flexkit import hookimpl
from flexkit.selectors.random import RandomSelector


@attrs.frozen(kw_only=True)
class KeyedConfig:
    pass


class KeyedSelector(RandomSelector):
    Config = KeyedConfig
    table = None

    def state_dict(self):
        return {**super().state_dict(), "table": self.table}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.table = state["table"]


@hookimpl
def flexkit_register_selectors(register):
    register("keyed", KeyedSelector, KeyedConfig)
"""


def make(tmp_path: Path) -> Pipeline:
    """A pipeline whose first taskset uses the local plugin selector ``keyed`` (its state holds ``table``)."""
    (tmp_path / "keyed_plugin.py").write_text(PLUGIN)
    write_taskset(tmp_path / "t0.jsonl", 10)
    return pipeline_from_dict({"plugins": ["./keyed_plugin.py"], "run": {"batch_size": 2, "total_steps": 4},
                               "tasksets": [{"name": "t0", "path": "t0.jsonl", "selector": {"type": "keyed"}}]},
                              base_dir=tmp_path)


def test_regression_nested_tuple_keys_round_trip(tmp_path: Path) -> None:
    """Regression: a state with nested tuple keys saved, but its load failed (``(1, [2, 3])`` is unhashable)."""
    pipe = make(tmp_path)
    table = {(1, (2, 3)): 0.5, (4, ()): [1, 2], ("a", (("b",), 5)): {"x": 1}}
    pipe.scheduler.entries[0].selector.table = table
    pipe.save_checkpoint(tmp_path / "ckpt")
    other = make(tmp_path)
    other.load_checkpoint(tmp_path / "ckpt")
    assert other.scheduler.entries[0].selector.table == {(1, (2, 3)): 0.5, (4, ()): [1, 2],
                                                         ("a", (("b",), 5)): {"x": 1}}


BAD_VALUES: dict[str, tuple[Any, str, str]] = {
    "complex": ({"z": complex(1, 2)}, r"table\.z", "cannot checkpoint a complex"),
    "numpy complex": ({"z": np.complex128(1 + 2j)}, r"table\.z", "cannot checkpoint a complex"),
    "datetime64": ({"when": np.datetime64("2024-01-01")}, r"table\.when", "cannot checkpoint a date"),
    "set": ({"seen": {1, 2}}, r"table\.seen", "cannot checkpoint a set"),
    "bytes": ([b"raw"], r"table\[0\]", "cannot checkpoint a bytes"),
    "huge int": ({"n": 10**5000}, r"table\.n", "cannot be written as JSON"),
    "an object": ({"o": object()}, r"table\.o", "plain data"),
    "a NaN key": ({float("nan"): 1}, r"table", "does not load back as itself"),
    "too deep": (None, r"table", "nested more than 100 levels deep"),
    "a masked array": ({"m": np.ma.masked_array([1.0, 2.0], mask=[0, 1])}, r"table\.m", "masked arrays"),
    "an object array": ({"a": np.array([{}], dtype=object)}, r"table\.a", "object arrays"),
    "a tuple key holding a set": ({(1, frozenset()): 1}, r"table\[\(1, frozenset\(\)\)\]",
                                  "cannot checkpoint a frozenset"),
}


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_regression_a_state_that_cannot_round_trip_is_refused_before_anything_is_written(
    name: str, tmp_path: Path
) -> None:
    """Regression: a non-JSON value (complex, datetime64) raised a raw ``TypeError`` after the arrays file was
    written, naming neither the component nor the key. Now the whole state is encoded and decoded in memory
    first; the error names both, and the previous checkpoint is left byte for byte."""
    value, path, reason = BAD_VALUES[name]
    if name == "too deep":
        value = _deep(150)
    pipe = make(tmp_path)
    ckpt = tmp_path / "ckpt"
    pipe.save_checkpoint(ckpt)  # a good checkpoint first
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    pipe.scheduler.entries[0].selector.table = value
    with pytest.raises(CheckpointError) as info:
        pipe.save_checkpoint(ckpt)
    message = str(info.value)
    assert message.startswith("cannot checkpoint the state of selector 'keyed' of taskset 't0' "
                              "(tasksets[0].selector) at "), message
    assert reason in message and "nothing was written" in message
    assert re.search(path, message), message
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
    fresh = tmp_path / "fresh"
    with pytest.raises(CheckpointError):
        pipe.save_checkpoint(fresh)
    assert not fresh.exists()  # not even the directory


def test_the_trainer_and_extra_states_are_named(tmp_path: Path) -> None:
    pipe = make(tmp_path)
    with pytest.raises(CheckpointError, match=r"the extra state 'trainer' at clock: cannot checkpoint a date"):
        pipe.save_checkpoint(tmp_path / "ckpt", extra={"trainer": {"clock": np.datetime64("2024-01-01")}})


def test_check_state_reports_the_key_path() -> None:
    check_state({"a": [1, 2.5, None, "x", {"b": np.arange(3)}], (1, 2): True})
    with pytest.raises(StateError) as info:
        check_state({"a": [1, {"b": complex(0, 1)}]})
    assert info.value.key_path == ("a", 1, "b") and str(info.value).startswith("at a[1].b: cannot checkpoint")


def test_numpy_scalars_and_tuples_load_back_as_plain_values(tmp_path: Path) -> None:
    pipe = make(tmp_path)
    pipe.scheduler.entries[0].selector.table = {"f": np.float32(1.5), "i": np.int64(3), "t": (1, (2, 3)),
                                                "nan": float("nan"), "inf": -np.inf, "big": 2**100}
    pipe.save_checkpoint(tmp_path / "ckpt")
    other = make(tmp_path)
    other.load_checkpoint(tmp_path / "ckpt")
    table = other.scheduler.entries[0].selector.table
    assert table["f"] == 1.5 and table["i"] == 3 and table["t"] == [1, [2, 3]] and table["big"] == 2**100
    assert np.isnan(table["nan"]) and table["inf"] == -np.inf
    assert not [p for p in os.listdir(tmp_path / "ckpt") if p.endswith(".tmp")]
