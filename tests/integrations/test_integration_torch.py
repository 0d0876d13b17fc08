"""flexkit.integrations._torch: FlexkitSampler yields global indices, learns from feedback, resumes exactly
through torchdata's StatefulDataLoader (the StatefulDataLoader tests skip when torchdata is absent)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset, DataLoader

from flexkit import FeedbackError, FlexkitError
from flexkit.integrations._state import from_portable, to_portable
from flexkit.integrations._torch import FlexkitSampler, sampler_for_dataset
from flexkit.pipeline._pipeline import pipeline_from_dict
from tests.fixtures import jsonl_pipeline
from tests.scheduler.test_scheduler import write_taskset

SIZES = (20, 12)


def make_pipeline(tmp_path: Path, *, prefetch: bool = False, selector: str = "difficulty_based", epochs: int = 3):
    run = {"batch_size": 8, "seed": 3, "prefetch": prefetch, "total_epochs": epochs}
    return jsonl_pipeline(tmp_path, SIZES, run, selector=selector)


def reward_of(index: int, step: int) -> float:
    """A deterministic pseudo-reward, so two runs give the same feedback."""
    return float((index * 7919 + step * 104729) % 10) / 9.0


class Rows(torch.utils.data.Dataset):
    """A map-style dataset whose item is its own index (and a tag)."""

    def __init__(self, n: int, tag: str = "") -> None:
        self.n, self.tag = n, tag

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"i": i, "tag": self.tag}


# -- indices -------------------------------------------------------------------------------------------


def test_indices_map_onto_a_concat_dataset_in_taskset_order(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, selector="shuffle", epochs=1)
    ds = ConcatDataset([Rows(20, "t0"), Rows(12, "t1")])
    sampler = FlexkitSampler(pipe, ds)
    seen = list(sampler)
    assert len(seen) == len(sampler) == 32  # 4 batches of 8: one epoch
    assert sorted(seen) == list(range(32))  # shuffle visits each task once per epoch
    tids, local = sampler.locate(seen)
    for g, t, i in zip(seen, tids.tolist(), local.tolist(), strict=True):
        assert ds[g]["tag"] == f"t{t}" and ds[g]["i"] == i
    assert sampler.global_index("t1", 3) == 23 and sampler.global_index(0, 3) == 3


def test_dataset_layout_is_checked(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path)
    with pytest.raises(ValueError, match="31 items"):
        FlexkitSampler(pipe, Rows(31))
    with pytest.raises(ValueError, match=r"sizes \[12, 20\]"):
        FlexkitSampler(pipe, ConcatDataset([Rows(12), Rows(20)]))
    with pytest.raises(TypeError, match="Pipeline or TasksetScheduler"):
        FlexkitSampler([1, 2, 3])  # type: ignore[arg-type]


def test_each_dataloader_batch_is_one_scheduler_batch(tmp_path: Path) -> None:
    pipe = make_pipeline(tmp_path, epochs=1)
    reference = make_pipeline(tmp_path, epochs=1).scheduler
    sampler = FlexkitSampler(pipe)
    loader = DataLoader(Rows(32), batch_size=sampler.batch_size, sampler=sampler)
    for batch in loader:
        expected = [sampler.global_index(t.taskset_id, t.index) for t in reference.read()]
        assert batch["i"].tolist() == expected


# -- feedback ------------------------------------------------------------------------------------------


def test_feedback_becomes_per_task_pass_rates_of_the_right_taskset(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    metrics = sampler.feedback(torch.tensor([21, 21, 3, 21]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert metrics["selector_metric"] == {1: {"indices": [1], "values": [2 / 3]}, 0: {"indices": [3], "values": [1.0]}}


def test_feedback_changes_what_an_adaptive_selector_picks(tmp_path: Path) -> None:
    plain, taught = FlexkitSampler(make_pipeline(tmp_path)), FlexkitSampler(make_pipeline(tmp_path))
    taught.feedback(list(range(32)), [1.0] * 32)  # every task solved: the posteriors move toward easy
    assert list(plain)[:8] != list(taught)[:8]


def test_bad_feedback_is_rejected_and_changes_nothing(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    before = sampler.state_dict()
    with pytest.raises(FeedbackError, match="out of range"):
        sampler.feedback([0, 32], [1.0, 1.0])
    with pytest.raises(FeedbackError, match="one reward per index"):
        sampler.feedback([0, 1], [1.0])
    with pytest.raises(FeedbackError, match="integers"):
        sampler.feedback([0.5], [1.0])
    with pytest.raises(FeedbackError):
        sampler.feedback([0], [float("nan")])
    after = sampler.state_dict()
    assert torch_equal_states(before, after)


def test_a_bare_scheduler_gets_pass_rate_feedback(tmp_path: Path) -> None:
    scheduler = make_pipeline(tmp_path).scheduler
    sampler = FlexkitSampler(scheduler)
    metrics = sampler.feedback([0, 0], [0.0, 1.0])
    assert metrics["selector_metric"] == {0: {"indices": [0], "values": [0.5]}}
    clone = FlexkitSampler(make_pipeline(tmp_path).scheduler)
    clone.load_state_dict(sampler.state_dict())
    assert list(clone) == list(sampler)


# -- state ---------------------------------------------------------------------------------------------


def torch_equal_states(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(torch_equal_states(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(torch_equal_states(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def test_portable_state_round_trips_numpy_values() -> None:
    state = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "u": np.array([2**63 + 5], dtype=np.uint64),
             "b": np.array([True, False]), "o": np.array(["x", 3], dtype=object), "s": np.array(["ab", "c"]),
             "n": np.int64(7), "t": (1, np.float64(2.5)), "rng": np.random.default_rng(1).bit_generator.state}
    buf = io.BytesIO()
    torch.save(to_portable(state), buf)
    buf.seek(0)
    back = from_portable(torch.load(buf))  # weights_only=True, the default
    for key in ("a", "u", "b", "o", "s"):
        assert back[key].dtype == state[key].dtype and back[key].shape == state[key].shape
        assert back[key].tolist() == state[key].tolist()
    assert back["n"] == 7 and back["t"] == [1, 2.5] and back["rng"] == state["rng"]


def test_state_is_refused_for_other_tasksets_or_versions(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path))
    with pytest.raises(FlexkitError, match="version"):
        sampler.load_state_dict({"version": 99})
    other = tmp_path / "other"
    other.mkdir()
    write_taskset(other / "t0.jsonl", 5)
    small = pipeline_from_dict({"run": {"batch_size": 2}, "tasksets": [{"name": "t0", "path": "t0.jsonl"}]},
                               base_dir=other)
    with pytest.raises(FlexkitError, match="tasksets"):
        FlexkitSampler(small).load_state_dict(sampler.state_dict())


def test_sampler_for_dataset_needs_no_pipeline_file() -> None:
    sampler = sampler_for_dataset(Rows(10), batch_size=5, selector="shuffle", seed=4)
    first, second, third = list(sampler), list(sampler), list(sampler)  # unbounded: epoch after epoch
    assert sorted(first) == sorted(second) == sorted(third) == list(range(10))
    assert first != second or second != third
    weak = np.linspace(0, 1, 10)
    adaptive = sampler_for_dataset(Rows(10), batch_size=5, selector="difficulty_based", total_epochs=1,
                                   features={"weak": weak, "strong": weak}, target_reward=0.5, tau=0.5)
    assert len(list(adaptive)) == 10
    adaptive.feedback([0, 1], [1.0, 0.0])


# -- StatefulDataLoader --------------------------------------------------------------------------------


def run_loader(pipe, *, steps: range, loader_batch: int, state: dict | None = None):
    """Consume one loader batch per step of ``steps`` (feeding back rewards numbered by that global step), over as
    many epochs as needed; return the batches and the loader's state after them."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    sampler = FlexkitSampler(pipe, Rows(32))
    loader = sdl.StatefulDataLoader(Rows(32), batch_size=loader_batch, sampler=sampler)
    if state is not None:
        loader.load_state_dict(state)
    seen: list[list[int]] = []
    todo = iter(steps)
    step = next(todo, None)
    while step is not None:
        progressed = False
        for batch in loader:
            progressed = True
            ids = batch["i"].tolist()
            seen.append(ids)
            sampler.feedback(ids, [reward_of(i, step) for i in ids])
            step = next(todo, None)
            if step is None:
                break
        if not progressed:
            break
    return seen, loader.state_dict()


