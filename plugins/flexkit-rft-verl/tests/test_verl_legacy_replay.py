"""``[replay]`` in verl's legacy RayPPOTrainer (flexkit_verl.replay), through verl's own ``_update_actor``,
``_balance_batch``, ``compute_advantage``, ``_save_checkpoint`` and ``_load_checkpoint`` with a policy trained by verl's
vanilla PPO loss (verl_legacy_harness.py): replayed rows reach the actor with the log-probabilities of the policy
that generated them and their own advantages, in whole mini-batches; groups with zero weights are never
stored; a kill and resume with a full buffer continues exactly; what cannot work is refused at construction."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("flexkit_verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer")

import flexkit_verl.replay as replay_module
from flexkit_verl.checks import check_trainer_config
from verl_legacy_harness import (
    Trainer,
    legacy_trainer,
    log_probs,
    replay_pipeline,
    resumed_trainer,
    rollout,
    run_steps,
    verl_config,
)

from flexkit import CheckpointError, ConfigError, SampleError


def _born(uid: str) -> int:
    """The step that generated a row, from the harness's uid ``s<step>-p<index>``."""
    return int(uid.split("-")[0][1:])


def _row_of(batch: Any, uid: str, responses: torch.Tensor) -> int:
    """The row of ``batch`` (a step's DataProto) with this uid and these responses."""
    uids = batch.non_tensor_batch["uid"]
    for i in np.flatnonzero(uids == uid):
        if torch.equal(batch.batch["responses"][i], responses):
            return int(i)
    raise AssertionError(f"no row {uid} with these responses in the step's batch")


def check_behaviour_log_probs(trainer: Trainer, policies: dict[int, torch.Tensor]) -> int:
    """Every row each update received has ``old_log_probs`` = the log-probabilities of the policy that generated it
    (``policies[step]``), on its response tokens; and where a row was replayed, the policy has moved since (the
    ratio verl's loss takes is not 1). Returns the replayed rows seen."""
    replayed = 0
    for call in trainer.actor_rollout_wg.calls:
        mask = call["response_mask"].bool()
        generating = torch.stack([log_probs(policies[_born(u)], call["responses"][i])
                                  for i, u in enumerate(call["uid"])])
        assert torch.allclose(call["old_log_probs"][mask], generating[mask], atol=1e-6)
        now = log_probs(call["theta"], call["responses"])
        step = max(_born(u) for u in call["uid"])
        old = torch.tensor([_born(u) < step for u in call["uid"]])
        if old.any():
            assert (call["old_log_probs"] - now)[old[:, None] & mask].abs().max() > 1e-3
        replayed += int(old.sum())
    return replayed


def test_replayed_rows_reach_update_actor_with_their_generating_policy_and_advantages(tmp_path: Path) -> None:
    """Each update trains on the step's rows and on stored groups of the last two steps: a replayed row's
    old_log_probs are those of the policy that generated it (not the current one: the ratio is the importance
    weight), its advantages, rollout-independent fields and reference log-probs are its step's, and the update's
    rows divide into verl's mini-batches."""
    trainer = legacy_trainer(verl_config(tmp_path, n=2, mini_batch=2), replay_pipeline(tmp_path, groups=4))
    policies: dict[int, torch.Tensor] = {}
    batches = run_steps(trainer, 4, policies=policies)
    assert check_behaviour_log_probs(trainer, policies) > 0
    for step, call in enumerate(trainer.actor_rollout_wg.calls, start=1):
        fresh = [u for u in call["uid"] if _born(u) == step]
        assert len(fresh) == 8  # 4 prompts × n
        assert len(call["uid"]) % (2 * 2) == 0  # whole mini-batches of 2 groups × n
        for i, uid in enumerate(call["uid"]):
            born = _born(uid)
            assert step - 2 <= born <= step  # max_age = 2
            source = batches[born]
            row = _row_of(source, uid, call["responses"][i])
            for name in ("advantages", "ref_log_prob", "response_mask"):
                assert torch.equal(call[name][i], source.batch[name][row]), (step, uid, name)
            if born < step:  # a stored group is informative: its advantages are not all zero
                assert (source.batch["advantages"][np.flatnonzero(source.non_tensor_batch["uid"] == uid)] != 0).any()


