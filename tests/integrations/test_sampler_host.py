"""The torch sampler honours a pipeline part or refuses it where it is built (flexkit.host, issue 45 item 1).

Before, ``FlexkitSampler`` and ``sampler_for_dataset`` accepted anything: a ``frontier`` grouped by a column (whose
default guard reads ``val_accuracy/<group>``) never saw an evaluation, and ``[replay]`` was ignored, silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexkit import ComponentError, ConfigError, load_pipeline, pipeline_from_dict
from flexkit.host import SAMPLER_SUPPORT, HostSupport, pipeline_needs
from flexkit.integrations._torch import FlexkitSampler, sampler_for_dataset
from tests.fixtures import ROOT, jsonl_pipeline

QUICKSTART = ROOT / "examples" / "quickstart.toml"
LEVELS = np.repeat([1, 2, 3, 4], 10)
MY_LOOP = HostSupport(name="my loop", evaluation=True)


def _frontier(**extra: object) -> FlexkitSampler:
    """``sampler_for_dataset`` with frontier grouped by level: its guard reads ``val_accuracy/<level>`` by default."""
    return sampler_for_dataset(list(range(LEVELS.size)), batch_size=8, selector="frontier",
                               features={"level": LEVELS}, feature_keys=["level"], **extra)


def _held_out(sampler: FlexkitSampler) -> list[bool]:
    evaluated: list[bool] = sampler.scheduler.entries[0].selector.state_dict()["held_out"]["evaluated"].tolist()
    return evaluated


def test_regression_sampler_for_dataset_refuses_the_default_frontier_guard() -> None:
    """It used to build a selector whose guard never received an evaluation."""
    with pytest.raises(ConfigError) as err:
        _frontier()
    assert [issue.path for issue in err.value.issues] == ["tasksets[0].selector.guard_metric"]
    message = str(err.value)
    assert "FlexkitSampler in your own loop does not honour this" in message
    assert "sampler.evaluation(metrics)" in message and 'HostSupport(name="my loop", evaluation=True)' in message
    assert 'guard_metric = ""' in message
    assert pipeline_needs(_frontier(guard_metric="").scheduler) == []  # the guard off: nothing needed or refused


def test_a_loop_that_declares_evaluations_feeds_the_guard_through_the_sampler() -> None:
    sampler = _frontier(host=MY_LOOP)
    assert sampler.host is MY_LOOP
    drawn = iter(sampler)
    batch = [next(drawn) for _ in range(sampler.batch_size)]
    sampler.feedback(batch, np.ones(len(batch)))
    assert _held_out(sampler) == [False] * 4
    sampler.evaluation({f"val_accuracy/{level}": 0.5 for level in (1, 2, 3, 4)})
    assert _held_out(sampler) == [True] * 4  # the guard saw the evaluation
    with pytest.raises(ComponentError, match="none of the guard's metrics"):  # misnamed ones: an error, not silence
        _frontier(host=MY_LOOP).evaluation({"eval_reward": 0.5})


def test_regression_flexkit_sampler_refuses_replay_and_the_guard_with_what_to_do() -> None:
    """The quickstart's [replay] and guard were ignored by a sampler in a plain loop."""
    with pytest.raises(ConfigError) as err:
        FlexkitSampler(load_pipeline(QUICKSTART))
    assert [issue.path for issue in err.value.issues] == ["replay", "tasksets[0].selector.guard_metric"]
    assert err.value.source == str(QUICKSTART)
    replay = err.value.issues[0].message
    assert "flexkit.host.ReplayBuffer" in replay and "replay=True" in replay and "remove [replay]" in replay
    everything = HostSupport(name="my loop", replay=True, evaluation=True)
    assert FlexkitSampler(load_pipeline(QUICKSTART), host=everything).host is everything


def test_the_sample_stage_and_refills_are_refused_with_what_to_do(tmp_path: Path) -> None:
    pipe = jsonl_pipeline(tmp_path, (20, 12), {"batch_size": 8, "seed": 0, "total_epochs": 1},
                          sample={"mechanism": "select", "scorer": {"type": "group_reward_range"},
                                  "actuator": {"type": "zero_variance_filter"}, "refill": {}})
    with pytest.raises(ConfigError) as err:
        FlexkitSampler(pipe)
    assert [issue.path for issue in err.value.issues] == ["sample", "sample.refill"]
    assert "apply_sample_stage" in err.value.issues[0].message and "fill_batch" in err.value.issues[1].message


def test_a_bare_scheduler_needs_what_its_selectors_need() -> None:
    """A TasksetScheduler has no [sample] or [replay] table: only its selectors' keys are checked."""
    scheduler = load_pipeline(QUICKSTART).scheduler
    assert [(n.part, n.key) for n in pipeline_needs(scheduler)] == [
        ("evaluation", "tasksets[0].selector.guard_metric"), ("group_accuracy", "tasksets[0].selector.guard_metric")]
    with pytest.raises(ConfigError) as err:
        FlexkitSampler(scheduler)
    assert [issue.path for issue in err.value.issues] == ["tasksets[0].selector.guard_metric"]
    assert err.value.source is None
    FlexkitSampler(scheduler, host=MY_LOOP)


def test_host_none_is_checked_at_the_first_batch_unless_an_adapter_declares_itself() -> None:
    """``host=None`` leaves the check to a host adapter; a sampler none declared cannot end unchecked."""
    sampler = FlexkitSampler(load_pipeline(QUICKSTART), host=None)
    assert sampler.host is None
    with pytest.raises(ConfigError, match=r"replay: FlexkitSampler\(host=None\), which no host adapter declared"):
        next(iter(sampler))
    sampler.declare_host(HostSupport(name="an adapter", replay=True, evaluation=True))
    assert isinstance(next(iter(sampler)), int)
    with pytest.raises(ConfigError, match="an adapter does not honour this"):
        sampler.declare_host(HostSupport(name="an adapter", evaluation=True))
    plain = FlexkitSampler(pipeline_from_dict({  # nothing needed: an undeclared sampler draws as before
        "run": {"batch_size": 2, "seed": 0, "total_steps": 1},
        "tasksets": [{"name": "s", "storage_type": "simulated", "size": 4, "selector": {"type": "shuffle"}}],
    }), host=None)
    assert len(list(plain)) == 2


def test_the_default_host_gives_no_part() -> None:
    assert not any(SAMPLER_SUPPORT.gives(part) for part in ("sample", "refill", "replay", "evaluation",
                                                            "group_accuracy"))
    assert set(SAMPLER_SUPPORT.advice) == {"sample", "refill", "replay", "evaluation"}