def through_bytes(state: dict) -> dict:
    """``state`` after torch.save and torch.load with the default ``weights_only=True``."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 16), loader_batch=st.sampled_from([8, 5, 3]), prefetch=st.booleans(),
       selector=st.sampled_from(["difficulty_based", "shuffle"]))
def test_stateful_dataloader_resumes_exactly(tmp_path: Path, cut: int, loader_batch: int, prefetch: bool,
                                             selector: str) -> None:
    """Stop after ``cut`` loader batches (mid-batch and across epochs too), save the loader state through
    torch.save/torch.load, resume in fresh objects: batches and feedback-driven choices match an uninterrupted
    run, batch for batch."""
    pytest.importorskip("torchdata")
    total = 16

    def pipe():
        return make_pipeline(tmp_path, prefetch=prefetch, selector=selector, epochs=8)

    whole, _ = run_loader(pipe(), steps=range(total), loader_batch=loader_batch)
    head, state = run_loader(pipe(), steps=range(cut), loader_batch=loader_batch)
    tail, _ = run_loader(pipe(), steps=range(cut, total), loader_batch=loader_batch, state=through_bytes(state))
    assert len(whole) == total
    assert head + tail == whole


def test_resume_at_the_end_of_the_run_yields_nothing_more(tmp_path: Path) -> None:
    pytest.importorskip("torchdata")
    whole, state = run_loader(make_pipeline(tmp_path, epochs=1), steps=range(10), loader_batch=8)
    assert len(whole) == 4  # one epoch of 32 tasks
    tail, _ = run_loader(make_pipeline(tmp_path, epochs=1), steps=range(10), loader_batch=8,
                         state=through_bytes(state))
    assert tail == []


def test_repeats_follow_the_repeat_sampler_layout(tmp_path: Path) -> None:
    sampler = FlexkitSampler(make_pipeline(tmp_path, epochs=1), mini_repeat_count=2, repeat_count=3)
    reference = make_pipeline(tmp_path, epochs=1).scheduler
    seen = list(sampler)
    assert len(seen) == len(sampler) == 32 * 2 * 3
    for k in range(4):
        chunk = [sampler.global_index(t.taskset_id, t.index) for t in reference.read()]
        assert seen[k * 48:(k + 1) * 48] == [i for _ in range(3) for i in chunk for _ in range(2)]
    with pytest.raises(ValueError, match="mini_repeat_count"):
        FlexkitSampler(make_pipeline(tmp_path), mini_repeat_count=0)


def test_resume_inside_a_repeated_batch(tmp_path: Path) -> None:
    def fresh() -> FlexkitSampler:
        return FlexkitSampler(make_pipeline(tmp_path, prefetch=True), mini_repeat_count=2, repeat_count=2)

    whole = fresh()
    expected = list(whole)
    for cut in (1, 7, 33, 70):
        head = fresh()
        it = iter(head)
        first = [next(it) for _ in range(cut)]
        state = through_bytes(head.state_dict())
        tail = fresh()
        tail.load_state_dict(state)
        assert first + list(tail) == expected, f"cut at {cut}"


def test_with_index_gives_loader_batches_their_dataset_indices(tmp_path: Path) -> None:
    from flexkit.integrations._torch import WithIndex

    dataset = ConcatDataset([Rows(20, "t0"), Rows(12, "t1")])
    sampler = FlexkitSampler(make_pipeline(tmp_path, epochs=1), dataset)
    loader = DataLoader(WithIndex(dataset), batch_size=sampler.batch_size, sampler=sampler)
    for indices, batch in loader:
        assert isinstance(indices, torch.Tensor) and len(indices) == 8
        tids, local = sampler.locate(indices)
        assert batch["tag"] == [f"t{t}" for t in tids.tolist()] and batch["i"].tolist() == local.tolist()
        sampler.feedback(indices, torch.ones(8))


# -- the dataset's rows are the tasksets' rows -----------------------------------------------------------------


def _topic_pipeline(tmp_path: Path, topics: list[str]):
    """One JSONL taskset with a ``topic`` column, ``frontier`` grouped by it (no guard: a bare sampler)."""
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(f'{{"question": "q{i}", "topic": "{t}", "difficulty": {i % 4}}}\n'
                            for i, t in enumerate(topics)))
    return pipeline_from_dict({
        "run": {"batch_size": 4, "seed": 0, "total_steps": 5},
        "tasksets": [{"name": "mine", "path": str(path),
                      "selector": {"type": "frontier", "feature_keys": ["topic"], "guard_metric": ""}}],
    })


def test_regression_a_reordered_dataset_is_refused(tmp_path: Path) -> None:
    """A dataset shuffled after the pipeline's file was written trained on other rows than the selector counted,
    with no error (only the length was checked)."""
    topics = ["algebra", "geometry", "counting"] * 20
    pipe = _topic_pipeline(tmp_path, topics)
    rows = [{"question": f"q{i}", "topic": t} for i, t in enumerate(topics)]
    FlexkitSampler(pipe, rows)  # the file's order: accepted
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    with pytest.raises(FlexkitError, match=r"not taskset 'mine''s rows in the same order: at row \d+: the "
                                           r"taskset's 'topic' is '\w+', the dataset's '\w+' \(\d+ of the 60"):
        FlexkitSampler(pipe, shuffled)


def test_rows_compare_by_value_and_skip_what_cannot_be_compared(tmp_path: Path) -> None:
    topics = ["a", "b"] * 10
    pipe = _topic_pipeline(tmp_path, topics)
    FlexkitSampler(pipe, [{"topic": np.str_(t), "extra": 1} for t in topics])  # numpy strings: the same values
    FlexkitSampler(pipe, [{"question": "q"} for _ in topics])  # no selector column in the items: nothing to compare
    FlexkitSampler(pipe, Rows(20))  # items without the column
    FlexkitSampler(pipe, [(i, "x") for i in range(20)])  # items that are not rows


def test_numeric_grouping_columns_compare_by_value(tmp_path: Path) -> None:
    path = tmp_path / "levels.jsonl"
    path.write_text("".join(f'{{"level": {i % 3}}}\n' for i in range(12)))
    pipe = pipeline_from_dict({
        "run": {"batch_size": 4, "seed": 0, "total_steps": 5},
        "tasksets": [{"name": "levels", "path": str(path),
                      "selector": {"type": "frontier", "feature_keys": ["level"], "guard_metric": ""}}],
    })
    FlexkitSampler(pipe, [{"level": np.int64(i % 3)} for i in range(12)])
    FlexkitSampler(pipe, [{"level": float(i % 3)} for i in range(12)])
    with pytest.raises(FlexkitError, match="row 1: the taskset's 'level' is 1, the dataset's 2"):
        FlexkitSampler(pipe, [{"level": (i * 2) % 3} for i in range(12)])
