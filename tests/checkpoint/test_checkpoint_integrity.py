"""Checkpoint integrity: every byte is covered by a checksum checked before any use, and the values of a
well-formed but wrong (hand-edited, hostile) checkpoint are validated at load, each refusal naming the key path
and leaving the pipeline as it was."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flexkit.errors import CheckpointError
from flexkit.pipeline._checkpoint import STATE_FILE, load_state, save_state
from flexkit.pipeline._pipeline import Pipeline
from tests.checkpoint.test_kill_checkpoint import build_pipeline, canonical, play_step, signed, write_data

FLIPS = int(os.environ.get("FLEXKIT_FLIPS", "150"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint after 5 steps of the kill test's pipeline (two ``difficulty_based`` selectors, one with
    ``adaptive_rho``, a ``shuffle``, prefetch on, a ``reward_gap`` mix stage)."""
    root = tmp_path_factory.mktemp("integrity")
    write_data(root / "data")
    pipe = build_pipeline(root / "data")
    for step in range(5):
        play_step(pipe, step)
    pipe.save_checkpoint(root / "ckpt", extra={"runner": {"step": 5}})
    pipe.scheduler.close()
    return root


@pytest.fixture(scope="module")
def fresh(saved: Path) -> Pipeline:
    """One pipeline shared by the tests of this module; every test leaves it at its initial state."""
    pipe = build_pipeline(saved / "data")
    yield pipe
    pipe.scheduler.close()


def _copy(saved: Path, dest: Path) -> Path:
    ckpt = dest / "ckpt"
    ckpt.mkdir(parents=True)
    for f in (saved / "ckpt").iterdir():
        (ckpt / f.name).write_bytes(f.read_bytes())
    return ckpt


def _arrays_file(ckpt: Path) -> Path:
    return ckpt / json.loads((ckpt / STATE_FILE).read_text())["arrays"]


def _assert_refused(pipe: Pipeline, ckpt: Path, match: str | None = None) -> str:
    before = canonical(pipe.state_dict())
    with pytest.raises(CheckpointError, match=match) as info:
        pipe.load_checkpoint(ckpt)
    assert type(info.value) is CheckpointError  # not a RuntimeError, NotImplementedError, ... wrapped late
    assert canonical(pipe.state_dict()) == before
    return str(info.value)


