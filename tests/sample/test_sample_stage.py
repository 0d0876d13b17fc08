"""SampleStage: wiring checks, token weights multiplied into existing weights, mix, timing, logging, state."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flexkit.errors import ConfigError
from flexkit.sample import (
    AdvantageMagnitudeScorer,
    GroupSolveRateScorer,
    RewardGapConfig,
    RewardGapMixer,
    RewardScorer,
    RolloutBatch,
    SampleStage,
    SoftmaxReweighter,
    ThresholdBandConfig,
    ThresholdBandFilter,
    TokenProbScorer,
)


def _batch(**extra: object) -> RolloutBatch:
    """Two groups of four: group p solved 1/4 (kept by the band), group q solved 4/4 (dropped)."""
    mask = torch.ones(8, 4, dtype=torch.int64)
    mask[0, 2:] = 0
    scores = torch.zeros(8, 4)
    scores[:, 1] = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    return RolloutBatch.from_dict({
        "token_level_scores": scores,
        "response_mask": mask,
        "old_log_probs": torch.log(torch.full((8, 4), 0.5)),
        "advantages": torch.randn(8, 4, generator=torch.Generator().manual_seed(0)),
        "uid": np.array(["p"] * 4 + ["q"] * 4, dtype=object),
        "taskset_id": np.array([0] * 4 + [1] * 4),
        **extra,
    })


def _select_stage() -> SampleStage:
    return SampleStage(GroupSolveRateScorer(), ThresholdBandFilter(ThresholdBandConfig(low=0.2, high=0.8)),
                       mechanism="select", estimator="grpo")


def test_construction_checks_compatibility() -> None:
    with pytest.raises(ConfigError, match=r"'group_solve_rate'.*needs_groups=True.*estimator 'gae'"):
        SampleStage(GroupSolveRateScorer(), ThresholdBandFilter(), mechanism="select", estimator="gae")
    with pytest.raises(ConfigError, match="is a 'select' actuator"):
        SampleStage(RewardScorer(), ThresholdBandFilter(), mechanism="reweight", estimator="gae")


def test_select_stage_token_weights_and_logging() -> None:
    stage, batch = _select_stage(), _batch()
    w = stage.token_weights(batch, step=3)
    assert w.dtype == torch.float32 and w.shape == (8, 4)
    expected = torch.zeros(8, 4)
    expected[:4] = batch["response_mask"][:4].float()
    assert torch.equal(w, expected)
    assert stage.kept_indices.tolist() == [0, 1, 2, 3]
    assert stage.last_scores.tolist() == [0.25] * 4 + [1.0] * 4
    assert stage.metrics() == {"flexkit/sample/kept_fraction": 0.5, "flexkit/sample/mean_weight": 0.5}
    assert stage.proportions is None and stage.last_step == 3


def test_token_weights_multiply_into_existing_rollout_is_weights() -> None:
    existing = torch.full((8, 4), 0.5)
    existing[1, 0] = 3.0
    batch = _batch(rollout_is_weights=existing)
    w = _select_stage().token_weights(batch, step=0)
    assert w[1, 0] == 3.0 and w[2, 0] == 0.5 and w[0, 3] == 0.0 and (w[4:] == 0).all()
    assert torch.equal(batch["rollout_is_weights"], existing)  # not overwritten
    custom = SampleStage(RewardScorer(), SoftmaxReweighter(), mechanism="reweight", estimator="gae",
                         weights_key="my_w")
    batch2 = _batch(my_w=torch.full((8, 4), 2.0))
    w2 = custom.token_weights(batch2, step=0)
    sample_w = custom.last_action.weights
    torch.testing.assert_close(w2, 2.0 * sample_w[:, None] * batch2["response_mask"])


def test_runs_once_per_batch_and_step() -> None:
    stage = SampleStage(RewardScorer(), RewardGapMixer(RewardGapConfig(window=5)), mechanism="mix", estimator="gae")
    stage.bind(["a", "b"])
    batch = _batch()
    w1 = stage.token_weights(batch, step=0)
    w2 = stage.token_weights(batch, step=0)
    assert w1 is w2
    counts = stage.actuator.state_dict()["window"][0]["counts"]
    assert counts == [4.0, 4.0]  # recorded once
    assert torch.equal(w1, batch["response_mask"].float())  # mix: no sample weights
    p = stage.proportions
    assert p is not None and p[0] > p[1]  # taskset 0 has the lower reward
    assert stage.metrics()["flexkit/sample/proportion/0"] == p[0]
    stage.token_weights(batch, step=1)
    assert [e["step"] for e in stage.actuator.state_dict()["window"]] == [0, 1]


def test_mix_stage_passes_existing_weights_through() -> None:
    stage = SampleStage(RewardScorer(), RewardGapMixer(), mechanism="mix", estimator="gae")
    existing = torch.full((8, 4), 0.25)
    assert torch.equal(stage.token_weights(_batch(rollout_is_weights=existing), step=0), existing)


def test_should_run_follows_the_scorer_timing() -> None:
    post_reward = _select_stage()
    assert post_reward.timing == "post_reward"
    assert post_reward.should_run("post_reward") and not post_reward.should_run("post_advantage")
    post_adv = SampleStage(AdvantageMagnitudeScorer(), SoftmaxReweighter(), mechanism="reweight", estimator="gae")
    assert post_adv.should_run("post_advantage") and not post_adv.should_run("post_reward")
    with pytest.raises(ValueError, match="unknown timing 'post_rewards'"):
        post_adv.should_run("post_rewards")


def test_token_level_reweight_stage() -> None:
    stage = SampleStage(TokenProbScorer(), SoftmaxReweighter(), mechanism="reweight", estimator="gae")
    batch = _batch()
    w = stage.token_weights(batch, step=0)
    mask = batch["response_mask"].float()
    torch.testing.assert_close(w, mask)  # equal token probabilities: uniform weights over response tokens
    assert stage.mean_weight == pytest.approx(1.0) and stage.kept_fraction == 1.0


def test_state_round_trip() -> None:
    def make() -> SampleStage:
        s = SampleStage(RewardScorer(), RewardGapMixer(RewardGapConfig(window=2)), mechanism="mix", estimator="gae")
        s.bind(["a", "b"])
        return s

    a = make()
    for step in range(3):
        a.run(_batch(), step=step)
    state = json.loads(json.dumps(a.state_dict()))
    b = make()
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    assert b.proportions is None  # the latest action's, for logging: the mix in force is the scheduler's
    assert a.run(_batch(), step=3).proportions == b.run(_batch(), step=3).proportions
    assert b.proportions == a.proportions
    sel = _select_stage()
    assert sel.state_dict() == {"scorer": {}, "actuator": {}}


def test_regression_the_mix_is_not_checkpointed_by_the_stage_and_an_old_copy_is_ignored() -> None:
    """Regression: the stage checkpointed the latest proportions beside the scheduler's mix (two copies, both
    validated, one ulp apart). The stage keeps none now; a state written before (with ``proportions``) loads,
    its copy checked for shape and ignored."""
    a = SampleStage(RewardScorer(), RewardGapMixer(RewardGapConfig(window=2)), mechanism="mix", estimator="gae")
    a.bind(["a", "b"])
    a.run(_batch(), step=0)
    assert "proportions" not in a.state_dict()
    old = {**a.state_dict(), "proportions": [[0, 0.25], [1, 0.75]]}
    problems: list[str] = []
    a.check_state(old, ("pipeline", "sample"), problems)
    assert problems == []
    a.load_state_dict(old)
    assert a.state_dict() == {k: v for k, v in old.items() if k != "proportions"}
    a.check_state({**old, "proportions": [[2, 0.5]]}, ("pipeline", "sample"), problems)
    a.check_state({"scorer": {}}, ("s",), problems)
    assert problems == ["pipeline.sample.proportions: expected [taskset id, proportion >= 0] pairs, got [[2, 0.5]]",
                        "s.actuator: missing, or not a table"]


def test_mix_stage_drives_the_scheduler_proportions() -> None:
    """Scripted rewards: one taskset is solved, the other not; the mix moves batches toward the unsolved one,
    and back when the signal flips (window of 2 steps)."""
    from flexkit.scheduler._scheduler import TasksetEntry, TasksetScheduler
    from flexkit.selectors import RandomSelector
    from flexkit.tasksets import InMemoryTaskset

    names = ["algebra", "geometry"]
    entries = [TasksetEntry(name=n, taskset=InMemoryTaskset(n, size=100), selector=RandomSelector(size=100, seed=i))
               for i, n in enumerate(names)]
    sched = TasksetScheduler(entries, batch_size=20, seed=0, total_steps=12, prefetch=False)
    stage = SampleStage(RewardScorer(), RewardGapMixer(RewardGapConfig(window=2, temperature=0.1, floor=0.1)),
                        mechanism="mix", estimator="grpo")
    stage.bind(sched.names)
    hard_share = []
    for step in range(12):
        tasks = sched.read()
        tid = np.array([t.taskset_id for t in tasks])
        hard_share.append(float((tid == 1).mean()))
        solved = tid == (0 if step < 6 else 1)  # geometry is unsolved first, then algebra
        batch = RolloutBatch.from_dict({"rm_scores": torch.tensor(solved, dtype=torch.float32),
                                        "taskset_id": tid})
        stage.run(batch, step=step)
        sched.set_mix(stage.proportions)
    sched.close()
    assert hard_share[0] == 0.5  # sizes 100/100: the plain plan
    assert all(share >= 0.9 for share in hard_share[1:7])  # toward geometry
    assert all(share <= 0.1 for share in hard_share[8:])  # flipped, once the old steps left the window


def test_scores_are_checked_once_and_an_actuator_with_its_own_call_still_works(monkeypatch) -> None:
    import flexkit.sample._actuator as actuator_module

    calls: list[str] = []
    original = actuator_module.check_finite
    monkeypatch.setattr(actuator_module, "check_finite", lambda *a, **k: (calls.append(k["who"]), original(*a, **k)))
    import flexkit.sample._output_checks as checks_module

    monkeypatch.setattr(checks_module, "check_finite", actuator_module.check_finite)
    action = _select_stage().run(_batch(), step=0)
    assert action.indices.tolist() == [0, 1, 2, 3] and len(calls) == 1 and calls[0].startswith("scorer")

    class OwnCall(ThresholdBandFilter):
        def __call__(self, scores, batch, *, step):  # an older signature, without scores_checked
            return super().__call__(scores, batch, step=step)

    stage = SampleStage(GroupSolveRateScorer(), OwnCall(ThresholdBandConfig(low=0.2, high=0.8)), mechanism="select",
                        estimator="grpo")
    assert stage.run(_batch(), step=0).indices.tolist() == [0, 1, 2, 3]
