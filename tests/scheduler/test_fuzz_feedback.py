"""Fuzzing feedback: every payload is accepted, or refused with :class:`flexkit.FeedbackError` and no state change.

A scheduler over five tasksets (one per built-in selector: sequential, shuffle, random, offline_easy2hard,
difficulty_based) gets payloads built from valid ones with corruptions: NaN, ±inf, negative and > 1 values (with
``out_of_range`` "clip" and "error"), unknown taskset ids (ints, negative, huge, strings, None, floats, bools),
out-of-range / duplicate / float / bool / string indices, length mismatches, wrong types (None, scalars, nested
lists, dicts, object and 2-D numpy arrays), missing and extra keys. Each payload carries the outcome it must have
(accepted, refused, or either for corner cases), and a refusal must leave ``scheduler.state_dict()`` byte-identical
(canonical JSON, numpy arrays by dtype, shape and values). ``PassRateCalculator.process`` on fuzzed experiences
returns a result or raises ``FeedbackError``; its result then goes through the scheduler the same way.

The default run tries a couple of hundred payloads; the big run (``FLEXKIT_SLOW=1 pytest -m slow
tests/test_fuzz_*.py``) tries ``FLEXKIT_FUZZ_EXAMPLES`` (default 10,000) and prints its tally.
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexkit import FeedbackError
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.scheduler._scheduler import TasksetScheduler
from flexkit.scheduler.feedback import SELECTOR_METRIC, Experience, PassRateCalculator
from flexkit.selectors._base import validate_feedback

SLOW = pytest.mark.skipif(os.environ.get("FLEXKIT_SLOW") != "1", reason="big fuzz run: set FLEXKIT_SLOW=1")
BIG_N = int(os.environ.get("FLEXKIT_FUZZ_EXAMPLES", "10000"))
FUZZ_SETTINGS: dict[str, Any] = {"deadline": None, "suppress_health_check": list(HealthCheck), "database": None}

#: The fuzzed scheduler's tasksets: name -> (rows, selector table).
TASKSETS: dict[str, tuple[int, dict[str, Any]]] = {
    "seq": (7, {"type": "sequential"}),
    "shuf": (9, {"type": "shuffle"}),
    "rand": (12, {"type": "random"}),
    "e2h": (10, {"type": "offline_easy2hard", "feature_keys": ["f0", "f1"]}),
    "diff": (16, {"type": "difficulty_based", "tau": 0.5, "do_sample": True, "adaptive_rho": True}),
}
NAMES = list(TASKSETS)
SIZES = [rows for rows, _ in TASKSETS.values()]


# -- the scheduler under test ---------------------------------------------------------------------------------


def canonical(state: Any) -> str:
    """A canonical JSON dump of a state dict (numpy arrays as dtype, shape and values; keys sorted)."""

    def plain(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return {"dtype": obj.dtype.str, "shape": list(obj.shape), "values": obj.tolist()}
        if isinstance(obj, np.generic):
            return obj.item()
        raise TypeError(f"unexpected {type(obj).__name__} in a state dict")

    return json.dumps(state, default=plain, sort_keys=True)


def build_pipeline(root: Path, *, out_of_range: str, prefetch: bool) -> Any:
    """A pipeline over the five tasksets in ``root`` (small JSONL files with features f0, f1 in [0, 1])."""
    data = {
        "run": {"batch_size": 6, "seed": 3, "total_steps": 10**6, "prefetch": prefetch},
        "tasksets": [{"name": n, "path": f"{n}.jsonl", "selector": sel} for n, (_, sel) in TASKSETS.items()],
        "feedback": {"out_of_range": out_of_range},
    }
    return pipeline_from_dict(data, base_dir=root)


def write_tasksets(root: Path) -> None:
    """One JSONL file per taskset, rows with numeric features f0, f1 in [0, 1]."""
    for name, (rows, _) in TASKSETS.items():
        lines = [json.dumps({"q": f"{name} {i}", "f0": (i * 5 % 7) / 7, "f1": min(1.0, (i * 5 % 7) / 7 + 0.2)})
                 for i in range(rows)]
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


class Harness:
    """A scheduler warmed up by a few batches and valid feedback; :meth:`reset` restores that state."""

    def __init__(self, root: Path, *, out_of_range: str, prefetch: bool) -> None:
        self.pipe = build_pipeline(root, out_of_range=out_of_range, prefetch=prefetch)
        self.out_of_range = out_of_range
        self.sched: TasksetScheduler = self.pipe.scheduler
        rng = np.random.default_rng(0)
        for _ in range(4):
            tasks = self.sched.read()
            self.pipe.feedback([Experience(reward=float(rng.random()), taskset_id=t.taskset_id, index=t.index)
                                for t in tasks])
        self.warm = copy.deepcopy(self.sched.state_dict())

    def reset(self) -> None:
        self.sched.load_state_dict(copy.deepcopy(self.warm))

    def feed(self, metrics: Any) -> str:
        """Give ``metrics`` to the scheduler: ``"accepted"``, or ``"refused"`` (FeedbackError, state unchanged)."""
        before = canonical(self.sched.state_dict())
        try:
            self.sched.feedback(metrics)
        except FeedbackError as exc:
            assert str(exc), "a FeedbackError without a message"
            after = canonical(self.sched.state_dict())
            assert after == before, f"refused feedback changed the state: {exc}"
            return "refused"
        return "accepted"

    def still_works(self) -> None:
        """After any payloads, the scheduler still reads full batches."""
        assert len(self.sched.read()) == self.sched.batch_size


@pytest.fixture(scope="module")
def task_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz_feedback")
    write_tasksets(root)
    return root


@pytest.fixture(scope="module")
def harnesses(task_root: Path) -> Iterator[dict[str, Harness]]:
    """One warmed-up harness per mode: clip, error (both without prefetch) and clip with prefetch."""
    made = {
        "clip": Harness(task_root, out_of_range="clip", prefetch=False),
        "error": Harness(task_root, out_of_range="error", prefetch=False),
        "prefetch": Harness(task_root, out_of_range="clip", prefetch=True),
    }
    yield made
    for harness in made.values():
        harness.sched.close()


# -- payload strategies (each with the outcome it must have) --------------------------------------------------

#: How a corruption affects validity: always invalid, valid, invalid only with out_of_range="error", or unknown.
INVALID, VALID, CLIP_ONLY, EITHER = "invalid", "valid", "clip_only", "either"

BAD_VALUES = [math.nan, -math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf")]
OUT_VALUES = [-0.5, 1.5, -1e308, 1e308, 2, -3, 1.0000000000000002, -5e-324, 10**30]
EDGE_VALUES = [0, 1, 0.0, 1.0, -0.0, 5e-324, 0.9999999999999999, np.float16(0.5), np.int8(1)]
WRONG_VALUES = [None, "0.5", True, False, np.True_, [0.5], {"v": 1}, 1j, 10**400, b"1", (), object()]
BAD_INDICES: list[Any] = [-1, "size", "size+5", -(2**63), 2**63, 10**30, 1.0, 0.5, math.nan, "1", None, True, False,
                          np.True_, [0], {"i": 0}, 1j]
UNKNOWN_TASKSETS: list[Any] = [5, 6, 100, -1, -5, 2**63, 10**30, "nope", "", "SEQ", "seq ", "😀", "\u202eseq", None,
                               0.0, 1.5, math.nan, True, False, (0,), np.float64(1.0), np.bool_(True), b"seq"]
WRONG_CONTAINERS: list[Any] = [None, 3, 0.5, "0,1", b"\x00\x01", {"a": 1}, {0: 1}, [[0, 1], [2]], [[0], [1]],
                               np.array([[0, 1]]), np.array([0, 1], dtype=object), np.array([0.5, 0.25], dtype=object),
                               np.zeros((2, 2)), np.array(3), np.array(["0", "1"]), np.array([1 + 0j, 0j]),
                               np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]"), {0, 1}]


@st.composite
def part_payload(draw: st.DrawFn, tid: int) -> tuple[Any, str]:
    """``{"indices", "values"}`` for taskset ``tid``, maybe corrupted; with the validity of the corruption."""
    size = SIZES[tid]
    indices: Any = draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size))
    values: Any = [draw(st.floats(0, 1)) for _ in indices]
    kind = draw(st.sampled_from(["none", "none", "bad_value", "out_value", "edge_value", "wrong_value", "bad_index",
                                 "dup_index", "short", "long", "wrong_container", "missing", "extra_key",
                                 "not_a_part"]))
    if kind in ("bad_value", "out_value", "edge_value", "wrong_value", "dup_index", "short") and not indices:
        indices, values = [draw(st.integers(0, size - 1))], [0.5]
    verdict, arrays_ok = VALID, True  # arrays_ok: numpy may turn the lists into arrays without changing the verdict
    if kind in ("bad_value", "out_value", "edge_value", "wrong_value"):
        pool = {"bad_value": BAD_VALUES, "out_value": OUT_VALUES, "edge_value": EDGE_VALUES,
                "wrong_value": WRONG_VALUES}[kind]
        value = draw(st.sampled_from(pool))
        values[draw(st.integers(0, len(values) - 1))] = value
        verdict = {"bad_value": INVALID, "out_value": CLIP_ONLY, "edge_value": VALID, "wrong_value": INVALID}[kind]
        if kind == "out_value" and isinstance(value, int) and value > 2**63:
            verdict = EITHER  # numpy makes a float array or an object array (not numbers), by position
        arrays_ok = kind != "wrong_value"  # np.asarray([0.5, True]) is a plain float array
    elif kind == "bad_index":
        bad = draw(st.sampled_from(BAD_INDICES))
        indices.append({"size": size, "size+5": size + 5}.get(bad, bad) if isinstance(bad, str) else bad)
        values.append(0.5)
        verdict, arrays_ok = INVALID, False
    elif kind == "dup_index":
        indices.append(draw(st.sampled_from(indices)))
        values.append(0.25)
        verdict = INVALID
    elif kind == "short":
        (values if draw(st.booleans()) else indices).pop()
        verdict = INVALID
    elif kind == "long":
        if draw(st.booleans()):
            values.append(0.5)
        else:
            indices.append(size - 1)
        verdict = INVALID
    elif kind == "wrong_container":
        wrong = copy.deepcopy(draw(st.sampled_from(WRONG_CONTAINERS)))
        if draw(st.booleans()):
            values = wrong
        else:
            indices = wrong
        verdict, arrays_ok = INVALID, False
    part: Any = {"indices": _as(draw, indices, arrays_ok), "values": _as(draw, values, arrays_ok)}
    if kind == "missing":
        del part[draw(st.sampled_from(["indices", "values"]))]
        verdict = INVALID
    elif kind == "extra_key":
        part[draw(st.sampled_from(["extra", "index", "value", "", "😀"]))] = draw(st.sampled_from([None, 1, [1]]))
    elif kind == "not_a_part":
        part = draw(st.sampled_from([None, [indices, values], (indices, values), "indices", 3, [part]]))
        verdict = INVALID
    return part, verdict


def _as(draw: st.DrawFn, items: Any, arrays_ok: bool) -> Any:
    """A list as is, as a tuple, or (when ``arrays_ok``) as the numpy array numpy infers; other things as is."""
    if not isinstance(items, list):
        return items
    how = draw(st.sampled_from(["list", "list", "tuple", "array"] if arrays_ok else ["list", "tuple"]))
    if how == "tuple":
        return tuple(items)
    if how == "array":
        return np.asarray(items)
    return items


def _merge(verdicts: list[str]) -> str:
    if INVALID in verdicts:
        return INVALID
    if EITHER in verdicts:
        return EITHER
    return CLIP_ONLY if CLIP_ONLY in verdicts else VALID


@st.composite
def payloads(draw: st.DrawFn) -> tuple[Any, str]:
    """A metrics dict (or something else) for ``TasksetScheduler.feedback``, with the verdict it must get."""
    shape = draw(st.sampled_from(["parts"] * 8 + ["not_mapping", "metric_not_mapping", "no_metric"]))
    if shape == "not_mapping":
        return draw(st.sampled_from([None, [], "selector_metric", 3, [(SELECTOR_METRIC, {})]])), INVALID
    if shape == "metric_not_mapping":
        return {SELECTOR_METRIC: draw(st.sampled_from([None, [], 3, "x", [{"indices": [0]}]]))}, INVALID
    if shape == "no_metric":  # a misspelt selector_metric is refused with a did-you-mean, other keys are left alone
        return draw(st.sampled_from([({}, VALID), ({"other": 1}, VALID), ({"selector_metrics": {0: None}}, INVALID)]))
    tids = draw(st.lists(st.integers(0, len(NAMES) - 1), unique=True, max_size=len(NAMES)))
    payload: dict[Any, Any] = {}
    verdicts: list[str] = []
    for tid in tids:
        key: Any = draw(st.sampled_from([tid, NAMES[tid], np.int64(tid), np.uint8(tid)]))
        part, verdict = draw(part_payload(tid))
        payload[key] = part
        verdicts.append(verdict)
    extra = draw(st.sampled_from(["none", "none", "unknown", "twice"]))
    if extra == "unknown":
        unknown = draw(st.sampled_from(UNKNOWN_TASKSETS))
        if unknown not in payload:  # True == 1 and 0.0 == 0 as dict keys: they would replace a part
            payload[unknown] = {"indices": [0], "values": [0.5]}
            verdicts.append(INVALID)
    elif extra == "twice" and tids:
        tid = draw(st.sampled_from(tids))
        other = NAMES[tid] if not isinstance(next(k for k in payload if _id(k) == tid), str) else tid
        payload[other] = {"indices": [], "values": []}
        verdicts.append(INVALID)
    metrics: dict[str, Any] = {SELECTOR_METRIC: payload}
    if draw(st.booleans()):
        metrics["loss"] = draw(st.sampled_from([0.5, None, "x", [1]]))
    return metrics, _merge(verdicts)


def _id(key: Any) -> int:
    return NAMES.index(key) if isinstance(key, str) else int(key)


_reward = st.one_of(st.floats(0, 1), st.sampled_from(BAD_VALUES + OUT_VALUES + WRONG_VALUES + [np.float32(0.5)]))
_tid = st.one_of(st.integers(0, len(NAMES) - 1), st.sampled_from(UNKNOWN_TASKSETS))
_index = st.one_of(st.integers(0, 6), st.sampled_from(BAD_INDICES))


@attrs.define
class TrinityLike:
    """A Trinity-RFT-style experience: ``info["task_index"]`` and ``reward``."""

    reward: Any
    info: Any


@st.composite
def experience(draw: st.DrawFn) -> Any:
    """One experience in any of the accepted forms, with fuzzed fields (or not an experience at all)."""
    reward, tid, index = draw(_reward), draw(_tid), draw(_index)
    form = draw(st.sampled_from(["experience", "flat", "task_index", "info", "trinity", "junk", "missing"]))
    if form == "experience":
        return Experience(reward=reward, taskset_id=tid, index=index)
    if form == "flat":
        return {"reward": reward, "taskset_id": tid, "index": index}
    if form == "task_index":
        return {"reward": reward, "task_index": draw(st.sampled_from([{"taskset_id": tid, "index": index}, None,
                                                                      [tid, index], "x", {}]))}
    if form == "info":
        return {"reward": reward, "info": draw(st.sampled_from([{"task_index": {"taskset_id": tid, "index": index}},
                                                                "task_index", {"task_index": None}, 3]))}
    if form == "trinity":
        return TrinityLike(reward, draw(st.sampled_from([{"task_index": {"taskset_id": tid, "index": index}}, None,
                                                         {"task_index": 3}])))
    if form == "missing":
        return {"reward": reward, "taskset_id": tid}
    return draw(st.sampled_from([None, 3, "exp", [reward, tid, index], (), b"x", {}]))


experiences = st.one_of(
    st.lists(experience(), max_size=8),
    st.lists(st.builds(Experience, reward=st.floats(0, 1), taskset_id=st.integers(0, 4), index=st.integers(0, 6)),
             max_size=8),
    st.sampled_from([None, 3, "abc", {"reward": 1}, b"xyz", 1.5]),
)


def check_process(harness: Harness, exps: Any) -> tuple[str, ...]:
    """``PassRateCalculator.process`` gives a result or a FeedbackError; a result then goes to the scheduler."""
    try:
        _out, metrics = PassRateCalculator().process(exps)
    except FeedbackError as exc:
        assert str(exc)
        return ("process_refused",)
    assert set(metrics) == {SELECTOR_METRIC}
    return "process_ok", harness.feed(metrics)


def check_payload(harness: Harness, metrics: Any, verdict: str) -> str:
    """Feed one payload; its outcome must match ``verdict``."""
    outcome = harness.feed(metrics)
    expected = {VALID: "accepted", INVALID: "refused"}.get(verdict)
    if verdict == CLIP_ONLY:
        expected = "accepted" if harness.out_of_range == "clip" else "refused"
    if expected is not None:
        assert outcome == expected, f"{verdict} payload was {outcome}: {metrics!r}"
    return outcome


# -- default-size fuzz tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["clip", "error"])
@settings(max_examples=50, **FUZZ_SETTINGS)
@given(cases=st.lists(payloads(), min_size=1, max_size=3))
def test_fuzz_feedback_payloads(harnesses: dict[str, Harness], mode: str, cases: list[tuple[Any, str]]) -> None:
    """Payloads are accepted or refused as their corruption demands; a refusal changes no state."""
    harness = harnesses[mode]
    harness.reset()
    for metrics, verdict in cases:
        check_payload(harness, metrics, verdict)
    harness.still_works()


@settings(max_examples=20, **FUZZ_SETTINGS)
@given(cases=st.lists(payloads(), min_size=1, max_size=3))
def test_fuzz_feedback_with_prefetch(harnesses: dict[str, Harness], cases: list[tuple[Any, str]]) -> None:
    """The same with a prefetched batch pending: a refusal leaves the state (pending batch included) unchanged."""
    harness = harnesses["prefetch"]
    harness.reset()
    harness.sched.read()  # a prefetch is now pending
    for metrics, verdict in cases:
        check_payload(harness, metrics, verdict)
    harness.still_works()


@settings(max_examples=40, **FUZZ_SETTINGS)
@given(exps=experiences, mode=st.sampled_from(["clip", "error"]))
def test_fuzz_pass_rate_calculator(harnesses: dict[str, Harness], exps: Any, mode: str) -> None:
    """Fuzzed experiences: a result or a FeedbackError from the operator; then accepted or cleanly refused."""
    harness = harnesses[mode]
    harness.reset()
    check_process(harness, exps)
    harness.still_works()


# -- the big run ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@SLOW
def test_fuzz_feedback_big(harnesses: dict[str, Harness]) -> None:
    """``FLEXKIT_FUZZ_EXAMPLES`` examples (default 10,000) over all three modes: each feeds one fuzzed payload, and
    one in three first runs fuzzed experiences through ``PassRateCalculator`` (its result is fed too); prints the
    tally."""
    tally: Counter[str] = Counter()
    started = time.perf_counter()

    @settings(max_examples=BIG_N, **FUZZ_SETTINGS)
    @given(mode=st.sampled_from(["clip", "error", "prefetch"]), case=payloads(), exps=experiences,
           via_operator=st.integers(0, 2))
    def run(mode: str, case: tuple[Any, str], exps: Any, via_operator: int) -> None:
        harness = harnesses[mode]
        harness.reset()
        if via_operator == 0:
            tally["experience_lists"] += 1
            outcome = check_process(harness, exps)
            tally.update(outcome)
            tally["payloads"] += len(outcome) - 1
        tally[check_payload(harness, *case)] += 1
        tally["payloads"] += 1
        tally["examples"] += 1

    run()
    elapsed = time.perf_counter() - started
    print(f"\nfeedback fuzz: {tally['payloads']} payloads to the scheduler ({tally['examples']} examples) in "
          f"{elapsed:.1f} s: {dict(tally)}")
    assert tally["payloads"] >= BIG_N * 0.95
    assert tally["accepted"] > 0 and tally["refused"] > 0


# -- regressions ----------------------------------------------------------------------------------------------


def _in_thread(call: Any, timeout: float = 10.0) -> bool:
    """Run ``call`` in a daemon thread; whether it finished within ``timeout`` (a deadlock leaves it behind)."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout)
    return not worker.is_alive()


