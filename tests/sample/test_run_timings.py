"""``flexkit run`` calls the sample stage at ``post_reward`` and ``post_advantage`` only: a scorer declaring
``pre_rollout`` or ``in_loss`` is refused at the start of the run (it used to be skipped silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit import ConfigError, pipeline_from_dict
from flexkit.run._runner import RUN_TIMINGS, run_pipeline
from flexkit.sample._scorer import TIMINGS

PLUGIN = '''
from flexkit import hookimpl
from flexkit.sample.scorers.reward import RewardScorer


def _scorer(timing_):
    class Timed(RewardScorer):
        timing = timing_
    Timed.__name__ = "Timed_" + timing_
    return Timed


@hookimpl
def flexkit_register_scorers(register):
    for timing in ("pre_rollout", "post_reward", "post_advantage", "in_loss"):
        cls = _scorer(timing)
        register("reward_at_" + timing, cls, cls.Config, description="the reward, at " + timing)
'''


def _pipeline(root: Path, timing: str):
    (root / "timed.py").write_text(PLUGIN)
    data = {
        "plugins": ["./timed.py"],
        "run": {"batch_size": 4, "seed": 0, "total_steps": 2, "eval_every": 0, "prefetch": False},
        "tasksets": [{"name": "graded", "storage_type": "simulated", "size": 40, "levels": [1, 2]}],
        "trainer": {"type": "simulator", "group_size": 4},
        "sample": {"mechanism": "select", "scorer": {"type": f"reward_at_{timing}"},
                   "actuator": {"type": "topk_fraction"}},
    }
    return pipeline_from_dict(data, base_dir=root)


def test_the_runner_names_the_timings_it_runs() -> None:
    assert RUN_TIMINGS == ("post_reward", "post_advantage")
    assert set(RUN_TIMINGS) < set(TIMINGS)


@pytest.mark.parametrize("timing", ["pre_rollout", "in_loss"])
def test_a_scorer_at_a_timing_flexkit_run_never_reaches_is_refused_at_the_start(tmp_path: Path, timing: str) -> None:
    pipe = _pipeline(tmp_path, timing)
    with pytest.raises(ConfigError) as err:
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    [issue] = err.value.issues
    assert issue.path == "sample.scorer"
    assert f"reward_at_{timing}" in issue.message and f"timing {timing!r}" in issue.message
    assert "'post_reward', 'post_advantage'" in issue.message
    assert not (tmp_path / "run").exists()  # refused before the run folder is written


@pytest.mark.parametrize("timing", ["post_reward", "post_advantage"])
def test_a_scorer_at_a_timing_flexkit_run_reaches_runs(tmp_path: Path, timing: str) -> None:
    pipe = _pipeline(tmp_path, timing)
    result = run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert result.steps == 2
    assert any(key.startswith("flexkit/sample/mean_weight") for key in result.last_metrics)  # the stage ran
