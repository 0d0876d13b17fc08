"""``frontier``'s defaults are the confirmed recipe: a pipeline that names the selector and a grouping column gets the
draw, the floor for learnt groups and the validation guard, and the defaults never ask for what a pool or host cannot
give (no guard without groups named by a column's values, no guard_min without a guard)."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import numpy as np
import pytest

from flexkit import ConfigError, make_selector
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from flexkit.selectors.frontier import FrontierConfig, FrontierSelector
from tests.fixtures import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The recipe's selector as the validation-split protocol spells it out, key by key.
RECIPE = {"discount": 0.99, "retain": 1.0, "retain_above": 0.9, "guard_metric": "val_accuracy/{}",
          "guard_margin": 0.03, "guard_raise": 0.5, "guard_lower": 0.05, "guard_min": 0.5}


def test_a_selector_grouped_by_a_column_gets_the_recipe() -> None:
    config = FrontierConfig(feature_keys=("level",))
    assert {key: getattr(config, key) for key in RECIPE} == RECIPE
    assert config == FrontierConfig(feature_keys=("level",), **RECIPE)  # type: ignore[arg-type]


def test_the_quickstart_names_the_selector_and_its_column_and_runs_the_recipe() -> None:
    table = tomllib.loads((ROOT / "examples" / "quickstart.toml").read_text())["tasksets"][0]["selector"]
    assert table == {"type": "frontier", "feature_keys": ["level"]}
    pipe = load_pipeline(ROOT / "examples" / "quickstart.toml")
    config = pipe.config.tasksets[0].selector.config
    assert attrs.asdict(config) == attrs.asdict(FrontierConfig(feature_keys=("level",), **RECIPE))  # type: ignore[arg-type]


@pytest.mark.parametrize("params", [{}, {"text_key": "prompt", "bins": 4}, {"feature_keys": ["level"], "bins": 3},
                                    {"feature_keys": ["level"], "retain": 0.0}])
def test_no_guard_by_default_where_no_evaluation_could_name_a_group(params: dict[str, object]) -> None:
    """One group, groups from a model or from quantile bins (which no evaluation names), or no floor to steer."""
    columns = {"level": np.repeat(np.arange(1.0, 5.0), 25), "prompt": np.array([f"{i} + {i} =" for i in range(100)])}
    wanted = [*params.get("feature_keys", []), *([params["text_key"]] if "text_key" in params else [])]  # type: ignore[list-item]
    features = {key: columns[key] for key in wanted} or None
    sel = make_selector("frontier", size=100, seed=0, features=features, **params)
    assert isinstance(sel, FrontierSelector)
    assert sel.config.guard_metric == "" and sel.config.guard_min == 0.0
    assert sel.evaluation_keys() == ()
    assert "held_out" not in sel.state_dict()


def test_a_guard_set_by_hand_without_a_floor_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="retain = 0 has none"):
        FrontierConfig(feature_keys=("level",), retain=0.0, guard_metric="val_accuracy/{}")


def test_without_a_guard_the_default_guard_min_is_zero_and_a_set_one_is_refused() -> None:
    assert FrontierConfig(feature_keys=("level",), guard_metric="").guard_min == 0.0
    with pytest.raises(ConfigError, match="guard_min"):
        FrontierConfig(feature_keys=("level",), guard_metric="", guard_min=0.5)


_PIPELINE = """
[run]
batch_size = 8
seed = 0
total_steps = 3
eval_every = {every}

[[tasksets]]
name = "t"
storage_type = "arithmetic"
size = 60
levels = [1, 2, 3]

[tasksets.selector]
type = "frontier"
feature_keys = ["level"]
{guard}
[trainer]
type = "simulator"
"""


def test_a_run_with_no_evaluation_refuses_the_default_guard_and_says_how_to_turn_it_off(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(_PIPELINE.format(every=0, guard=""))
    with pytest.raises(ConfigError, match=r'tasksets\[0\]\.selector\.guard_metric.*guard_metric = ""'):
        run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    path.write_text(_PIPELINE.format(every=0, guard='guard_metric = ""'))
    result = run_pipeline(load_pipeline(path), run_dir=tmp_path / "run2", progress=None)
    assert result.steps == 3
