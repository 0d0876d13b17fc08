"""The metric vocabulary (:mod:`flexkit._metric_names`): one name per value, and old records read under it."""

from __future__ import annotations

import pytest

from flexkit import _metric_names as names
from flexkit._metric_names import (
    EVAL_ACCURACY,
    KEPT_FRACTION,
    KEPT_GROUPS,
    METRICS,
    PREFIX,
    RUN_ROLLOUTS,
    evaluation_of,
    record_evaluation,
    sample_metric,
    upgrade_record,
)

#: A refill step's record as flexkit 0.1.0 wrote it: the step's kept_groups / kept_fraction beside the last
#: round's sample/kept_groups / sample/kept_fraction.
OLD = {"step": 4, "reward_mean": 0.4, "taskset_mix": {"a": 24}, "pass_rate_mean": 0.4, "rollouts": 384,
       "generated_tokens": 400, "kept_groups": 8, "filter_rounds": 3, "sample/kept_groups": 6.0,
       "sample/groups_needed": 0.0, "sample/filter_rounds": 3.0, "sample/kept_fraction": 0.75,
       "sample/mean_weight": 0.75, "kept_fraction": 0.3333, "level_mix": {"1": 24},
       "predicted_pass_rate": {"selected": [1], "pool": [2]}, "eval_accuracy": 0.5, "eval_accuracy/1": 0.9,
       "eval_loss": 1.5}


def test_every_name_is_unique_and_prefixed() -> None:
    listed = [m.name for m in METRICS]
    assert len(set(listed)) == len(listed) and all(n.startswith(PREFIX) for n in listed)
    constants = {v for k, v in vars(names).items()
                 if k.isupper() and not k.startswith("_") and isinstance(v, str) and v.startswith(PREFIX)}
    assert constants - {PREFIX} <= set(listed)  # every defined name is in the table


def test_an_old_record_reads_under_the_new_names() -> None:
    new = upgrade_record(OLD)
    assert new == {"step": 4, "reward_mean": 0.4, "flexkit/taskset_mix": {"a": 24},
                   "flexkit/feedback/pass_rate_mean": 0.4, "flexkit/run/rollouts": 384,
                   "flexkit/run/generated_tokens": 400, KEPT_GROUPS: 8, "flexkit/sample/filter_rounds": 3,
                   "flexkit/sample/groups_needed": 0.0, "flexkit/sample/mean_weight": 0.75, KEPT_FRACTION: 0.3333,
                   "flexkit/level_mix": {"1": 24}, "flexkit/predicted_pass_rate": {"selected": [1], "pool": [2]},
                   EVAL_ACCURACY: 0.5, "flexkit/eval/accuracy/1": 0.9, "eval_loss": 1.5}
    # the step's values win over the last round's, whatever the key order
    assert upgrade_record(dict(reversed(list(OLD.items())))) == new


def test_a_new_record_is_read_as_it_is() -> None:
    record = {"step": 0, RUN_ROLLOUTS: 8, "rollouts_of_mine": 1, "sample/x": 2}
    assert upgrade_record(record) == record
    assert upgrade_record({"step": -1}) == {"step": -1}


def test_the_evaluation_round_trips_between_the_trainer_and_the_record() -> None:
    evaluation = {"eval_accuracy": 0.5, "eval_accuracy/1": 0.9, "eval_loss": 1.5}
    record = record_evaluation(evaluation)
    assert record == {EVAL_ACCURACY: 0.5, "flexkit/eval/accuracy/1": 0.9, "eval_loss": 1.5}
    assert evaluation_of({"step": 3, "reward_mean": 0.1, **record}) == evaluation


@pytest.mark.parametrize("name", ["kept_groups", "sample/kept_groups", "flexkit/sample/kept_groups"])
def test_an_actuator_metric_gets_one_name(name: str) -> None:
    assert sample_metric(name) == KEPT_GROUPS