def test_the_check_fails_when_replayed_rows_carry_the_current_policys_log_probs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: replayed rows given the current policy's log-probabilities (a ratio of 1, what
    recomputing old_log_probs for them would do) fail it."""
    trainer = legacy_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))
    stored_rows = replay_module.data_proto

    def recomputed(rows: Any) -> Any:
        data = stored_rows(rows)
        data.batch["old_log_probs"] = log_probs(trainer.actor_rollout_wg.theta, data.batch["responses"])
        return data

    monkeypatch.setattr(replay_module, "data_proto", recomputed)
    policies: dict[int, torch.Tensor] = {}
    run_steps(trainer, 3, policies=policies)
    with pytest.raises(AssertionError):
        check_behaviour_log_probs(trainer, policies)


def test_replay_metrics_count_what_the_update_replayed(tmp_path: Path) -> None:
    trainer = legacy_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))
    run_steps(trainer, 3)
    metrics = trainer.flexkit_last_output.meta_info["metrics"]
    call = trainer.actor_rollout_wg.calls[-1]
    replayed = [u for u in call["uid"] if _born(u) < 3]
    assert metrics["flexkit/replay/responses"] == [float(len(replayed))] and replayed
    assert metrics["flexkit/replay/groups"] == [float(len(set(replayed)))]
    assert metrics["flexkit/rollouts"] == [8.0]  # fresh responses only


def test_replayed_groups_come_in_whole_mini_batches_oldest_left_out(tmp_path: Path) -> None:
    """[replay] groups = 3 with mini-batches of 2 groups: an update replays 0 or 2 groups, the newest."""
    trainer = legacy_trainer(verl_config(tmp_path, n=4, mini_batch=2), replay_pipeline(tmp_path, groups=3))
    batches = run_steps(trainer, 5)
    counts = []
    for step, call in enumerate(trainer.actor_rollout_wg.calls, start=1):
        groups = {u for u in call["uid"] if _born(u) < step}
        counts.append(len(groups))
        assert len(groups) in (0, 2)
        if any(_born(u) == step - 2 for u in groups):  # an older group only when the newer step had fewer than 2
            newer = batches[step - 1]
            informative = {u for u in newer.non_tensor_batch["uid"]
                           if (newer.batch["advantages"][newer.non_tensor_batch["uid"] == u] != 0).any()}
            assert len(informative) < 2 and informative <= groups
    assert 2 in counts


def test_groups_with_zero_weights_are_never_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group whose rollout_is_weights are zero on every response token carries no gradient (verl's rollout
    correction can reject whole responses that way; flexkit's config refuses [replay] with a keep / reweight stage
    verl cannot refill): it is never stored, even with non-zero advantages; the others are replayed with their
    weights."""
    import verl_legacy_harness

    plain = verl_legacy_harness.rollout

    def weighted(trainer: Trainer, indices: list[int], step: int) -> Any:
        data = plain(trainer, indices, step)
        odd = torch.tensor([int(e["flexkit_index"]) % 2 == 1 for e in data.non_tensor_batch["extra_info"]])
        data.batch["rollout_is_weights"] = data.batch["response_mask"] * (~odd)[:, None] * 1.5
        return data

    monkeypatch.setattr(verl_legacy_harness, "rollout", weighted)
    trainer = legacy_trainer(verl_config(tmp_path, n=4, mini_batch=1), replay_pipeline(tmp_path, groups=8, max_age=1))
    batches = run_steps(trainer, 5)
    zero_weight_informative = 0
    for step, call in enumerate(trainer.actor_rollout_wg.calls[1:], start=2):
        source = batches[step - 1]
        uids = source.non_tensor_batch["uid"]
        informative = {u for u in set(uids) if (source.batch["advantages"][uids == u] != 0).any()}
        live = {u for u in informative if int(u.split("-p")[1]) % 2 == 0}
        replayed = [i for i, u in enumerate(call["uid"]) if _born(u) < step]
        assert {call["uid"][i] for i in replayed} == live
        assert (call["rollout_is_weights"][replayed].sum(dim=1) > 0).all()
        zero_weight_informative += len(informative - live)
    assert zero_weight_informative > 0


def _state(trainer: Trainer) -> dict[str, Any]:
    assert trainer.flexkit_replay is not None
    return trainer.flexkit_replay.buffer.state_dict()


def test_kill_and_resume_with_a_full_buffer_continues_exactly(tmp_path: Path) -> None:
    """Killed after step 3 (its checkpoint holds a full buffer), resumed by a new trainer through verl's
    _load_checkpoint: the next updates receive what the uninterrupted run's did, and the buffer and the policy at
    the end are the same."""
    whole = legacy_trainer(verl_config(tmp_path / "whole", n=4), replay_pipeline(tmp_path, groups=4))
    run_steps(whole, 6)
    killed = legacy_trainer(verl_config(tmp_path / "resumed", n=4), replay_pipeline(tmp_path, groups=4))
    run_steps(killed, 3)
    assert killed.flexkit_replay is not None and killed.flexkit_replay.buffer.stored_groups == 4  # full
    resumed = resumed_trainer(verl_config(tmp_path / "resumed", n=4), replay_pipeline(tmp_path, groups=4))
    assert resumed.global_steps == 3
    run_steps(resumed, 3, first=4)
    for a, b in zip(whole.actor_rollout_wg.calls[3:], resumed.actor_rollout_wg.calls, strict=True):
        assert a["uid"] == b["uid"]
        for name in ("old_log_probs", "advantages", "responses", "theta"):
            assert torch.equal(a[name], b[name]), name
    assert any(_born(u) < 4 for u in resumed.actor_rollout_wg.calls[0]["uid"])  # the restored buffer replayed
    assert torch.equal(whole.actor_rollout_wg.theta, resumed.actor_rollout_wg.theta)
    whole_state, resumed_state = _state(whole), _state(resumed)
    assert np.array_equal(whole_state["born"], resumed_state["born"])
    assert whole_state["columns"].keys() == resumed_state["columns"].keys()
    for name, value in whole_state["columns"].items():
        assert np.array_equal(value, resumed_state["columns"][name]), name


