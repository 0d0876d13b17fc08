"""Rollout replay (:mod:`flexkit.sample._replay`): what is stored, what is replayed and when, its checkpoint state, and
the config and trainer checks of ``flexkit run``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit import ConfigError, Pipeline, load_pipeline, run_pipeline
from flexkit._metric_names import KEPT_FRACTION, REPLAY_RESPONSES
from flexkit.cli.main import main
from flexkit.compare._records import _trained
from flexkit.errors import CheckpointError, SampleError
from flexkit.run.simulator import SimulatorTrainer
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._replay import REPLAY_AGE, ReplayBuffer

G, T = 2, 3  # answers per group, tokens per answer


def _batch(step: int, informative: list[bool]) -> RolloutBatch:
    """One group per entry; an informative group's advantages are ±1, the others 0. ``index`` encodes the step and
    the group (``100 * step + group``) so a test can tell replayed rows apart."""
    n = len(informative)
    adv = torch.zeros(n * G, T)
    for g, yes in enumerate(informative):
        if yes:
            adv[g * G] = 1.0
            adv[g * G + 1] = -1.0
    return RolloutBatch.from_dict({
        "input_ids": torch.arange(n * G * T).reshape(n * G, T),
        "response_mask": torch.ones(n * G, T),
        "advantages": adv,
        "old_log_probs": torch.full((n * G, T), -float(step)),
        "uid": np.repeat(np.arange(n), G),
        "index": np.repeat(100 * step + np.arange(n), G),
    })


def _groups(batch: RolloutBatch) -> list[int]:
    """The ``index`` of each group of ``batch``, in order."""
    return [int(i) for i in np.asarray(batch["index"])[::G]]


def test_only_informative_groups_are_stored_and_replayed_newest_first_up_to_groups() -> None:
    buf = ReplayBuffer(groups=3, max_age=2)
    first = _batch(0, [True, False, True])
    assert buf.extend(first, 0) is first  # nothing stored yet: the fresh batch as it is
    assert list(first[REPLAY_AGE]) == [0] * 6
    buf.store(first, 0)
    assert buf.stored_groups == 2  # group 1 (all advantages 0) is not kept
    second = _batch(1, [True, True])
    trained = buf.extend(second, 1)
    assert _groups(trained) == [100, 101, 0, 2]
    assert list(trained[REPLAY_AGE]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert (buf.last_groups, buf.last_responses) == (2, 4)
    buf.store(second, 1)
    trained = buf.extend(_batch(2, [True]), 2)
    assert _groups(trained) == [200, 100, 101, 0]  # step 1's groups first, then step 0's, three in all
    assert list(trained[REPLAY_AGE])[2:] == [1, 1, 1, 1, 2, 2]
    # replayed rows keep what they were generated with: their advantages and behaviour log-probabilities
    assert torch.equal(trained["old_log_probs"][2:6], torch.full((4, T), -1.0))
    assert torch.equal(trained["advantages"][6:], _batch(0, [True])["advantages"])
    # each group keeps one uid of its own
    uid = np.asarray(trained["uid"]).reshape(-1, G)
    assert (uid == uid[:, :1]).all() and len(set(uid[:, 0].tolist())) == 4


def test_groups_older_than_max_age_are_forgotten() -> None:
    buf = ReplayBuffer(groups=10, max_age=1)
    buf.store(_batch(0, [True]), 0)
    buf.store(_batch(1, [True]), 1)
    assert buf.stored_groups == 1  # step 0's group cannot be replayed at step 2
    assert _groups(buf.extend(_batch(2, [True]), 2)) == [200, 100]
    buf.store(_batch(2, [False]), 2)
    assert buf.stored_groups == 0
    assert buf.extend(_batch(3, [True]), 3).batch_size == G


def test_a_resumed_buffer_replays_exactly_what_the_original_does() -> None:
    buf = ReplayBuffer(groups=4, max_age=2)
    for step in range(3):
        buf.store(_batch(step, [True, step % 2 == 0, True]), step)
    copy = ReplayBuffer(groups=4, max_age=2)
    copy.load_state_dict(buf.state_dict())
    one, two = buf.extend(_batch(3, [True]), 3), copy.extend(_batch(3, [True]), 3)
    assert one.keys() == two.keys()
    for name in one:
        a, b = one[name], two[name]
        assert type(a) is type(b), name
        assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else np.array_equal(a, b)), name
    empty = ReplayBuffer(groups=1, max_age=1)
    empty.load_state_dict(ReplayBuffer(groups=1, max_age=1).state_dict())
    assert empty.stored_groups == 0


def _state(**changes: object) -> dict:
    buf = ReplayBuffer(groups=4, max_age=2)
    buf.store(_batch(0, [True, True]), 0)
    state = buf.state_dict()
    for key, value in changes.items():
        if key in state:
            state[key] = value
        else:
            state["columns"][key] = value
    return state


@pytest.mark.parametrize("state", [
    None, {}, {"born": [1], "columns": {}, "tensors": {}},
    _state(born=np.array([0, 0])), _state(born=np.array([-1, 0, 0, 0])), _state(born=np.zeros((2, 2), int)),
    _state(born=np.array([0.0, 0, 0, 0])), _state(born=np.array([0, 1, 0, 0])),
    _state(tensors={"uid": "complex"}), _state(tensors=["advantages"]),
    _state(tensors={"nope": "float32"}), _state(replay_age=np.zeros(4, int)),
    _state(columns={"uid": np.zeros(4, int)}),
])
def test_a_damaged_buffer_state_is_a_checkpoint_error(state: object) -> None:
    with pytest.raises(CheckpointError, match=r"\[replay\]"):
        ReplayBuffer(groups=1, max_age=1).load_state_dict(state)


def test_state_keeps_dtypes_bfloat16_included() -> None:
    batch = _batch(0, [True])
    batch["old_log_probs"] = batch["old_log_probs"].to(torch.bfloat16)
    batch["flags"] = torch.ones(batch.batch_size, dtype=torch.bool)
    buf = ReplayBuffer(groups=1, max_age=1)
    buf.store(batch, 0)
    copy = ReplayBuffer(groups=1, max_age=1)
    copy.load_state_dict(buf.state_dict())
    fresh = _batch(1, [True])
    fresh["old_log_probs"] = fresh["old_log_probs"].to(torch.bfloat16)
    fresh["flags"] = torch.zeros(fresh.batch_size, dtype=torch.bool)
    trained = copy.extend(fresh, 1)
    assert trained["old_log_probs"].dtype == torch.bfloat16 and trained["flags"].dtype == torch.bool
    assert trained["flags"].tolist() == [False, False, True, True]


def test_what_the_update_writes_into_its_batch_is_not_stored() -> None:
    buf = ReplayBuffer(groups=2, max_age=2)
    for step in range(3):
        batch = _batch(step, [True])
        trained = buf.extend(batch, step)
        buf.store(batch, step)  # as the runner does: before the update
        trained["advantages"].mul_(0.5)  # an update that rescales in place ...
        trained["log_probs"] = torch.zeros(trained.batch_size, T)  # ... and adds a field
    replayed = buf.extend(_batch(3, [True]), 3)
    assert "log_probs" not in replayed
    assert torch.equal(replayed["advantages"][G:], torch.cat([_batch(2, [True])["advantages"],
                                                               _batch(1, [True])["advantages"]]))


def test_a_field_named_replay_age_is_refused() -> None:
    batch = _batch(0, [True])
    batch[REPLAY_AGE] = np.ones(batch.batch_size, dtype=np.int64)
    with pytest.raises(SampleError, match=REPLAY_AGE):
        ReplayBuffer(groups=1, max_age=1).extend(batch, 0)


def test_numpy_advantages_and_masks_are_read() -> None:
    batch = _batch(0, [True, False])
    batch = RolloutBatch.from_dict({**{k: batch[k] for k in batch}, "advantages": np.array([1.0, -1, 0, 0]),
                                    "response_mask": np.ones(4)})
    buf = ReplayBuffer(groups=2, max_age=1)
    buf.store(batch, 0)
    assert buf.stored_groups == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.lists(st.lists(st.booleans(), min_size=0, max_size=4),
                                                      min_size=1, max_size=8))
def test_replay_matches_a_buffer_that_keeps_everything(groups: int, max_age: int,
                                                       steps: list[list[bool]]) -> None:
    """The buffer keeps only what a later step can draw; it draws what a buffer of every informative group ever
    generated would: the newest ``groups`` of those at most ``max_age`` steps old, newest step first."""
    buf = ReplayBuffer(groups=groups, max_age=max_age)
    everything: list[tuple[int, int]] = []  # (step, group index) of every informative group, in order
    for step, informative in enumerate(steps):
        batch = _batch(step, informative)
        trained = buf.extend(batch, step)
        eligible = [(s, g) for s, g in everything if 1 <= step - s <= max_age]
        eligible.sort(key=lambda sg: -sg[0])  # stable: group order within a step kept
        expected = [100 * s + g for s, g in eligible[:groups]]
        assert _groups(trained)[len(informative):] == expected
        assert list(trained[REPLAY_AGE])[len(informative) * G:] == [step - s for s, _ in eligible[:groups]
                                                                     for _ in range(G)]
        buf.store(batch, step)
        everything += [(step, g) for g, yes in enumerate(informative) if yes]
        assert buf.stored_groups <= groups


def test_a_batch_without_advantages_cannot_be_stored() -> None:
    batch = _batch(0, [True])
    batch = RolloutBatch.from_dict({k: batch[k] for k in batch if k != "advantages"})
    with pytest.raises(SampleError, match="advantages"):
        ReplayBuffer(groups=1, max_age=1).store(batch, 0)


def test_compare_counts_replayed_responses_as_trained_samples() -> None:
    assert _trained({REPLAY_RESPONSES: 24}, 64) == 88
    assert _trained({REPLAY_RESPONSES: 24, KEPT_FRACTION: 0.5}, 64) == 56
    assert _trained({}, 64) == 64


SIMULATED = """
[run]
batch_size = 4
total_steps = 2

