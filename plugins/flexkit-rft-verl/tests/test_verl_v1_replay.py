"""``[replay]`` in verl's v1 trainer (flexkit_verl.tq_replay), through verl's own ``sample``, ``_compute_advantage``,
``_update_actor``, ``_save_checkpoint`` and ``_load_checkpoint`` with a policy trained by verl's vanilla PPO loss on
what it reads from TransferQueue (verl_v1_policy.py): replayed trajectories reach the actor with the
log-probabilities of the policy that generated them and their own advantages, in whole mini-batches; verl's step
gets the fresh batch back and the replayed keys are cleared; a kill and resume with a full buffer continues
exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("flexkit_verl")
pytest.importorskip("verl.trainer.ppo.v1")

import flexkit_verl.tq_replay as tq_replay
import transfer_queue as tq
from verl_v1_harness import FakeTQ
from verl_v1_policy import log_probs, policy_trainer, run_steps

from flexkit import ConfigError


def generating_steps(trainer: Any, fresh_uids: dict[int, set[str]]) -> list[list[int]]:
    """For each update, the step that generated each row it trained on (from the row's uid)."""
    out = []
    for call in trainer.actor_rollout_wg.calls:
        out.append([next(s for s, uids in fresh_uids.items() if u in uids) for u in call["uid"]])
    return out


def fresh_uids_of(trainer: Any, batches: list[Any]) -> dict[int, set[str]]:
    """Each step's uids (the first update call of step s holds its fresh rows first)."""
    out = {}
    for number, (call, meta) in enumerate(zip(trainer.actor_rollout_wg.calls, batches, strict=True), start=1):
        out[number] = set(call["uid"][: len(meta.keys)])
    return out


def check_behaviour_log_probs(trainer: Any, policies: dict[int, torch.Tensor],
                              steps: list[list[int]]) -> int:
    """Every row each update received has ``old_log_probs`` = the log-probabilities of the policy that generated it;
    where a row was replayed the policy has moved since (the ratio verl's loss takes is not 1). Returns the replayed
    rows seen."""
    replayed = 0
    for number, (call, born_at) in enumerate(zip(trainer.actor_rollout_wg.calls, steps, strict=True), start=1):
        mask = call["response_mask"].bool()
        generating = torch.stack([log_probs(policies[s], call["responses"][i]) for i, s in enumerate(born_at)])
        assert torch.allclose(call["old_log_probs"][mask], generating[mask], atol=1e-6)
        old = torch.tensor([s < number for s in born_at])
        if old.any():
            now = log_probs(call["theta"], call["responses"])
            assert (call["old_log_probs"] - now)[old[:, None] & mask].abs().max() > 1e-3
        replayed += int(old.sum())
    return replayed


def test_replayed_trajectories_reach_the_actor_with_their_generating_policy(tmp_path: Path, monkeypatch: Any) -> None:
    """Each update trains on the step's trajectories and on stored groups of the last two steps, in whole
    mini-batches of 2 groups × n: a replayed row's old_log_probs are its generating policy's, its advantages are
    its own step's (non-zero somewhere in its group), and verl's step gets the fresh keys back."""
    trainer = policy_trainer(tmp_path, monkeypatch)
    policies: dict[int, torch.Tensor] = {}
    batches = run_steps(trainer, range(1, 7), policies)
    fresh = fresh_uids_of(trainer, batches)
    steps = generating_steps(trainer, fresh)
    assert check_behaviour_log_probs(trainer, policies, steps) > 0
    for number, (call, meta, born_at) in enumerate(zip(trainer.actor_rollout_wg.calls, batches, steps,
                                                       strict=True), start=1):
        assert not any(k.startswith(tq_replay.REPLAY_KEY_PREFIX) for k in meta.keys)  # verl's step: fresh only
        assert len(meta.keys) == 16 and born_at[:16] == [number] * 16
        assert len(call["keys"]) % (2 * 4) == 0  # whole mini-batches of 2 groups × n = 4
        assert all(number - 2 <= s <= number for s in born_at)  # max_age = 2
        for i, s in enumerate(born_at[16:], start=16):
            assert s < number and call["keys"][i].startswith(tq_replay.REPLAY_KEY_PREFIX)
            group = [j for j, u in enumerate(call["uid"]) if u == call["uid"][i]]
            assert (call["advantages"][group] != 0).any()  # an informative group
    assert any(len(call["keys"]) > 16 for call in trainer.actor_rollout_wg.calls)


def test_incomplete_groups_and_padding_rows_still_make_whole_mini_batches(tmp_path: Path, monkeypatch: Any) -> None:
    """A group with a missing trajectory (an agent loop that failed; verl pads the fresh batch with a zero-mask row
    of its own): replayed groups then hold 3 or 4 rows, and flexkit pads them with zero-weight copies to verl's batch
    multiple, so every update still divides into whole mini-batches (the worker asserts it); no padding row carries
    a mask, verl's padding rows are never stored, and replayed rows keep their generating policy's log-probs."""
    trainer = policy_trainer(tmp_path, monkeypatch)
    policies: dict[int, torch.Tensor] = {}
    batches = run_steps(trainer, range(1, 7), policies, incomplete=True)
    calls = trainer.actor_rollout_wg.calls
    steps = generating_steps(trainer, fresh_uids_of(trainer, batches))
    assert check_behaviour_log_probs(trainer, policies, steps) > 0
    flexkit_pads = 0
    for call in calls:
        assert len(call["keys"]) % (2 * 4) == 0
        for i, key in enumerate(call["keys"]):
            replayed = key.startswith(tq_replay.REPLAY_KEY_PREFIX)
            if call["is_padding"][i]:
                assert call["response_mask"][i].sum() == 0 and call["advantages"][i].abs().sum() == 0
                flexkit_pads += replayed
            elif replayed:
                assert not call["uid"][i].startswith("pad")  # verl's padding rows (uid pad...) are never stored
    assert flexkit_pads > 0  # an uneven replayed set was padded


def test_the_check_fails_when_replayed_rows_carry_the_current_policys_log_probs(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The check above has teeth: replayed rows given the current policy's log-probabilities (a ratio of 1, what
    letting verl recompute old_log_probs for them would do) fail it."""
    trainer = policy_trainer(tmp_path, monkeypatch)
    put = tq_replay.put_rows

    def recomputed(store: Any, rows: Any, keys: list[str], partition_id: str) -> Any:
        rows["old_log_probs"] = log_probs(trainer.actor_rollout_wg.theta, rows["responses"])
        return put(store, rows, keys, partition_id)

    monkeypatch.setattr(tq_replay, "put_rows", recomputed)
    policies: dict[int, torch.Tensor] = {}
    batches = run_steps(trainer, range(1, 5), policies)
    steps = generating_steps(trainer, fresh_uids_of(trainer, batches))
    with pytest.raises(AssertionError):
        check_behaviour_log_probs(trainer, policies, steps)


def test_replayed_keys_are_cleared_and_metrics_count_them(tmp_path: Path, monkeypatch: Any) -> None:
    store = FakeTQ()
    trainer = policy_trainer(tmp_path, monkeypatch, store=store)
    run_steps(trainer, range(1, 4))
    left = list(store.fields["train"])
    assert not any(k.startswith(tq_replay.REPLAY_KEY_PREFIX) for k in left)  # nothing leaks into TransferQueue
    call = trainer.actor_rollout_wg.calls[-1]
    replayed = [k for k in call["keys"] if k.startswith(tq_replay.REPLAY_KEY_PREFIX)]
    metrics = trainer.last_metrics
    assert metrics["flexkit/replay/responses"] == float(len(replayed))
    assert metrics["flexkit/replay/groups"] == float(len({call["uid"][call["keys"].index(k)] for k in replayed}))
    assert metrics["flexkit/rollouts"] == 16.0  # fresh responses only
    assert "actor/pg_loss" in metrics  # verl's own update ran on the whole batch


def test_only_the_groups_to_store_are_read_whole(tmp_path: Path, monkeypatch: Any) -> None:
    """Every field is read from TransferQueue for the informative groups alone (the rest of the update's
    trajectories are read for uid, advantages and the mask only), so the driver holds what the buffer stores."""
    store = FakeTQ()
    trainer = policy_trainer(tmp_path, monkeypatch, store=store)
    whole: list[tuple[int, bool]] = []
    get = store.kv_batch_get

    def recording(keys: list[str], partition_id: str, select_fields: Any = None) -> Any:
        if select_fields is None and keys[0].count("_") == 2 and not keys[0].startswith(tq_replay.REPLAY_KEY_PREFIX):
            data = get(keys, partition_id, ["uid", "advantages"])
            uids = [str(getattr(u, "data", u)) for u in data["uid"]]
            advantages = data["advantages"].to_padded_tensor(0) if data["advantages"].is_nested else data["advantages"]
            informative = {u for i, u in enumerate(uids) if (advantages[i] != 0).any()}
            whole.append((len(keys), set(uids) <= informative))
        return get(keys, partition_id, select_fields)

    monkeypatch.setattr(tq, "kv_batch_get", recording)
    run_steps(trainer, range(1, 5))
    assert whole and all(ok or n == 1 for n, ok in whole)  # one trajectory only as the fields' template
    assert any(n < 16 for n, _ in whole)  # some groups (all answers alike) were not read whole


def test_kill_and_resume_with_a_full_buffer_continues_exactly(tmp_path: Path, monkeypatch: Any) -> None:
    """Killed after step 3, resumed by a new trainer through verl's v1 _load_checkpoint: the next updates receive
    what the uninterrupted run's did, and the policy and the buffer at the end are the same."""
    whole = policy_trainer(tmp_path / "whole", monkeypatch)
    run_steps(whole, range(1, 7))
    killed = policy_trainer(tmp_path / "cut", monkeypatch)
    run_steps(killed, range(1, 4))
    assert killed.flexkit_replay.buffer.stored_groups == 4  # full
    resumed = policy_trainer(tmp_path / "cut", monkeypatch)
    resumed._load_checkpoint()
    assert resumed.global_steps == 3
    run_steps(resumed, range(4, 7))
    for a, b in zip(whole.actor_rollout_wg.calls[3:], resumed.actor_rollout_wg.calls, strict=True):
        assert a["index"] == b["index"]  # the same tasks (verl's uids are random per run)
        assert [k for k in a["keys"] if k.startswith(tq_replay.REPLAY_KEY_PREFIX)] == [
            k for k in b["keys"] if k.startswith(tq_replay.REPLAY_KEY_PREFIX)]
        for name in ("old_log_probs", "advantages", "responses", "theta"):
            assert torch.equal(a[name], b[name]), name
    assert any(k.startswith(tq_replay.REPLAY_KEY_PREFIX) for k in resumed.actor_rollout_wg.calls[0]["keys"])
    assert torch.equal(whole.actor_rollout_wg.theta, resumed.actor_rollout_wg.theta)
    a, b = whole.flexkit_replay.buffer.state_dict(), resumed.flexkit_replay.buffer.state_dict()
    assert (a["born"] == b["born"]).all() and a["columns"].keys() == b["columns"].keys()
    for name, value in a["columns"].items():
        if "uid" not in name:  # verl's uids are random per run
            assert (value == b["columns"][name]).all(), name


def test_buffer_files_leave_the_folders_whose_actor_checkpoint_verl_deleted(tmp_path: Path, monkeypatch: Any) -> None:
    """verl's max_actor_ckpt_to_keep deletes old global_step_<N>/actor folders, not the folders: their buffer files
    (as large as the buffer) go with them at the next save; a folder that still has its actor keeps its buffer."""
    import shutil

    trainer = policy_trainer(tmp_path, monkeypatch)
    run_steps(trainer, range(1, 3))
    shutil.rmtree(tmp_path / "ckpt" / "global_step_1" / "actor")  # as verl's checkpoint manager does
    run_steps(trainer, range(3, 4))
    assert not (tmp_path / "ckpt" / "global_step_1" / "flexkit_replay.pt").exists()
    assert (tmp_path / "ckpt" / "global_step_2" / "flexkit_replay.pt").exists()
    assert (tmp_path / "ckpt" / "global_step_3" / "flexkit_replay.pt").exists()
    assert (tmp_path / "ckpt" / "global_step_1" / "data.pt").exists()  # nothing else of verl's is touched


def test_resume_without_the_buffer_file_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    from flexkit import CheckpointError

    trainer = policy_trainer(tmp_path, monkeypatch)
    run_steps(trainer, range(1, 2))
    (tmp_path / "ckpt" / "global_step_1" / "flexkit_replay.pt").unlink()
    with pytest.raises(CheckpointError, match=r"holds no flexkit_replay\.pt.*remove \[replay\]"):
        policy_trainer(tmp_path, monkeypatch)._load_checkpoint()


@pytest.mark.parametrize(("override", "message"), [
    ("actor_rollout_ref.actor.ppo_mini_batch_size=8", r"replay\.groups: is 4, below .*ppo_mini_batch_size=8"),
    ("algorithm.adv_estimator=gae", r"algorithm\.adv_estimator: gives verl a critic"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=gpg", r"loss_mode: is 'gpg'.*remove \[replay\]"),
])
def test_what_replay_cannot_work_with_is_refused_at_construction(
        tmp_path: Path, monkeypatch: Any, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        policy_trainer(tmp_path, monkeypatch, override)


def test_tq_rows_round_trip_every_field(tmp_path: Path, monkeypatch: Any) -> None:
    """read_rows then put_rows gives back every field of every trajectory: jagged tensors at their own lengths,
    non-tensor values and tags."""
    from flexkit_verl.tq_rows import put_rows, read_rows
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    FakeTQ().install(monkeypatch)
    rows = [{"uid": f"u{i // 2}", "responses": torch.arange(2 + i), "response_mask": torch.ones(2 + i),
             "extra_info": {"flexkit_index": i, "nested": [1, 2]}, "num_turns": 2, "fixed": torch.tensor([i, -i])}
            for i in range(4)]
    tags = [{"status": "success", "seq_len": 4 + i} for i in range(4)]
    keys = [f"k{i}_0_0" for i in range(4)]
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows), tags=tags)
    stored, jagged = read_rows(tq, keys, "train", tags, step=1)
    assert sorted(jagged) == ["response_mask", "responses"]
    back = put_rows(tq, stored, [f"r{i}_0_0" for i in range(4)], "train")
    assert back == tags
    got = tq.kv_batch_get(keys=[f"r{i}_0_0" for i in range(4)], partition_id="train")
    for i, row in enumerate(rows):
        assert torch.equal(got["responses"][i], row["responses"])
        assert torch.equal(got["fixed"][i], row["fixed"])
        assert getattr(got["extra_info"][i], "data", got["extra_info"][i]) == row["extra_info"]
        assert getattr(got["uid"][i], "data", got["uid"][i]) == row["uid"]
