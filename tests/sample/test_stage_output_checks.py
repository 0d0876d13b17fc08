"""SampleStage checks what a scorer and an actuator return (issue G2, item 3).

A plugin's scorer or actuator need not derive from flexkit's base classes, and the base classes checked part of
the output only: a wrong shape, bool or complex scores, NaN, a kept index outside the batch, weights for another
batch or a proportion for an unknown taskset went through (or failed later without naming the component).
The stage now refuses each with a SampleError naming the component, its plugin and its distribution.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from flexkit import hookimpl
from flexkit.errors import SampleError
from flexkit.plugins._manager import PluginHost
from flexkit.sample import Keep, Mix, RolloutBatch, SampleStage, Weights
from flexkit.sample.scorers import RewardScorer

B, T = 8, 4


def batch() -> RolloutBatch:
    return RolloutBatch.from_dict({
        "token_level_scores": torch.zeros(B, T),
        "response_mask": torch.ones(B, T, dtype=torch.int64),
        "uid": np.array(["p"] * 4 + ["q"] * 4, dtype=object),
        "taskset_id": np.array([0] * 4 + [1] * 4),
    })


class DuckScorer:
    """A scorer that does not derive from flexkit.sample.Scorer: returns ``out(batch)``."""

    timing, granularity, needs_groups, requires = "post_reward", "response", False, ()
    registered_name = registered_plugin = registered_distribution = None

    def __init__(self, out: Callable[[RolloutBatch], Any]) -> None:
        self.out = out

    def __call__(self, batch: RolloutBatch, *, step: int) -> Any:
        return self.out(batch)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


class DuckDomainScorer(DuckScorer):
    granularity = "domain"


class DuckActuator:
    """An actuator that does not derive from flexkit.sample.Actuator: returns ``out(batch)``."""

    mechanism, accepts = "select", ("response", "domain")
    registered_name = registered_plugin = registered_distribution = None

    def __init__(self, out: Callable[[RolloutBatch], Any]) -> None:
        self.out = out

    def __call__(self, scores: Any, batch: RolloutBatch, *, step: int) -> Any:
        return self.out(batch)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


class DuckReweighter(DuckActuator):
    mechanism = "reweight"


class DuckMixer(DuckActuator):
    mechanism = "mix"


def built(stage: str, cls: type, out: Callable[[RolloutBatch], Any]) -> Any:
    """``cls(out)`` built by a plugin host, from a plugin of distribution ``acme-sample`` (names recorded)."""
    hook = "flexkit_register_scorers" if stage == "scorer" else "flexkit_register_actuators"
    plugin = types.ModuleType("acme_sample")
    setattr(plugin, hook, hookimpl(lambda register: register("duck", lambda config: cls(out))))
    host = PluginHost()
    assert host.add(plugin, name="acme", distribution="acme-sample")
    return host.component(stage, "duck").build()


KEEP_ALL = DuckActuator(lambda b: Keep(np.arange(b.batch_size)))
GOOD_SCORES = DuckScorer(lambda b: torch.zeros(b.batch_size))


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (lambda b: torch.zeros(B - 1), r"must return shape \(8,\), got \(7,\)"),
        (lambda b: torch.zeros(B, 2), r"must return shape \(8,\), got \(8, 2\)"),
        (lambda b: torch.ones(B, dtype=torch.bool), "returned torch.bool scores; scores must be real numbers"),
        (lambda b: torch.ones(B, dtype=torch.complex64), "returned torch.complex64 scores"),
        (lambda b: torch.tensor([0.0] * (B - 1) + [float("nan")]), "scores must be finite"),
        (lambda b: np.array(["a"] * B), "returned scores that are not numbers"),
        (lambda b: [0.0] * B, "must return a torch.Tensor, got list"),
    ],
)
def test_wrong_scores_are_refused_naming_the_scorer_and_its_distribution(out: Any, message: str) -> None:
    stage = SampleStage(built("scorer", DuckScorer, out), KEEP_ALL, mechanism="select", estimator="grpo")
    with pytest.raises(SampleError, match=message) as info:
        stage.run(batch(), step=0)
    assert "'duck' (DuckScorer, plugin 'acme', distribution 'acme-sample')" in str(info.value)


@pytest.mark.parametrize(
    ("out", "message"),
    [({0: "x"}, "not numbers"), ({0: float("nan")}, "must be finite"), ({0: float("inf")}, "must be finite")],
)
def test_wrong_domain_scores_are_refused(out: Any, message: str) -> None:
    actuator = DuckMixer(lambda b: Mix({0: 1.0}))
    stage = SampleStage(built("scorer", DuckDomainScorer, lambda b: out), actuator, mechanism="mix",
                        estimator="grpo")
    with pytest.raises(SampleError, match=message):
        stage.run(batch(), step=0)


def test_bool_scores_of_a_scorer_subclass_are_refused() -> None:
    class BoolScorer(RewardScorer):
        def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor:
            return torch.ones(batch.batch_size, dtype=torch.bool)

    stage = SampleStage(BoolScorer(), KEEP_ALL, mechanism="select", estimator="grpo")
    with pytest.raises(SampleError, match=r"BoolScorer.*returned torch\.bool scores"):
        stage.run(batch(), step=0)


@pytest.mark.parametrize(
    ("cls", "mechanism", "out", "message"),
    [
        (DuckActuator, "select", lambda b: Keep([0, B]), "kept sample 8, outside the batch of 8 samples"),
        (DuckActuator, "select", lambda b: Keep([-1, 3]), "kept sample -1, outside the batch"),
        (DuckActuator, "select", lambda b: Weights(torch.ones(B)), "must return Keep, got Weights"),
        (DuckActuator, "select", lambda b: None, "must return Keep, got NoneType"),
        (DuckReweighter, "reweight", lambda b: Weights(torch.ones(B - 1)),
         r"weights of shape \(7,\) for a batch of 8 samples; expected \(8,\) or \(8, 4\)"),
        (DuckReweighter, "reweight", lambda b: Weights(torch.ones(B, T + 1)), r"weights of shape \(8, 5\)"),
        (DuckMixer, "mix", lambda b: Mix({0: 0.5, 2: 0.5}),
         r"gave a proportion to taskset id 2, but the pipeline has 2 taskset\(s\)"),
    ],
)
def test_wrong_actions_are_refused_naming_the_actuator_and_its_distribution(
    cls: type, mechanism: str, out: Any, message: str
) -> None:
    scorer = DuckDomainScorer(lambda b: {0: 0.5, 1: 0.5}) if mechanism == "mix" else GOOD_SCORES
    stage = SampleStage(scorer, built("actuator", cls, out), mechanism=mechanism, estimator="grpo")
    stage.bind(["a", "b"])
    with pytest.raises(SampleError, match=message) as info:
        stage.run(batch(), step=0)
    assert f"actuator 'duck' ({cls.__name__}, plugin 'acme', distribution 'acme-sample')" in str(info.value)


def test_good_outputs_pass() -> None:
    stage = SampleStage(GOOD_SCORES, DuckActuator(lambda b: Keep([1, 2])), mechanism="select", estimator="grpo")
    assert stage.run(batch(), step=0).indices.tolist() == [1, 2]
    reweight = SampleStage(DuckScorer(lambda b: torch.arange(B)), DuckReweighter(lambda b: Weights(torch.ones(B, T))),
                           mechanism="reweight", estimator="grpo")
    assert tuple(reweight.run(batch(), step=0).weights.shape) == (B, T)  # int scores are fine


@pytest.mark.parametrize(("existing", "message"), [
    (np.arange(B), "must be floats, got int64: is \\[sample\\] weights_key"),
    (torch.arange(B), "must be floats, got torch.int64"),
    (torch.tensor([float("nan")] + [1.0] * (B - 1)), "must be finite and >= 0"),
    (np.array([-3.0] + [1.0] * (B - 1)), "must be finite and >= 0"),
])
def test_regression_weights_already_in_the_batch_are_checked(existing: Any, message: str) -> None:
    """The batch's own weights (``weights_key``) went into the loss unchecked: ids as weights, NaN, negatives."""
    b = batch()
    b["rollout_is_weights"] = existing
    stage = SampleStage(GOOD_SCORES, KEEP_ALL, mechanism="select", estimator="grpo", weights_key="rollout_is_weights")
    with pytest.raises(SampleError, match=message):
        stage.token_weights(b, step=0)


def test_regression_group_solve_rate_refuses_non_finite_rewards() -> None:
    from flexkit.sample.scorers import GroupSolveRateScorer

    b = batch()
    b["token_level_scores"][0, -1] = float("nan")
    with pytest.raises(SampleError, match="group_solve_rate': rewards must be finite"):
        GroupSolveRateScorer()(b, step=0)


def test_regression_gfpo_keeps_nothing_of_an_empty_batch() -> None:
    from flexkit.sample.actuators import GfpoFilter

    empty = RolloutBatch.from_dict({"token_level_scores": torch.zeros(0, T), "response_mask": torch.ones(0, T),
                                    "uid": np.array([], dtype=object)})
    assert GfpoFilter()(torch.zeros(0), empty, step=0).indices.tolist() == []


def test_regression_mean_one_refuses_non_finite_raw_weights_instead_of_dropping_the_batch() -> None:
    from flexkit.sample.actuators._mean_one import mean_one

    with pytest.raises(SampleError, match="raw weights must be finite"):
        mean_one(torch.tensor([float("nan"), 1.0]), None, torch.float32)
    assert mean_one(torch.zeros(3), None, torch.float32).tolist() == [0.0, 0.0, 0.0]  # all zero stays so
