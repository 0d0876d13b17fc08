"""Task groups for pooling selectors: categorical columns (numbers or labels), combinations, quantile bins."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit import load_pipeline, make_selector
from flexkit.errors import TasksetError
from flexkit.selectors._grouping import MAX_GROUPS, TaskGroups


def test_categorical_numbers_and_labels_group_by_distinct_value_in_sorted_order() -> None:
    groups = TaskGroups.from_features({"level": np.array([3.0, 1.0, 3.0, 2.0])}, ["level"], 4)
    assert groups.group.tolist() == [2, 0, 2, 1] and groups.names == ("level=1", "level=2", "level=3")
    labels = TaskGroups.from_features({"source": np.array(["math", "code", "math"])}, ["source"], 3)
    assert labels.group.tolist() == [1, 0, 1] and labels.names == ("source=code", "source=math")


def test_combinations_of_columns_that_occur_are_the_groups() -> None:
    features = {"level": np.array([1.0, 1.0, 2.0, 2.0]), "source": np.array(["a", "b", "a", "a"])}
    groups = TaskGroups.from_features(features, ["level", "source"], 4)
    assert groups.group.tolist() == [0, 1, 2, 2]
    assert groups.names == ("level=1, source=a", "level=1, source=b", "level=2, source=a")
    assert groups.parents.tolist() == [0, 0, 1]  # each group's first column's value: its level
    one = TaskGroups.from_features(features, ["source"], 4)
    assert one.parents.tolist() == [0, 0]  # one column: the whole pool is the parent


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=200), st.integers(1, 8))
def test_bins_are_ordered_and_no_bin_holds_more_than_its_share_plus_ties(values: list[float], bins: int) -> None:
    column = np.asarray(values)
    groups = TaskGroups.from_features({"x": column}, ["x"], len(column), bins=bins)
    assert groups.count <= bins and set(groups.group.tolist()) == set(range(groups.count))
    order = np.argsort(column, kind="stable")
    assert (np.diff(groups.group[order]) >= 0).all()  # a larger value never falls in a lower bin


def test_bins_of_a_smooth_feature_are_quantiles() -> None:
    groups = TaskGroups.from_features({"x": np.arange(1000.0)}, ["x"], 1000, bins=4)
    assert groups.sizes().tolist() == [250, 250, 250, 250]


def test_refusals_name_the_column() -> None:
    with pytest.raises(ValueError, match="numeric"):
        TaskGroups.from_features({"s": np.array(["a", "b"])}, ["s"], 2, bins=2)
    with pytest.raises(ValueError, match="'missing' is missing"):
        TaskGroups.from_features({}, ["missing"], 2)
    with pytest.raises(ValueError, match="shape"):
        TaskGroups.from_features({"x": np.zeros(3)}, ["x"], 2)
    with pytest.raises(ValueError, match=f"more than {MAX_GROUPS}"):
        TaskGroups.from_features({"x": np.arange(MAX_GROUPS + 1.0)}, ["x"], MAX_GROUPS + 1)


def test_a_taskset_string_column_groups_through_the_pipeline(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "source": ["gsm8k", "math", "aime"][i % 3]} for i in range(30)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.toml").write_text(
        '[run]\nbatch_size = 6\ntotal_steps = 3\n\n[[tasksets]]\nname = "mixed"\npath = "tasks.jsonl"\n\n'
        '[tasksets.selector]\ntype = "frontier"\nfeature_keys = ["source"]\n')
    pipe = load_pipeline(tmp_path / "p.toml")
    selector = pipe.scheduler.entries[0].selector
    assert selector.groups.names == ("source=aime", "source=gsm8k", "source=math")
    assert selector.groups.group[:3].tolist() == [1, 2, 0]
    tasks = pipe.scheduler.read()
    pipe.feedback([{"reward": 1.0, "taskset_id": t.taskset_id, "index": t.index} for t in tasks])
    assert not np.isnan(selector.pass_rates.values).all()


def test_many_columns_whose_code_space_passes_int64_keep_their_groups_and_names() -> None:
    # five columns of 10,000 distinct values: 10^20 combined codes, past int64 (the codes used to wrap around)
    rng = np.random.default_rng(0)
    features = {key: rng.permutation(10_000).astype(np.float64) for key in "abcde"}
    groups = TaskGroups.from_features(features, list("abcde"), 10_000)
    assert groups.count == 10_000
    for task in (0, 1, 9_999):
        assert groups.names[groups.group[task]] == ", ".join(f"{k}={int(features[k][task])}" for k in "abcde")


def test_bins_take_finite_values_near_the_float_limits() -> None:
    column = np.array([3e38, 2e38, 3e38], dtype=np.float32)  # min + max overflows float32: no NaN for all that
    assert TaskGroups.from_features({"x": column}, ["x"], 3, bins=2).group.tolist() == [1, 0, 1]


@pytest.mark.parametrize(("value", "bins", "message"), [
    (float("nan"), 2, "feature 'x' must be a finite number, got nan at line 2"),
    (float("inf"), 2, "feature 'x' must be a finite number, got inf at line 2"),
    (float("nan"), 0, "feature 'x' at row 1 must be a string or a number to group by, got NaN"),
])
def test_a_taskset_column_with_nan_or_infinity_is_refused_naming_the_row(tmp_path: Path, value: float, bins: int,
                                                                          message: str) -> None:
    rows = [{"prompt": f"p{i}", "x": value if i == 1 else float(i)} for i in range(6)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.toml").write_text(
        '[run]\nbatch_size = 2\ntotal_steps = 1\n\n[[tasksets]]\nname = "t"\npath = "tasks.jsonl"\n\n'
        f'[tasksets.selector]\ntype = "frontier"\nfeature_keys = ["x"]\nbins = {bins}\n')
    pipe = load_pipeline(tmp_path / "p.toml")
    with pytest.raises(ValueError, match=re.escape(message)):
        pipe.scheduler.read()  # the scheduler builds the selector



@pytest.mark.parametrize(("column", "message"), [
    ([[1], [2, 3]], "feature column 'x' is not one column of numbers or labels"),
    ([{"a": 1}, {"b": 2}], "feature 'x' at row 0 must be a string or a number to group by, got dict"),
    (["a", None], "feature 'x' at row 1 must be a string or a number to group by, got NoneType"),
])
def test_make_selector_refuses_a_feature_that_is_not_a_column_of_labels_naming_it(column: list, message: str) -> None:
    with pytest.raises(TasksetError, match=re.escape(f"frontier: {message}")):
        make_selector("frontier", size=2, features={"x": column})


def test_make_selector_reads_mixed_python_values_as_labels_like_a_taskset() -> None:
    selector = make_selector("frontier", size=4, features={"x": np.array(["a", 3, "3", True], dtype=object)})
    assert selector.groups.names == ("x=3", "x=a", "x=true")


def _taskset_group_names(tmp_path: Path, rows: list[dict], key: str) -> tuple[str, ...]:
    """The group names of ``frontier`` grouped by ``key`` over ``rows`` read from a JSONL taskset."""
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.toml").write_text(
        '[run]\nbatch_size = 2\ntotal_steps = 1\n\n[[tasksets]]\nname = "t"\npath = "tasks.jsonl"\n\n'
        f'[tasksets.selector]\ntype = "frontier"\nfeature_keys = ["{key}"]\n')
    pipe = load_pipeline(tmp_path / "p.toml")
    pipe.scheduler.read()
    return tuple(pipe.scheduler.entries[0].selector.groups.names)


def test_integer_labels_beyond_float64_precision_keep_one_group_each(tmp_path: Path) -> None:
    ids = np.array([2**53, 2**53 + 1, 2**53 + 2, 2**53 + 3], dtype=np.int64)
    assert make_selector("frontier", size=4, features={"id": ids}).groups.count == 4  # float64 merged them
    assert make_selector("frontier", size=3, features={"id": [10**30, 10**30 + 1, 1]}).groups.names == (
        "id=1", "id=1000000000000000000000000000000", "id=1000000000000000000000000000001")
    rows = [{"prompt": f"p{i}", "id": 2**53 + i % 2} for i in range(4)]
    assert _taskset_group_names(tmp_path, rows, "id") == ("id=9007199254740992", "id=9007199254740993")


@pytest.mark.parametrize(("column", "message"), [
    (np.array([1.0, np.nan, 2.0, np.nan]), "feature column 'x' contains NaN"),
    ([1, float("nan"), "a", 3], "feature 'x' at row 1 must be a string or a number to group by, got NaN"),
    (np.array([1j, 2, 3, 4]), "feature column 'x' holds complex numbers"),
])
def test_make_selector_refuses_nan_and_complex_labels_as_a_taskset_does(column: object, message: str) -> None:
    with pytest.raises(TasksetError, match=re.escape(f"frontier: {message}")):
        make_selector("frontier", size=4, features={"x": column})


def test_equal_numbers_are_one_label_on_both_paths(tmp_path: Path) -> None:
    mixed = [True, 1, "1", 1.0, 2.5]
    assert make_selector("frontier", size=5, features={"x": mixed}).groups.names == ("x=1", "x=2.5", "x=true")
    rows = [{"prompt": f"p{i}", "x": value} for i, value in enumerate(mixed)]
    assert _taskset_group_names(tmp_path, rows, "x") == ("x=1", "x=2.5", "x=true")
    bools = make_selector("frontier", size=2, features={"x": np.array([True, False])})
    assert bools.groups.names == ("x=false", "x=true")  # bools are labels, as a taskset reads them


@pytest.mark.parametrize("column", [np.linspace(0.10001, 0.10009, 40), np.array([1000.0, 1001, 1002, 1003] * 10)])
def test_every_bin_has_its_own_name_however_close_its_edges(column: np.ndarray) -> None:
    groups = TaskGroups.from_features({"x": column}, ["x"], len(column), bins=4)
    assert groups.count == 4 and len(set(groups.names)) == 4
    selector = make_selector("frontier", size=len(column), features={"x": column}, bins=4)
    assert len(selector.summary()) >= 4  # no group's entry overwrites another's


def test_regression_a_measured_column_is_refused_as_labels_with_the_bins_fix() -> None:
    """A continuous column grouped without bins made one group per task, accepted by validate and preview; under a
    guard the run then failed at its first evaluation with a message that never said bins."""
    from flexkit.errors import ConfigError

    scores = np.random.default_rng(0).random(60)
    with pytest.raises(ConfigError, match=r"frontier: feature column 'difficulty' holds 60 distinct non-integer "
                                          r"numbers over 60 tasks, .* set bins = k"):
        TaskGroups.from_features({"difficulty": scores}, ["difficulty"], 60, owner="frontier")
    assert TaskGroups.from_features({"difficulty": scores}, ["difficulty"], 60, bins=4).count == 4
    levels = np.array([1.0, 2.5, 3.0] * 20)  # a few fractional labels are labels
    assert TaskGroups.from_features({"level": levels}, ["level"], 60).count == 3
    ids = np.arange(60, dtype=np.float64)  # whole numbers (ids) are labels whatever their count
    assert TaskGroups.from_features({"id": ids}, ["id"], 60).count == 60


def test_regression_a_column_named_twice_is_refused() -> None:
    """feature_keys = ["level", "level"] was accepted, grouping by the pairs of a column with itself."""
    from flexkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"frontier: feature_keys names 'level' more than once"):
        TaskGroups.from_features({"level": np.arange(6) % 3}, ["level", "level"], 6, owner="frontier")