[[tasksets]]
name = "sim"
storage_type = "simulated"
size = 50

[trainer]
type = "simulator"

[replay]
groups = 2
"""


def _load(tmp_path: Path, text: str) -> Pipeline:
    path = tmp_path / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return load_pipeline(path)


def test_config_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="groups"):
        _load(tmp_path, SIMULATED.replace("groups = 2", "groups = 0"))
    with_stage = SIMULATED + """
[sample]
mechanism = "select"
[sample.scorer]
type = "group_solve_rate"
[sample.actuator]
type = "threshold_band"
"""
    with pytest.raises(ConfigError, match=r"\[sample.refill\]"):
        _load(tmp_path, with_stage)
    pipe = _load(tmp_path, SIMULATED)
    set_up: list[object] = []
    monkeypatch.setattr(SimulatorTrainer, "setup", lambda self, p: set_up.append(p))
    with pytest.raises(ConfigError, match=r"replay: flexkit run with the trainer .simulator. does not honour this"):
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert not set_up  # refused before the trainer's setup (a warm start can take minutes)


def test_regression_validate_refuses_replay_with_a_trainer_that_does_not_support_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``flexkit validate`` said "valid" for ``[replay]`` with the simulator, which ``flexkit run`` then refused."""
    path = tmp_path / "pipeline.toml"
    path.write_text(SIMULATED, encoding="utf-8")
    set_up: list[object] = []
    monkeypatch.setattr(SimulatorTrainer, "setup", lambda self, p: set_up.append(p))
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    assert "replay: flexkit run with the trainer 'simulator' does not honour this" in captured.err
    assert ": valid" not in captured.out
    assert not set_up  # the trainer is built, never set up
    path.write_text(SIMULATED.replace("[replay]\ngroups = 2\n", ""), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    monkeypatch.setattr(SimulatorTrainer, "supports_replay", True)
    path.write_text(SIMULATED, encoding="utf-8")
    assert main(["validate", str(path)]) == 0 and ": valid" in capsys.readouterr().out


def test_a_batch_that_replay_cannot_read_is_a_sample_error() -> None:
    buf = ReplayBuffer(groups=1, max_age=1)
    with pytest.raises(SampleError, match="RolloutBatch"):
        buf.extend({"advantages": None}, 0)
    batch = _batch(0, [True])
    batch = RolloutBatch.from_dict({k: batch[k] for k in batch if k != "old_log_probs"})
    with pytest.raises(SampleError, match="old_log_probs"):
        buf.store(batch, 0)


def test_a_padding_names_fields_whose_widths_change_and_their_side() -> None:
    """A host's left-padded prompts of two widths are joined with their padding on the left (the prompt's last
    token stays next to the completion); without a padding such a field is refused, naming it."""
    import torch

    def rows(width: int, uid: int) -> RolloutBatch:
        ids = torch.arange(1, width + 1).repeat(2, 1)
        return RolloutBatch.from_dict({"prompt_ids": ids, "uid": np.array([uid, uid])})

    narrow, wide = rows(2, 0), rows(3, 1)
    joined = RolloutBatch.concat_rows([narrow, wide], [np.arange(2), np.arange(2)], padding={"prompt_ids": "left"})
    assert joined["prompt_ids"].tolist() == [[0, 1, 2], [0, 1, 2], [1, 2, 3], [1, 2, 3]]
    right = RolloutBatch.concat_rows([narrow, wide], [np.arange(2), np.arange(2)], padding={"prompt_ids": "right"})
    assert right["prompt_ids"][0].tolist() == [1, 2, 0]
    with pytest.raises(SampleError, match="'prompt_ids' has different widths"):
        RolloutBatch.concat_rows([narrow, wide], [np.arange(2), np.arange(2)])
    buffer = ReplayBuffer(groups=2, max_age=2, padding={"prompt_ids": "left"})
    assert buffer.padding == {"prompt_ids": "left"}