def test_regression_state_dict_with_a_prefetch_pending_does_not_deadlock(task_root: Path) -> None:
    """state_dict() and load_state_dict() took the scheduler's lock and then waited for the pending prefetch, whose
    thread needs that lock to select: a checkpoint (or a refused feedback's state check) right after a read hung."""
    sched = build_pipeline(task_root, out_of_range="clip", prefetch=True).scheduler
    produce = sched._produce

    def late_produce(step: int) -> Any:
        time.sleep(0.2)  # the caller takes the lock first, as it can in a real run
        return produce(step)

    sched._produce = late_produce  # type: ignore[method-assign]
    sched.read()
    states: list[dict[str, Any]] = []
    assert _in_thread(lambda: states.append(sched.state_dict())), "state_dict() deadlocked"
    sched.read()
    assert _in_thread(lambda: sched.load_state_dict(states[0])), "load_state_dict() deadlocked"
    sched.close()


@pytest.mark.parametrize(
    "exps",
    [None, 3, 1.5, [{"reward": 10**400, "taskset_id": 0, "index": 0}],
     [{"reward": 0.5, "taskset_id": [1, 2], "index": 0}, {"reward": 0.5, "taskset_id": 3, "index": 0}],
     [{"reward": 0.5, "taskset_id": [1], "index": [0]}, {"reward": 0.5, "taskset_id": [2], "index": [1]}],
     [{"reward": [0.5], "taskset_id": 0, "index": 0}, {"reward": [1.0], "taskset_id": 0, "index": 1}],
     [{"reward": 0.5, "taskset_id": 2**63, "index": 0}],
     [{"reward": "1", "taskset_id": 0, "index": 1}],
     [{"reward": None, "taskset_id": 0, "index": 1}, {"reward": 0.5, "taskset_id": 0, "index": 2}],
     {"reward": np.array(["1", "0"]), "taskset_id": np.array([0, 0]), "index": np.array([1, 2])},
     {"reward": [0.5, None], "taskset_id": np.array([0, 0]), "index": np.array([1, 2])}],
    ids=["none", "int", "float", "huge_reward", "ragged_ids", "list_ids", "list_rewards", "uint64_id", "text_reward",
         "none_reward", "text_column", "none_in_column"],
)
def test_regression_pass_rate_calculator_refuses_malformed_experiences(exps: Any) -> None:
    """Non-iterables (TypeError), ragged or list ids and list rewards (ValueError from numpy), a reward beyond the
    float range (OverflowError), an id past int64 (wrapped to a negative id) now raise FeedbackError; so do text
    rewards (``"1"`` was read as 1.0) and ``None`` (read as NaN, then refused as "not finite")."""
    with pytest.raises(FeedbackError):
        PassRateCalculator().process(exps)


def test_regression_booleans_inside_index_and_value_lists_are_refused() -> None:
    """numpy turns [0, True] into [0, 1] and [0.5, True] into [0.5, 1.0]: a bool slipped through as a number."""
    for indices, values in [([0, True], [0.5, 0.5]), ((0, np.True_), (0.5, 0.5)), ([0, 1], [0.5, True])]:
        with pytest.raises(FeedbackError, match="not booleans"):
            validate_feedback(indices, values, 4)
    assert validate_feedback(np.array([0, 1]), np.array([0.5, 1.0]), 4)[0].tolist() == [0, 1]


def test_regression_index_past_int64_is_reported_as_given() -> None:
    """A uint64 index of 2**63 was cast to int64 first and reported as -9223372036854775808."""
    with pytest.raises(FeedbackError, match="index 9223372036854775808 is out of range"):
        validate_feedback(np.array([2**63], dtype=np.uint64), [0.5], 4)
