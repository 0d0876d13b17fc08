"""Behaviour of the simple built-in selectors: sequential, shuffle, random, offline_easy2hard."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from flexkit.plugins.builtins import flexkit_register_selectors
from flexkit.selectors import (
    DifficultyBasedConfig,
    DifficultyBasedSelector,
    OfflineEasy2HardConfig,
    OfflineEasy2HardSelector,
    RandomConfig,
    RandomSelector,
    Selector,
    SequentialConfig,
    SequentialSelector,
    ShuffleConfig,
    ShuffleSelector,
)


def batches(selector: Selector, sizes: list[int]) -> list[list[int]]:
    """The batches a selector serves for the given batch sizes, as lists."""
    out = []
    for k in sizes:
        idx = selector.get_indices(k)
        assert isinstance(idx, np.ndarray) and idx.dtype == np.int64
        out.append(idx.tolist())
    return out


# -- registration ----------------------------------------------------------------------------------


def test_builtin_hook_registers_the_seed_selectors_with_their_config_classes() -> None:
    seen: dict[str, tuple[object, object]] = {}
    flexkit_register_selectors(register=lambda name, factory, config, **_: seen.__setitem__(name, (factory, config)))
    assert {name: seen[name] for name in ("sequential", "shuffle", "random", "offline_easy2hard",
                                          "difficulty_based")} == {
        "sequential": (SequentialSelector, SequentialConfig),
        "shuffle": (ShuffleSelector, ShuffleConfig),
        "random": (RandomSelector, RandomConfig),
        "offline_easy2hard": (OfflineEasy2HardSelector, OfflineEasy2HardConfig),
        "difficulty_based": (DifficultyBasedSelector, DifficultyBasedConfig),
    }


def test_the_builtins_that_learn_from_feedback_say_so() -> None:
    seen: dict[str, type] = {}
    flexkit_register_selectors(register=lambda name, factory, config, **_: seen.__setitem__(name, factory))
    learners = {name for name, factory in seen.items() if factory.learns_from_feedback}
    assert learners == {"difficulty_based", "frontier", "learnability", "thompson_target", "zero_variance_skip",
                        "target_difficulty", "prioritized_replay"}
    assert not any(factory.allows_repeats for factory in seen.values())


def test_factories_accept_the_registered_calling_convention() -> None:
    feats = {"f0": np.full(4, 0.2), "f1": np.full(4, 0.8)}
    for factory, config in [
        (SequentialSelector, SequentialConfig()),
        (ShuffleSelector, ShuffleConfig()),
        (RandomSelector, RandomConfig()),
        (OfflineEasy2HardSelector, OfflineEasy2HardConfig(feature_keys=("f0",))),
        (DifficultyBasedSelector, DifficultyBasedConfig()),
    ]:
        sel = factory(config, size=4, seed=np.random.SeedSequence(3), features=feats)
        assert sel.config is config
        assert sorted(sel.get_indices(4).tolist()) == [0, 1, 2, 3]


# -- sequential ------------------------------------------------------------------------------------


def test_sequential_serves_in_order_and_wraps() -> None:
    sel = SequentialSelector(SequentialConfig(), size=5)
    assert batches(sel, [3, 3, 3, 3]) == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4, 0, 1]]
    assert batches(sel, [5, 1]) == [[2, 3, 4, 0, 1], [2]]


def test_sequential_refuses_a_batch_larger_than_the_taskset() -> None:
    sel = SequentialSelector(size=5)
    with pytest.raises(ValueError, match="cannot exceed"):
        sel.get_indices(6)


def test_sequential_ignores_feedback_and_explains_its_choice() -> None:
    sel = SequentialSelector(size=5)
    sel.get_indices(2)
    sel.feedback([0, 1], [1.0, 0.0])
    idx, info = sel.get_indices(2, return_extra_info=True)
    assert idx.tolist() == [2, 3] and info == {"position": 2}


# -- shuffle ---------------------------------------------------------------------------------------


def test_shuffle_epochs_are_permutations_and_a_batch_crosses_the_boundary() -> None:
    n = 7
    sel = ShuffleSelector(ShuffleConfig(), size=n, seed=11)
    first = sel.get_indices(3)  # epoch 0: [0, 3)
    second, info = sel.get_indices(3, return_extra_info=True)  # epoch 0: [3, 6)
    assert info == {"epoch": 0, "position": 3}
    perm0 = sel.permutation.copy()
    crossing = sel.get_indices(3)  # epoch 0: [6, 7) then epoch 1: [0, 2)
    perm1 = sel.permutation.copy()
    assert sel.epoch == 1 and sel.position == 2
    assert sorted(perm0.tolist()) == list(range(n)) and sorted(perm1.tolist()) == list(range(n))
    assert np.concatenate([first, second]).tolist() == perm0[:6].tolist()
    assert crossing.tolist() == [perm0[6], perm1[0], perm1[1]]
    rest = sel.get_indices(5)  # the rest of epoch 1
    assert rest.tolist() == perm1[2:].tolist()


def test_shuffle_stream_is_a_concatenation_of_permutations() -> None:
    n = 6
    sel = ShuffleSelector(size=n, seed=5)
    stream = np.concatenate([sel.get_indices(k) for k in [4, 5, 1, 6, 2, 3, 3, 6, 6, 5, 1]])
    assert stream.size == 42
    for e in range(7):
        assert sorted(stream[e * n : (e + 1) * n].tolist()) == list(range(n))


@pytest.mark.parametrize("n", [2, 3, 10])
def test_shuffle_consecutive_epochs_differ(n: int) -> None:
    sel = ShuffleSelector(size=n, seed=0)
    epochs = [sel.get_indices(n).tolist() for _ in range(300)]
    for prev, cur in itertools.pairwise(epochs):
        assert prev != cur
        assert sorted(cur) == list(range(n))
    if n == 2:
        assert epochs[:4] in ([[0, 1], [1, 0]] * 2, [[1, 0], [0, 1]] * 2)
    else:
        assert len({tuple(e) for e in epochs}) > 2  # still random, not a fixed alternation


def test_shuffle_single_task() -> None:
    sel = ShuffleSelector(size=1, seed=0)
    assert batches(sel, [1, 1, 1]) == [[0], [0], [0]]


# -- random ----------------------------------------------------------------------------------------


def test_random_draws_distinct_indices_independently_and_covers_everything() -> None:
    n, k = 20, 7
    sel = RandomSelector(RandomConfig(), size=n, seed=1)
    draws = [sel.get_indices(k) for _ in range(400)]
    for d in draws:
        assert len(set(d.tolist())) == k and d.min() >= 0 and d.max() < n
    assert len({tuple(d.tolist()) for d in draws}) > 390
    counts = np.bincount(np.concatenate(draws), minlength=n)
    assert (counts > 0).all()
    expected = 400 * k / n
    assert np.abs(counts - expected).max() < 0.35 * expected
    assert sorted(sel.get_indices(n).tolist()) == list(range(n))


# -- offline_easy2hard -----------------------------------------------------------------------------


def test_easy2hard_descending_serves_high_values_first_ties_larger_index_first() -> None:
    feats = {"acc": np.array([0.2, 0.9, 0.5, 0.9, 0.1])}
    sel = OfflineEasy2HardSelector(OfflineEasy2HardConfig(feature_keys=("acc",)), size=5, features=feats)
    assert sel.order.tolist() == [3, 1, 2, 0, 4]
    assert batches(sel, [3, 3, 3]) == [[3, 1, 2], [0, 4, 3], [1, 2, 0]]


def test_easy2hard_ascending_ties_smaller_index_first() -> None:
    feats = {"acc": np.array([0.2, 0.9, 0.5, 0.9, 0.1])}
    cfg = OfflineEasy2HardConfig(feature_keys=("acc",), order="ascending")
    sel = OfflineEasy2HardSelector(cfg, size=5, features=feats)
    assert batches(sel, [2, 2, 2]) == [[4, 0], [2, 1], [3, 4]]


def test_easy2hard_later_keys_break_ties() -> None:
    feats = {"acc": np.array([0.9, 0.9, 0.5, 0.9]), "length": np.array([3, 7, 1, 3])}
    cfg = OfflineEasy2HardConfig(feature_keys=("acc", "length"))
    sel = OfflineEasy2HardSelector(cfg, size=4, features=feats)
    # acc 0.9: length 7 (1) before length 3 (0 and 3, larger index first); then acc 0.5 (2)
    assert sel.order.tolist() == [1, 3, 0, 2]
    cfg = OfflineEasy2HardConfig(feature_keys=("acc", "length"), order="ascending")
    assert OfflineEasy2HardSelector(cfg, size=4, features=feats).order.tolist() == [2, 0, 3, 1]


def test_easy2hard_ignores_feedback_and_reports_features() -> None:
    feats = {"acc": np.array([0.2, 0.9, 0.5])}
    sel = OfflineEasy2HardSelector(OfflineEasy2HardConfig(feature_keys=("acc",)), size=3, features=feats)
    sel.feedback([0, 1, 2], [1.0, 0.0, 0.5])
    idx, info = sel.get_indices(2, return_extra_info=True)
    assert idx.tolist() == [1, 2]
    assert info["rank"].tolist() == [0, 1] and info["features"]["acc"].tolist() == [0.9, 0.5]


class LazyColumns(Mapping[str, np.ndarray]):
    """A mapping that records which columns were read."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns
        self.read: list[str] = []

    def __getitem__(self, key: str) -> np.ndarray:
        self.read.append(key)
        return self.columns[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def test_feature_columns_are_read_lazily() -> None:
    lazy = LazyColumns({"a": np.arange(3.0), "b": np.arange(3.0), "huge": np.arange(3.0)})
    OfflineEasy2HardSelector(OfflineEasy2HardConfig(feature_keys=("b", "a")), size=3, features=lazy)
    assert set(lazy.read) == {"a", "b"}


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"other": np.zeros(4)}, "'acc' is missing"),
        ({"acc": np.zeros(3)}, "'acc' has 3 values for 4 tasks"),
        ({"acc": np.array([0.1, np.nan, 0.2, 0.3])}, "'acc' contains NaN"),
        ({"acc": np.zeros((4, 1))}, "'acc' must be 1-D"),
        ({"acc": np.array(["a", "b", "c", "d"])}, "'acc' must be numeric"),
    ],
)
def test_easy2hard_rejects_bad_features(columns: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OfflineEasy2HardSelector(OfflineEasy2HardConfig(feature_keys=("acc",)), size=4, features=columns)


def test_easy2hard_config_bounds() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OfflineEasy2HardConfig(feature_keys=())
    with pytest.raises(ValueError, match="must be one of"):
        OfflineEasy2HardConfig(feature_keys=("a",), order="harder")


# -- seeds -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ShuffleSelector, RandomSelector])
def test_spawned_seeds_give_different_streams_and_equal_seeds_equal_streams(cls: type[Selector]) -> None:
    s0, s1 = np.random.SeedSequence(0).spawn(2)
    a = cls(None, size=50, seed=s0)
    b = cls(None, size=50, seed=s1)
    a_again = cls(None, size=50, seed=np.random.SeedSequence(0).spawn(2)[0])
    stream_a = batches(a, [10] * 8)
    assert stream_a != batches(b, [10] * 8)
    assert stream_a == batches(a_again, [10] * 8)
    assert batches(cls(None, size=50, seed=7), [10] * 3) == batches(cls(None, size=50, seed=7), [10] * 3)
