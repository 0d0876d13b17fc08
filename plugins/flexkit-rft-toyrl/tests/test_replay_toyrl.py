"""``[replay]`` with the embedded trainer: replayed rows are weighed against the policy that generated them, only
fresh answers count as rollouts, and a resumed run replays exactly what an uninterrupted one does."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flexkit_toyrl")
torch = pytest.importorskip("torch")

from flexkit_toyrl.config import ToyRLConfig  # noqa: E402
from flexkit_toyrl.model import answer_log_probs  # noqa: E402
from flexkit_toyrl.trainer import ToyRLTrainer  # noqa: E402

from flexkit import load_pipeline, run_pipeline  # noqa: E402
from flexkit.testing import crash_run, read_metrics, without_clock  # noqa: E402

#: The field ``[replay]`` gives every row of the update's batch (docs/plugins/trainer.md).
REPLAY_AGE = "replay_age"

PIPELINE = """
[run]
batch_size = 8
seed = 5
total_steps = 12
eval_every = 4
checkpoint_every = 5

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 400
levels = [1, 2]

[tasksets.selector]
type = "frontier"
feature_keys = ["level"]

[replay]
groups = 6
max_age = 2

[trainer]
type = "toyrl"
max_digits = 3
d_model = 16
n_heads = 2
group_size = 4
warmup_steps = 100
warmup_batch_size = 32
warmup_level_weights = [0.5, 0.5]
eval_tasks_per_level = 10
eval_levels = [1, 2, 3]
"""


class _Task:
    def __init__(self, i: int) -> None:
        self.taskset, self.taskset_id, self.index = "t", 0, i
        self.data = {"a": 10 + i, "b": 20 + 3 * i, "level": 2}


def _trainer() -> ToyRLTrainer:
    return ToyRLTrainer(ToyRLConfig(max_digits=2, d_model=16, n_heads=2, group_size=4, warmup_steps=0,
                                    entropy_coef=0.0, eval_levels=(1, 2), warmup_level_weights=(1.0,)), seed=0)


def _negative_batch(trainer: ToyRLTrainer):
    """A rolled-out batch whose every advantage is negative."""
    batch = trainer.rollout([_Task(i) for i in range(4)], step=0).batch
    batch["advantages"] = -torch.ones_like(batch["response_mask"])
    return batch


def _params(trainer: ToyRLTrainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def test_replayed_rows_are_weighed_against_the_policy_that_generated_them() -> None:
    # As fresh rows (ratio 1), negative advantages move the policy.
    fresh = _trainer()
    batch = _negative_batch(fresh)
    before = _params(fresh)
    fresh.update(batch, None, step=0)
    assert not torch.equal(before, _params(fresh))
    # As replayed rows whose generating policy gave them e times the probability the current one does, the ratio
    # is 1/e < 1 - clip_ratio: PPO's clipped term takes over for negative advantages and no gradient flows.
    replayed = _trainer()
    batch = _negative_batch(replayed)
    with torch.no_grad():
        logp, _ = answer_log_probs(replayed.model, batch["input_ids"], replayed.answer_len, replayed.config.base)
    batch["old_log_probs"] = logp + 1.0
    batch[REPLAY_AGE] = torch.ones(batch.batch_size, dtype=torch.int64).numpy()
    before = _params(replayed)
    replayed.update(batch, None, step=0)
    assert torch.equal(before, _params(replayed))
    # replay_age 0 everywhere is the fresh update, bit for bit
    one, two = _trainer(), _trainer()
    a, b = _negative_batch(one), _negative_batch(two)
    b[REPLAY_AGE] = torch.zeros(b.batch_size, dtype=torch.int64).numpy()
    one.update(a, None, step=0)
    two.update(b, None, step=0)
    assert torch.equal(_params(one), _params(two))


def _steps(run_dir: Path) -> list[dict]:
    """The step records, without their wall clock (``flexkit/run/seconds``)."""
    return without_clock(read_metrics(run_dir)[1:])


def test_a_replay_run_counts_fresh_answers_and_resumes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE)
    full = run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    steps = _steps(tmp_path / "full")
    assert [s["flexkit/run/rollouts"] for s in steps] == [32 * (i + 1) for i in range(12)]  # 8 tasks x 4 answers
    replayed = [s["flexkit/replay/groups"] for s in steps]
    assert replayed[0] == 0 and max(replayed) > 0 and max(replayed) <= 6
    assert all(s["flexkit/replay/responses"] == 4 * s["flexkit/replay/groups"] for s in steps)
    crash_run(load_pipeline(path), tmp_path / "broken", 8)  # dies after step 8; checkpoint at step 5
    resumed = run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    assert _steps(tmp_path / "broken") == steps
    assert resumed.last_eval == full.last_eval
    # the buffer is part of the checkpoint: without it the resumed steps would replay nothing at first
    no_replay = PIPELINE.replace("[replay]\ngroups = 6\nmax_age = 2\n", "")
    other = tmp_path / "other.toml"
    other.write_text(no_replay)
    with pytest.raises(Exception, match=r"\[replay\]"):
        run_pipeline(load_pipeline(other), run_dir=tmp_path / "broken", resume=True, progress=None)


def test_replay_with_dynamic_sampling_replays_kept_groups(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE + """
[sample]
mechanism = "select"
[sample.scorer]
type = "group_solve_rate"
[sample.actuator]
type = "zero_variance_filter"
max_rounds = 2
[sample.refill]
""")
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "run", progress=None)
    steps = _steps(tmp_path / "run")
    assert all(s["flexkit/run/rollouts"] % 32 == 0 for s in steps)  # whole rounds of fresh answers only
    assert max(s["flexkit/replay/groups"] for s in steps) > 0
    assert all(s["flexkit/replay/groups"] <= 6 for s in steps)
