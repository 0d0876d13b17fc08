"""``make_selector``'s refusals of feature columns say what the caller gave: an object-dtype column of numbers is
read as numbers (it was made into text labels and refused as "dtype <U20", a dtype flexkit made), a None row of a
numeric selector's column is a missing number (not a value "to group by"), and an infinity in a grouping column
is called infinite (not "magnitude 2**53 or more ... pass as int64")."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flexkit import make_selector
from flexkit.errors import TasksetError


@pytest.mark.parametrize("name", ["difficulty_based", "offline_easy2hard"])
def test_regression_an_object_dtype_column_of_numbers_is_read_as_numbers(name: str) -> None:
    values = [0.1, 0.2, 0.3, 0.4]
    features = {"f0": np.array(values, dtype=object), "f1": np.array([0.5, 0.6, 0.7, 1], dtype=object)}
    selector = make_selector(name, size=4, seed=0, features=features)
    reference = make_selector(name, size=4, seed=0, features={k: np.array(v.tolist(), dtype=np.float64)
                                                              for k, v in features.items()})
    assert selector.get_indices(2).tolist() == reference.get_indices(2).tolist()


def test_an_object_dtype_column_of_numbers_groups_as_the_same_numbers() -> None:
    given = make_selector("frontier", size=4, features={"level": np.array([1, 2, 2, 3], dtype=object)})
    plain = make_selector("frontier", size=4, features={"level": [1, 2, 2, 3]})
    assert given.groups.names == plain.groups.names == ("level=1", "level=2", "level=3")


@pytest.mark.parametrize(("column", "message"), [
    ([0.1, None, 0.3, 0.4], "got None (no value) at row 1 of the values given"),
    (np.array([0.1, "a", 0.3, 0.4], dtype=object), "got str 'a' at row 1 of the array of dtype object given"),
    (np.array([0.1, 0.2, True, 0.4], dtype=object), "got bool True at row 2 of the array of dtype object given"),
])
def test_regression_a_numeric_selector_names_the_callers_value_and_dtype(column: object, message: str) -> None:
    with pytest.raises(TasksetError, match=re.escape(f"difficulty_based: feature column 'f0' must hold numbers, "
                                                     f"{message}")) as info:
        make_selector("difficulty_based", size=4, features={"f0": column, "f1": np.ones(4)})
    assert "group by" not in str(info.value) and "<U" not in str(info.value)


@pytest.mark.parametrize("column", [[1.0, float("inf"), 2.0, 3.0], np.array([1.0, -np.inf, 2, 3], dtype=np.float32)])
def test_regression_an_infinity_in_a_grouping_column_is_called_infinite(column: object) -> None:
    with pytest.raises(TasksetError, match=r"frontier: feature column 'level' holds an infinite value \(-?inf at row "
                                           r"1\), which is no group label") as info:
        make_selector("frontier", size=4, features={"level": column})
    assert "2**53" not in str(info.value)


def test_a_huge_finite_number_still_gets_the_precision_message() -> None:
    with pytest.raises(TasksetError, match=re.escape("magnitude 2**53 or more")):
        make_selector("frontier", size=2, features={"id": np.array([1e17, 1.0])})