def _flip_campaign(saved: Path, tmp_path: Path, fresh: Pipeline, which: Callable[[Path], Path], flips: int,
                   seed: int) -> int:
    ckpt = _copy(saved, tmp_path)
    target = which(ckpt)
    original = target.read_bytes()
    rng = random.Random(seed)
    bits = rng.sample(range(len(original) * 8), min(flips, len(original) * 8))
    for bit in bits:
        data = bytearray(original)
        data[bit // 8] ^= 1 << (bit % 8)
        target.write_bytes(bytes(data))
        _assert_refused(fresh, ckpt)
    target.write_bytes(original)
    fresh.load_checkpoint(ckpt)  # the intact checkpoint still loads
    fresh.load_state_dict(build_pipeline(saved / "data").state_dict())
    return len(bits)


def test_regression_every_flipped_bit_of_state_json_is_refused(saved: Path, tmp_path: Path, fresh: Pipeline) -> None:
    """Regression: about 17% of one-bit flips in ``state.json`` loaded as a different state (step, rho, RNG,
    counters). ``state.json`` now carries the SHA-256 of its own bytes: every flip is refused."""
    assert _flip_campaign(saved, tmp_path, fresh, lambda c: c / STATE_FILE, FLIPS, seed=1) == FLIPS


def test_regression_every_flipped_bit_of_the_arrays_file_is_a_checkpoint_error(
    saved: Path, tmp_path: Path, fresh: Pipeline
) -> None:
    """Regression: flipped bytes in the npz escaped as ``RuntimeError`` or ``NotImplementedError``; the arrays
    file's SHA-256 and size are in ``state.json`` and checked before numpy reads it."""
    assert _flip_campaign(saved, tmp_path, fresh, _arrays_file, FLIPS, seed=2) == FLIPS


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLEXKIT_SLOW") != "1", reason="set FLEXKIT_SLOW=1 to flip every bit")
def test_every_bit_of_state_json_flipped(saved: Path, tmp_path: Path, fresh: Pipeline) -> None:
    """All one-bit flips of ``state.json`` (tens of thousands)."""
    size = (saved / "ckpt" / STATE_FILE).stat().st_size
    flipped = _flip_campaign(saved, tmp_path, fresh, lambda c: c / STATE_FILE, size * 8, seed=3)
    print(f"\nstate.json flips: {flipped} of {size} bytes, all refused")


def test_a_signed_but_damaged_arrays_file_is_a_checkpoint_error(saved: Path, tmp_path: Path,
                                                                fresh: Pipeline) -> None:
    """Flips in the arrays file with a matching (recomputed) checksum, as a hostile file would have: numpy's
    own errors (``BadZipFile``, ``RuntimeError``, ``NotImplementedError``, ...) are all ``CheckpointError``."""
    ckpt = _copy(saved, tmp_path)
    arrays = _arrays_file(ckpt)
    original, body = arrays.read_bytes(), json.loads((ckpt / STATE_FILE).read_text())
    rng = random.Random(4)
    outcomes = {"refused": 0, "loaded the same state": 0}
    reference = canonical(load_state(saved / "ckpt")[0])
    for _ in range(60):
        data = bytearray(original)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        arrays.write_bytes(bytes(data))
        (ckpt / STATE_FILE).write_bytes(signed({**body, "arrays_sha256": hashlib.sha256(data).hexdigest()}))
        try:
            state, _meta = load_state(ckpt)
        except CheckpointError:
            outcomes["refused"] += 1
        else:  # a flip in bytes numpy ignores (e.g. a zip timestamp)
            assert canonical(state) == reference
            outcomes["loaded the same state"] += 1
    assert outcomes["refused"] > 30, outcomes


def test_a_format_1_checkpoint_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """Checkpoints written before checksums existed (format 1) are refused, saying what to do."""
    (tmp_path / STATE_FILE).write_text(json.dumps({"format_version": 1, "arrays": f"arrays-{'0' * 32}.npz",
                                                   "meta": {}, "state": {}}))
    with pytest.raises(CheckpointError, match="format version 1, written by an older flexkit without checksums"):
        load_state(tmp_path)


def test_a_fifo_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / STATE_FILE)
    errors: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(errors, lambda: load_state(tmp_path)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "load_state blocked on a FIFO"
    assert isinstance(errors[0], CheckpointError) and "not a regular file" in str(errors[0])


def _catch(errors: list[BaseException], fn: Callable[[], Any]) -> None:
    try:
        fn()
    except BaseException as exc:
        errors.append(exc)


# -- values validated at load ---------------------------------------------------------------------------------


def _edit_sched(key: str, value: Any) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        state["pipeline"]["scheduler"][key] = value(state["pipeline"]["scheduler"]) if callable(value) else value
    return edit


def _edit_selector(i: int, key: str, value: Any) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        state["pipeline"]["scheduler"]["selectors"][i][key] = value
    return edit


def _set_pending(key: str, value: Any) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        state["pipeline"]["scheduler"]["pending"][key] = value
    return edit


EDITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "negative step": (_edit_sched("step", -1), r"pipeline\.scheduler\.step: expected a step number >= 0"),
    "bool step": (_edit_sched("step", True), r"pipeline\.scheduler\.step"),
    "NaN in the mix": (_edit_sched("mix", [float("nan"), 0.5, 0.5]), r"pipeline\.scheduler\.mix: expected 3"),
    "short mix": (_edit_sched("mix", [0.5, 0.5]), r"pipeline\.scheduler\.mix: expected 3"),
    "mix not summing to 1": (_edit_sched("mix", [0.2, 0.2, 0.2]), r"pipeline\.scheduler\.mix: .*sum to 1"),
    "weights the pipeline does not have": (_edit_sched("weights", [1.0, 2.0, 3.0]),
                                           r"pipeline\.scheduler\.weights: .*does not match"),
    "mix_from in the future": (_edit_sched("mix_from", 10**6), r"pipeline\.scheduler\.mix_from"),
    "a selector state missing": (_edit_sched("selectors", lambda s: s["selectors"][:2]),
                                 r"pipeline\.scheduler\.selectors: expected one state per taskset"),
    "a prefetched index out of range": (_set_pending("indices", [np.array([5000]), np.array([0]), np.array([1])]),
                                        r"pipeline\.scheduler\.pending\.indices\[0\]: expected task indices"),
    "a prefetched batch of another step": (_set_pending("step", 0), r"pipeline\.scheduler\.pending\.step"),
    "capability out of [0, 1]": (_edit_selector(0, "capability", 7.0),
                                 r"selector 'difficulty_based' of taskset 't0'.*capability"),
    "NaN rho": (_edit_selector(1, "rho", float("nan")), r"selector 'difficulty_based' of taskset 't1'.*rho"),
    "rho above the configured one": (_edit_selector(1, "rho", 0.9), r"taskset 't1'.*rho"),
    "negative counter": (_edit_selector(0, "num_feedback", -3), r"taskset 't0'.*counters"),
    "a Beta array of the wrong shape": (_edit_selector(0, "alpha_tilde", np.ones(3)), r"taskset 't0'.*alpha_tilde"),
    "an RNG state of another generator": (_edit_selector(2, "rng", {"bit_generator": "MT19937"}),
                                          r"selector 'shuffle' of taskset 't2'"),
    "no sample stage state": (lambda s: s["pipeline"].pop("sample"), r"pipeline\.sample: missing"),
    "a broken actuator state": (lambda s: s["pipeline"]["sample"].__setitem__("actuator", {"window": "x"}),
                                r"actuator 'reward_gap'"),
    "bad proportions": (lambda s: s["pipeline"]["sample"].__setitem__("proportions", [[9, 1.0]]),
                        r"pipeline\.sample\.proportions"),
    "extra not a table": (lambda s: s.__setitem__("extra", [1, 2]), r"extra: expected a table"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_regression_malformed_values_are_refused_at_load_with_their_key_path(
    name: str, saved: Path, tmp_path: Path, fresh: Pipeline
) -> None:
    """Regression: values such as a negative step, a NaN mix or rho, or a capability of 7 loaded and broke a
    later read (or silently changed the run). A checkpoint with a valid checksum but such a value is refused
    at load, naming the key path (and the component), and the pipeline is left as it was."""
    edit, match = EDITS[name]
    state, meta = load_state(saved / "ckpt")
    state = copy.deepcopy(state)
    edit(state)
    save_state(tmp_path / "ckpt", state, meta=meta)
    _assert_refused(fresh, tmp_path / "ckpt", match)


def test_every_owner_reports_its_problems_in_one_error(saved: Path, tmp_path: Path, fresh: Pipeline) -> None:
    """Each owner checks its own slice (scheduler, mix, prefetched batch, sample stage, extra) and the load
    lists every problem at once, in one :class:`CheckpointError`, with the pipeline left as it was."""
    state, meta = load_state(saved / "ckpt")
    state = copy.deepcopy(state)
    sched = state["pipeline"]["scheduler"]
    sched["step"], sched["mix"], sched["pending"] = -1, [0.5, 0.5], "soon"
    state["pipeline"]["sample"]["scorer"] = None
    state["extra"] = [1]
    save_state(tmp_path / "ckpt", state, meta=meta)
    message = _assert_refused(fresh, tmp_path / "ckpt")
    assert "holds an invalid state: " in message
    assert message.split("holds an invalid state: ", 1)[1].split("; ") == [
        "pipeline.scheduler.step: expected a step number >= 0, got -1",
        "pipeline.scheduler.mix: expected 3 finite proportions >= 0, got [0.5, 0.5]",
        "pipeline.scheduler.pending: expected a table or null, got str",
        "pipeline.sample.scorer: missing, or not a table",
        "extra: expected a table, got list",
    ]
