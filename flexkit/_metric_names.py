"""Every metric name flexkit writes, defined once.

``flexkit run``'s ``metrics.jsonl`` records, the host adapters' metrics (:func:`flexkit.pipeline_metrics`, logged
by the verl, TRL and Trinity-RFT adapters) and ``flexkit run``'s experiment trackers use these names, all under
:data:`PREFIX`. A record also holds ``step`` (its training step; ``-1``: the evaluation before training) and the
trainer's own metrics under the trainer's names. :data:`METRICS` is the table docs/metrics.md shows (a test
checks the two agree).

Run folders written before the names were unified hold the old names (``rollouts``, ``kept_groups``,
``eval_accuracy``, ``sample/...``, ...); :func:`upgrade_record` reads such a record under the current names, so a
resumed or compared old run reads like a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from flexkit._state_problems import NOT_A_NUMBER, plain_number, short

__all__ = [
    "EPOCH", "EVAL_ACCURACY", "FEEDBACK_ONE_FRACTION", "FEEDBACK_PASS_RATE_MAX", "FEEDBACK_PASS_RATE_MEAN",
    "FEEDBACK_PASS_RATE_MIN", "FEEDBACK_PASS_RATE_STD", "FEEDBACK_TASKS", "FEEDBACK_ZERO_FRACTION", "FILTER_ROUNDS",
    "GROUPS_NEEDED", "KEPT_FRACTION", "KEPT_GROUPS", "LEGACY_NAMES", "LEVEL_MIX", "MEAN_WEIGHT", "METRICS",
    "PREDICTED_PASS_RATE", "PREFIX", "REPLAY_GROUPS", "REPLAY_RESPONSES", "REWARD_MEAN", "ROLLOUTS",
    "RUN_GENERATED_TOKENS", "RUN_ROLLOUTS", "RUN_SECONDS", "SCHEDULER_STEP", "STEP", "TASKSET_MIX",
    "TRAINER_EVAL_ACCURACY", "TRAINER_VAL_ACCURACY", "TRAINER_VAL_PREFIX", "VAL_ACCURACY", "Metric", "eval_level",
    "evaluation_of", "group_mix_share", "mix_share", "plain_evaluation", "proportion", "record_evaluation",
    "record_validation", "sample_metric", "selector_metric", "upgrade_record", "val_level",
]

#: The prefix of every flexkit metric name.
PREFIX = "flexkit/"

#: A record's training step (0-based; ``-1``: the evaluation before training). Not a metric: the record's key.
STEP = "step"

SCHEDULER_STEP = PREFIX + "step"
EPOCH = PREFIX + "epoch"
ROLLOUTS = PREFIX + "rollouts"
RUN_ROLLOUTS = PREFIX + "run/rollouts"
RUN_GENERATED_TOKENS = PREFIX + "run/generated_tokens"
RUN_SECONDS = PREFIX + "run/seconds"
REWARD_MEAN = PREFIX + "run/reward_mean"
TASKSET_MIX = PREFIX + "taskset_mix"
LEVEL_MIX = PREFIX + "level_mix"
PREDICTED_PASS_RATE = PREFIX + "predicted_pass_rate"
_SAMPLE = PREFIX + "sample/"
KEPT_GROUPS = _SAMPLE + "kept_groups"
FILTER_ROUNDS = _SAMPLE + "filter_rounds"
GROUPS_NEEDED = _SAMPLE + "groups_needed"
KEPT_FRACTION = _SAMPLE + "kept_fraction"
MEAN_WEIGHT = _SAMPLE + "mean_weight"
REPLAY_GROUPS = PREFIX + "replay/groups"
REPLAY_RESPONSES = PREFIX + "replay/responses"
_FEEDBACK = PREFIX + "feedback/"
FEEDBACK_TASKS = _FEEDBACK + "tasks"
FEEDBACK_PASS_RATE_MEAN = _FEEDBACK + "pass_rate_mean"
FEEDBACK_PASS_RATE_STD = _FEEDBACK + "pass_rate_std"
FEEDBACK_PASS_RATE_MIN = _FEEDBACK + "pass_rate_min"
FEEDBACK_PASS_RATE_MAX = _FEEDBACK + "pass_rate_max"
FEEDBACK_ZERO_FRACTION = _FEEDBACK + "zero_fraction"
FEEDBACK_ONE_FRACTION = _FEEDBACK + "one_fraction"
EVAL_ACCURACY = PREFIX + "eval/accuracy"
VAL_ACCURACY = PREFIX + "val/accuracy"

#: What a trainer's ``evaluate`` returns (the trainer contract's name): the **test** split, what runs are judged on
#: (``flexkit compare``, plots, the run summary); the run records it as :data:`EVAL_ACCURACY`.
TRAINER_EVAL_ACCURACY = "eval_accuracy"
#: What a trainer's ``validate`` returns: the **validation** split, the only evaluation selectors steer on (a
#: ``frontier`` guard); the run records it as :data:`VAL_ACCURACY`.
TRAINER_VAL_ACCURACY = "val_accuracy"
#: The prefix every name ``validate`` returns carries (``val_accuracy``, ``val_accuracy/<level>``, ``val_loss``).
TRAINER_VAL_PREFIX = "val_"


def mix_share(taskset: str) -> str:
    """``flexkit/mix/<taskset>``."""
    return f"{PREFIX}mix/{taskset}"


def group_mix_share(taskset: str, group: str) -> str:
    """``flexkit/group_mix/<taskset>/<group>``."""
    return f"{PREFIX}group_mix/{taskset}/{group}"


def sample_metric(name: str) -> str:
    """The sample stage's metric ``name`` (``kept_groups``, ``sample/kept_groups`` or already ``flexkit/sample/...``)
    as ``flexkit/sample/<name>``."""
    if name.startswith(_SAMPLE):
        return name
    return _SAMPLE + name.removeprefix("sample/")


def proportion(taskset_id: int | str) -> str:
    """``flexkit/sample/proportion/<id>``."""
    return f"{_SAMPLE}proportion/{taskset_id}"


def selector_metric(taskset: str, key: str) -> str:
    """``flexkit/selector/<taskset>/<key>``."""
    return f"{PREFIX}selector/{taskset}/{key}"


def eval_level(level: str) -> str:
    """``flexkit/eval/accuracy/<level>``."""
    return f"{EVAL_ACCURACY}/{level}"


def val_level(level: str) -> str:
    """``flexkit/val/accuracy/<level>``."""
    return f"{VAL_ACCURACY}/{level}"


@attrs.frozen
class Metric:
    """One row of the vocabulary: a name (``<...>`` marks a part filled in), where it is written, what it holds."""

    name: str
    #: Written to ``flexkit run``'s ``metrics.jsonl``.
    record: bool
    #: Returned by :func:`flexkit.pipeline_metrics` (the host adapters; ``flexkit run``'s trackers).
    host: bool
    doc: str


#: The vocabulary, in the order of the docs' table. ``flexkit run``'s trackers log the host metrics, the records'
#: numbers and :data:`REWARD_MEAN`.
METRICS: tuple[Metric, ...] = (
    Metric(SCHEDULER_STEP, False, True, "batches the scheduler has handed out (a refill round reads one)"),
    Metric(EPOCH, False, True, "the scheduler's current epoch"),
    Metric(mix_share("<taskset>"), False, True, "share of the latest batch drawn from each taskset (several tasksets)"),
    Metric(group_mix_share("<taskset>", "<group>"), False, True,
           "share of the step's fed-back tasks of a taskset in each group of its grouping column (the selector's "
           "`feature_keys`, cut into its `bins`; else the taskset's first categorical column), as `flexkit preview` "
           "counts them"),
    Metric(TASKSET_MIX, True, False, "tasks drawn this step per taskset name, every round (a table)"),
    Metric(LEVEL_MIX, True, False, "tasks drawn this step per integer `level` of their rows (a table)"),
    Metric(PREDICTED_PASS_RATE, True, False,
           "histograms of the selectors' predicted pass rates before the step: `selected` (the drawn tasks) and "
           "`pool`"),
    Metric(ROLLOUTS, False, True, "responses generated this step, every round (when the adapter knows it)"),
    Metric(RUN_ROLLOUTS, True, True,
           "responses generated so far in the run, refills included (host adapters: the total they counted, "
           "checkpointed with the curriculum)"),
    Metric(RUN_GENERATED_TOKENS, True, False, "response tokens generated so far in the run (`response_mask` summed)"),
    Metric(RUN_SECONDS, True, False,
           "wall seconds of the run so far, when the record is written: from the start of its step loop (trainer "
           "setup excluded; evaluations and checkpoints included); a resumed run goes on from its last kept record"),
    Metric(KEPT_GROUPS, True, True,
           "groups the update trains on this step: every round, after the `surplus` rule (all groups without a "
           "select stage)"),
    Metric(FILTER_ROUNDS, True, True, "generation rounds this step (1 without `[sample.refill]`)"),
    Metric(GROUPS_NEEDED, True, True, "group filters: groups the step still lacked after its last round"),
    Metric(KEPT_FRACTION, True, True,
           "select: responses trained on / responses generated this step; weights: share of responses with a "
           "positive weight"),
    Metric(MEAN_WEIGHT, True, True, "the sample stage's mean weight per response (its latest call)"),
    Metric(REPLAY_GROUPS, True, False, "`[replay]`: stored groups this step's update trained on again"),
    Metric(REPLAY_RESPONSES, True, False, "`[replay]`: their responses (not counted as rollouts)"),
    Metric(proportion("<id>"), True, True, "a mix actuator's latest share of each taskset id"),
    Metric(sample_metric("<name>"), True, True, "a plugin actuator's own metrics (`metrics()`)"),
    Metric(FEEDBACK_TASKS, False, True, "tasks in this step's feedback"),
    Metric(FEEDBACK_PASS_RATE_MEAN, True, True, "mean pass rate fed back this step (the drawn tasks' outcomes)"),
    Metric(FEEDBACK_PASS_RATE_STD, False, True, "their standard deviation"),
    Metric(FEEDBACK_PASS_RATE_MIN, False, True, "their minimum"),
    Metric(FEEDBACK_PASS_RATE_MAX, False, True, "their maximum"),
    Metric(FEEDBACK_ZERO_FRACTION, False, True, "share of fed-back tasks never solved (no learning signal)"),
    Metric(FEEDBACK_ONE_FRACTION, False, True, "share of fed-back tasks always solved (no learning signal)"),
    Metric(selector_metric("<taskset>", "<key>"), True, True,
           "the selector's `summary()` (`frontier`: per group `pass_rate/<group>`, `informative/<group>`, "
           "`predicted/<group>` with `text_key`, `floor_share/<group>` with `retain`, `guard_share/<group>` with "
           "`guard_metric`), after the step's "
           "feedback (and evaluation); hosts also get `predicted_pass_rate_mean` for selectors that keep an estimate "
           "per task (tasksets up to 10⁶ tasks); on evaluation steps, where the trainer gives the rows it validated, "
           "how well the selector predicts them (`Selector.validation_calibration`; `frontier` with `text_key`: "
           "per group `val_predicted/<group>`, `val_observed/<group>`, `val_rows/<group>`, and `val_rows`, "
           "`val_rank_correlation`)"),
    Metric(EVAL_ACCURACY, True, False,
           "held-out test accuracy (the trainer's `eval_accuracy`), on evaluation steps: what runs are judged on"),
    Metric(eval_level("<level>"), True, False,
           "held-out test accuracy per level (the trainer's `eval_accuracy/<level>`)"),
    Metric(VAL_ACCURACY, True, False,
           "validation accuracy (the trainer's `val_accuracy`), on evaluation steps: what selectors steer on, never "
           "what runs are judged on"),
    Metric(val_level("<level>"), True, False, "validation accuracy per level (the trainer's `val_accuracy/<level>`)"),
    Metric(REWARD_MEAN, False, False, "trackers only: the trainer's `reward_mean` of the step"),
)


def record_evaluation(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """A trainer's ``evaluate`` output under the record's names: ``eval_accuracy[/<level>]`` becomes
    ``flexkit/eval/accuracy[/<level>]``; other keys are the trainer's own and keep their names."""
    return {_eval_name(key): value for key, value in evaluation.items()}


