"""RolloutBatch: conversions, shape checks, requirements, cached group ids and sequence rewards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.errors import SampleError
from flexkit.sample import RolloutBatch
from flexkit.sample._batch import masked_sum


def _batch(**extra: object) -> RolloutBatch:
    data: dict[str, object] = {
        "response_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]),
        "rm_scores": torch.tensor([[0.0, 1.0, 5.0], [2.0, 9.0, 9.0], [0.5, 0.5, 0.5], [3.0, 3.0, 3.0]]),
        "uid": ["a", "b", "a", "c"],
    }
    data.update(extra)
    return RolloutBatch.from_dict(data)


def test_from_dict_conversions() -> None:
    arr2d = np.ones((4, 3), dtype=np.float32)
    b = _batch(old_log_probs=arr2d, taskset_id=np.array([0, 1, 0, 1]), index=[5, 6, 7, 8], tags=("x", "y", "z", "w"))
    assert isinstance(b["rm_scores"], torch.Tensor)
    assert isinstance(b["old_log_probs"], torch.Tensor) and b["old_log_probs"].data_ptr() == arr2d.ctypes.data
    for name in ("uid", "taskset_id", "index", "tags"):
        assert isinstance(b[name], np.ndarray) and b[name].shape == (4,)
    assert b.batch_size == len(b) == 4 and b.response_length == 3
    assert "uid" in b and "nope" not in b
    assert b.keys()[:3] == ["response_mask", "rm_scores", "uid"]
    assert b.get("nope", 7) == 7


def test_shape_errors_name_fields() -> None:
    with pytest.raises(SampleError, match=r"'uid' has 3 rows but the batch has 4"):
        _batch(uid=["a", "b", "c"])
    with pytest.raises(SampleError, match=r"'advantages' has shape \(4, 2\) but 'response_mask' has \(4, 3\)"):
        _batch(advantages=torch.zeros(4, 2))
    with pytest.raises(SampleError, match="0-d"):
        _batch(step=torch.tensor(3.0))
    b = _batch()
    with pytest.raises(SampleError, match=r"no field 'advantages'; fields: response_mask, rm_scores, uid"):
        b["advantages"]


def test_require_names_missing_fields_and_who() -> None:
    b = _batch()
    b.require(["uid", "token_level_scores|rm_scores"], who="me")
    with pytest.raises(SampleError, match=r"scorer X requires batch field\(s\) 'advantages', 'a' or 'b'"):
        b.require(["advantages", "uid", "a|b"], who="scorer X")


def test_group_index_strings_dense_and_cached() -> None:
    b = _batch()
    gid, n = b.group_index()
    assert n == 3 and gid.dtype == np.int64
    assert gid[0] == gid[2] and len({gid[0], gid[1], gid[3]}) == 3 and set(gid) == {0, 1, 2}
    assert b.group_index()[0] is gid  # cached
    b["uid"] = [1, 1, 2, 2]
    gid2, n2 = b.group_index()
    assert n2 == 2 and gid2.tolist() == [0, 0, 1, 1]


def test_group_index_mixed_object_values() -> None:
    b = _batch(uid=np.array([1, "1", 1, ("t", 2)], dtype=object))
    gid, n = b.group_index()
    assert n == 3 and gid[0] == gid[2] and gid[0] != gid[1]
    lists = np.empty(4, dtype=object)
    lists[:] = [[1], [2], [1], [3]]
    with pytest.raises(SampleError, match="hashable"):
        _batch(uid=lists).group_index()


def test_sequence_rewards_masked_sum_and_preference() -> None:
    b = _batch()
    assert b.sequence_rewards().tolist() == [1.0, 2.0, 1.5, 0.0]
    b["token_level_scores"] = torch.ones(4, 3)
    assert b.sequence_rewards().tolist() == [2.0, 1.0, 3.0, 0.0]  # token_level_scores preferred
    assert b.sequence_rewards("rm_scores").tolist() == [1.0, 2.0, 1.5, 0.0]
    one_d = RolloutBatch.from_dict({"rm_scores": torch.tensor([1, 0, 3])})
    assert one_d.sequence_rewards().dtype == torch.float32 and one_d.sequence_rewards().tolist() == [1, 0, 3]
    with pytest.raises(SampleError, match="'token_level_scores' or 'rm_scores'"):
        RolloutBatch.from_dict({"uid": [1, 2]}).sequence_rewards()


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.bool, torch.float32])
def test_masked_sum_blocks_match_dense(mask_dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flexkit.sample._batch.MASKED_SUM_BLOCK", 64)  # several blocks, a ragged last one
    g = torch.Generator().manual_seed(0)
    values = torch.randn(37, 16, generator=g)
    mask = torch.rand(37, 16, generator=g) > 0.3
    expected = (values * mask.float()).sum(-1)
    torch.testing.assert_close(masked_sum(values, mask.to(mask_dtype)), expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 6), min_size=1, max_size=40), st.sampled_from(["int64", "int32", "uint8", "bool"]),
       st.booleans())
def test_group_index_equals_np_unique_for_sorted_and_unsorted_integer_ids(ids: list[int], dtype: str,
                                                                          sort: bool) -> None:
    """Sorted integer ids (each prompt's responses in a row) take a cumulative-sum path; the result is
    ``np.unique``'s either way."""
    values = np.asarray(ids).astype(dtype) if dtype != "uint8" else np.abs(np.asarray(ids)).astype(dtype)
    if sort:
        values = np.sort(values)
    uniques, inverse = np.unique(values, return_inverse=True)
    got, count = RolloutBatch.from_dict({"uid": values}).group_index()
    assert count == len(uniques) and got.dtype == np.int64 and got.tolist() == inverse.tolist()


@given(st.lists(st.integers(0, 30), max_size=20))
def test_keep_indices_are_sorted_and_unique_whatever_the_actuator_returns(indices: list[int]) -> None:
    from flexkit.sample._actuator import Keep

    assert Keep(np.asarray(indices, dtype=np.int64)).indices.tolist() == sorted(set(indices))
