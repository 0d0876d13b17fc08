"""The Ray scheduler service honours a pipeline part or refuses it where it is built (flexkit.host, issue 45 item 1).

Before, :class:`flexkit_ray.SchedulerService` (the actor's class, driven here without a Ray runtime) took any
pipeline: the quickstart's ``frontier`` guard never saw an evaluation (the service had no way to hand it one) and
``[replay]`` was ignored, silently. ``flexkit validate --for ray`` answers the same before a run.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flexkit import ConfigError
from flexkit.host import HostSupport

flexkit_ray = pytest.importorskip("flexkit_ray")

ROOT = Path(__file__).resolve().parents[3]
#: The quickstart's recipe, small: frontier grouped by level (its default guard reads val_accuracy/<level>) and
#: [replay].
RECIPE: dict[str, Any] = {
    "run": {"batch_size": 8, "seed": 0, "total_steps": 4},
    "tasksets": [{"name": "addition", "storage_type": "arithmetic", "size": 60, "levels": [1, 2, 3],
                  "selector": {"type": "frontier", "feature_keys": ["level"]}}],
    "replay": {"groups": 4, "max_age": 2},
}
MY_LEARNER = HostSupport(name="my learner", evaluation=True)


def _without_replay() -> dict[str, Any]:
    data = copy.deepcopy(RECIPE)
    del data["replay"]
    return data


def test_regression_the_service_refuses_replay_and_a_guard_it_cannot_feed() -> None:
    with pytest.raises(ConfigError) as err:
        flexkit_ray.SchedulerService(RECIPE)
    assert [issue.path for issue in err.value.issues] == ["replay", "tasksets[0].selector.guard_metric"]
    replay, guard = (issue.message for issue in err.value.issues)
    assert "the Ray scheduler service (flexkit_ray) does not honour this" in replay
    assert "remove [replay] from the service's pipeline" in replay
    assert "scheduler.evaluation.remote(metrics)" in guard and 'guard_metric = ""' in guard
    assert 'host=HostSupport(name="my learner", evaluation=True)' in guard
    with pytest.raises(ConfigError, match="replay"):  # declaring evaluations does not make the service replay
        flexkit_ray.SchedulerService(RECIPE, host=MY_LEARNER)


def test_a_learner_that_declares_evaluations_feeds_the_guard_through_the_service() -> None:
    service = flexkit_ray.SchedulerService(_without_replay(), host=MY_LEARNER)
    assert service.host is MY_LEARNER

    def evaluated() -> list[bool]:
        return list(service.ledger.scheduler.entries[0].selector.state_dict()["held_out"]["evaluated"])

    async def scenario() -> None:
        lease = await service.lease("w0")
        assert lease is not None
        assert evaluated() == [False, False, False]
        await service.evaluation({f"val_accuracy/{level}": 0.5 for level in (1, 2, 3)})
        assert evaluated() == [True, True, True]
        state = await service.state_dict()  # the evaluation is in the checkpointed selector state
        assert list(state["pipeline"]["scheduler"]["selectors"][0]["held_out"]["evaluated"]) == [True] * 3

    asyncio.run(scenario())


def test_the_guard_off_needs_no_declaration_and_a_host_crosses_to_the_actor() -> None:
    data = _without_replay()
    data["tasksets"][0]["selector"]["guard_metric"] = ""
    assert flexkit_ray.SchedulerService(data).host is flexkit_ray.SERVICE_SUPPORT
    assert pickle.loads(pickle.dumps(MY_LEARNER)) == MY_LEARNER  # Ray pickles the actor's arguments


def test_validate_for_ray_answers_before_a_run() -> None:
    def validate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "flexkit", "validate", *args], capture_output=True, text=True,
                              check=False, cwd=ROOT)

    refused = validate("examples/quickstart.toml", "--for", "ray")
    assert refused.returncode == 1, refused.stdout
    assert "replay: the Ray scheduler service (flexkit_ray) does not honour this" in refused.stderr
    valid = validate("examples/multi_taskset_difficulty.toml", "--for", "ray")
    assert valid.returncode == 0, valid.stderr
    assert "valid for the Ray scheduler service (flexkit_ray)" in valid.stdout