def plain_evaluation(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """A held-out evaluation (metric name to value) as the selectors read it, whoever passes it (``flexkit run``,
    a host adapter, an integration's own loop): each number a Python number
    (:func:`~flexkit._state_problems.plain_number`: numpy scalars and 0-d numpy arrays and torch tensors
    included). ``None`` (no value) and bools (not numbers) are kept as they are; a value that is not a number
    (text, a list, an array of several values) is kept too, with a warning naming it: no selector reads a number
    from it."""
    out: dict[str, Any] = {}
    odd: list[str] = []
    for key, value in evaluation.items():
        number = plain_number(value)
        if number is NOT_A_NUMBER:
            odd.append(f"{key!r} ({type(value).__name__} {short(value)})")
            number = value
        out[key] = number
    if odd:
        structlog.get_logger("flexkit.scheduler").warning(
            "evaluation values that are not numbers reach no selector as numbers: " + ", ".join(odd[:10])
            + (f", ... ({len(odd)} in all)" if len(odd) > 10 else "")
            + "; pass int, float, a numpy scalar, or a 0-d array or tensor")
    return out


def record_validation(validation: Mapping[str, Any]) -> dict[str, Any]:
    """A trainer's ``validate`` output under the record's names: ``val_accuracy[/<level>]`` becomes
    ``flexkit/val/accuracy[/<level>]``; other keys (``val_...``) are the trainer's own and keep their names."""
    return {_val_name(key): value for key, value in validation.items()}


def evaluation_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation in ``record`` (current names) as the trainer returned it: ``flexkit/eval/accuracy[/<level>]``
    back to ``eval_accuracy[/<level>]``, with the trainer's other ``eval_`` keys."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == EVAL_ACCURACY or key.startswith(EVAL_ACCURACY + "/"):
            out[TRAINER_EVAL_ACCURACY + key.removeprefix(EVAL_ACCURACY)] = value
        elif key.startswith("eval_"):
            out[key] = value
    return out


def _eval_name(key: str) -> str:
    if key == TRAINER_EVAL_ACCURACY or key.startswith(TRAINER_EVAL_ACCURACY + "/"):
        return EVAL_ACCURACY + key.removeprefix(TRAINER_EVAL_ACCURACY)
    return key


def _val_name(key: str) -> str:
    if key == TRAINER_VAL_ACCURACY or key.startswith(TRAINER_VAL_ACCURACY + "/"):
        return VAL_ACCURACY + key.removeprefix(TRAINER_VAL_ACCURACY)
    return key


#: The names records had before the vocabulary was unified, and their names now.
LEGACY_NAMES: dict[str, str] = {
    "rollouts": RUN_ROLLOUTS, "generated_tokens": RUN_GENERATED_TOKENS, "taskset_mix": TASKSET_MIX,
    "level_mix": LEVEL_MIX, "predicted_pass_rate": PREDICTED_PASS_RATE, "pass_rate_mean": FEEDBACK_PASS_RATE_MEAN,
    "kept_groups": KEPT_GROUPS, "filter_rounds": FILTER_ROUNDS, "kept_fraction": KEPT_FRACTION,
}


def upgrade_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` under the current names. A record that holds a ``flexkit/`` name is current and comes back as it
    is; an older one gets its old names renamed (``rollouts``, ``kept_groups``, ``eval_accuracy[/<level>]``,
    ``sample/<name>``, ...: :data:`LEGACY_NAMES`). Old records wrote the step's ``kept_groups``,
    ``filter_rounds`` and ``kept_fraction`` beside the sample stage's ``sample/...`` values of the last refill
    round: the step's values are kept."""
    if any(key.startswith(PREFIX) for key in record):
        return dict(record)
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key.startswith("sample/"):
            out.setdefault(sample_metric(key), value)
        elif key in LEGACY_NAMES:
            out[LEGACY_NAMES[key]] = value
        else:
            out[_eval_name(key)] = value
    return out