def test_resume_refuses_a_checkpoint_without_the_buffer_or_with_objects(tmp_path: Path) -> None:
    trainer = legacy_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))
    run_steps(trainer, 1)
    buffer_file = tmp_path / "ckpt" / "global_step_1" / replay_module.REPLAY_FILE
    buffer_file.unlink()
    with pytest.raises(CheckpointError, match=r"holds no flexkit_replay\.pt.*remove \[replay\]"):
        resumed_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))

    class Payload:
        def __reduce__(self) -> Any:
            return (Path.touch, (tmp_path / "ran",))

    torch.save({"born": Payload()}, buffer_file)
    with pytest.raises(CheckpointError, match=r"weights_only=True\) refused it"):
        resumed_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))
    assert not (tmp_path / "ran").exists()


def test_multimodal_inputs_are_refused_when_stored(tmp_path: Path) -> None:
    trainer = legacy_trainer(verl_config(tmp_path), replay_pipeline(tmp_path))
    batch = rollout(trainer, [0, 1, 2, 3], step=1)
    batch.non_tensor_batch["multi_modal_inputs"][0] = {"pixel_values": [[0.5]]}
    trainer.global_steps = 1
    with pytest.raises(SampleError, match=r"multimodal inputs.*remove the \[replay\] table"):
        trainer._update_actor(batch)


@pytest.mark.parametrize(("overrides", "processor", "message"), [
    ({"actor_rollout_ref.actor.ppo_mini_batch_size": 4}, None,
     r"replay\.groups: is 2, below actor_rollout_ref\.actor\.ppo_mini_batch_size=4.*multiple of 4"),
    ({"critic.enable": True}, None, r"critic\.enable: gives verl a critic.*algorithm\.adv_estimator=grpo"),
    ({"algorithm.adv_estimator": "gae"}, None, r"algorithm\.adv_estimator: gives verl a critic"),
    ({"actor_rollout_ref.actor.policy_loss.loss_mode": "gpg"}, None,
     r"loss_mode: is 'gpg'.*without a ratio to old_log_probs.*remove \[replay\]"),
    ({"actor_rollout_ref.actor.use_prefix_grouper": True}, None, r"use_prefix_grouper: is true"),
    ({}, object(), r"actor_rollout_ref\.model\.path: is a multimodal model.*remove \[replay\]"),
])
def test_what_replay_cannot_work_with_is_refused_at_construction(
        tmp_path: Path, overrides: dict[str, Any], processor: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        legacy_trainer(verl_config(tmp_path, **overrides), replay_pipeline(tmp_path, groups=2), processor=processor)


def test_both_trainers_accept_replay_through_one_mechanism(tmp_path: Path) -> None:
    """One mechanism (flexkit.host.HostSupport): the v1 and legacy trainers' supports both honour [replay], and
    both run the same construction checks on it."""
    pipe = replay_pipeline(tmp_path)
    config = verl_config(tmp_path)
    check_trainer_config(config, pipe, steps_per_epoch=5, v1=True)
    check_trainer_config(config, pipe, steps_per_epoch=5, v1=False)
    for v1 in (True, False):
        with pytest.raises(ConfigError, match=r"replay\.groups: is 4, below .*ppo_mini_batch_size=8"):
            check_trainer_config(verl_config(tmp_path, mini_batch=8), pipe, steps_per_epoch=5, v1=v1)


def test_validate_for_verl_and_verl_legacy_accept_replay(tmp_path: Path) -> None:
    replay_pipeline(tmp_path)  # writes the tasksets
    path = tmp_path / "pipeline.toml"
    path.write_text('[run]\nbatch_size = 4\ntotal_epochs = 2\n\n[[tasksets]]\nname = "t0"\npath = "t0.jsonl"\n\n'
                    '[tasksets.selector]\ntype = "shuffle"\n\n[replay]\ngroups = 4\nmax_age = 2\n')

    def validate(host: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "flexkit", "validate", str(path), "--for", host],
                              capture_output=True, text=True, check=False)

    legacy = validate("verl-legacy")
    assert legacy.returncode == 0 and "valid for verl's legacy RayPPOTrainer" in legacy.stdout, legacy.stderr
    v1 = validate("verl")
    assert v1.returncode == 0 and "valid for verl's v1 trainer" in v1.stdout, v1.stderr
    for done in (legacy, v1):  # what replay needs of verl's settings, said before the run
        assert "needs at run time: replay: actor_rollout_ref.actor.ppo_mini_batch_size at most [replay] groups" in (
            done.stdout)
