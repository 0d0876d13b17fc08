"""What ``flexkit compare`` reads from a finished run's ``metrics.jsonl``: its evaluation curves (overall and per
level) and what it spent (steps, optimizer steps, trained samples, rollouts; by each evaluation, with the wall
seconds). Records are read under the current
names (:mod:`flexkit._metric_names`), so a run folder written before them reads the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from flexkit._metric_names import (
    EVAL_ACCURACY,
    KEPT_FRACTION,
    LEVEL_MIX,
    REPLAY_RESPONSES,
    RUN_ROLLOUTS,
    RUN_SECONDS,
    TRAINER_EVAL_ACCURACY,
    record_evaluation,
)
from flexkit._state_problems import is_number
from flexkit.compare._results import Spent

__all__ = ["RunRecords", "read_run_records"]

#: The key prefix of per-level held-out accuracy in the comparison's results (the trainer's names, as in its
#: ``final`` evaluation); records hold them as ``flexkit/eval/accuracy/<level>``.
LEVEL_PREFIX = TRAINER_EVAL_ACCURACY + "/"
_RECORD_LEVEL_PREFIX = EVAL_ACCURACY + "/"


@attrs.define
class RunRecords:
    """Curves and counts of one run (see :class:`~flexkit.compare._results.RunOutcome` for their meaning)."""

    curve: list[tuple[int, float]] = attrs.field(factory=list)
    rollout_curve: list[tuple[int, float]] = attrs.field(factory=list)
    level_curves: dict[str, list[tuple[int, float]]] = attrs.field(factory=dict)
    spent_curve: list[Spent] = attrs.field(factory=list)
    steps: int = 0
    optimizer_steps: int = 0
    trained_samples: int = 0
    level_draws: dict[str, int] = attrs.field(factory=dict)


def read_run_records(run_dir: Path, first: dict[str, float], rollouts_per_step: int) -> RunRecords:
    """Read ``run_dir/metrics.jsonl``.

    Curves: ``(steps done, accuracy)`` and ``(rollouts so far, accuracy)`` of every evaluation record
    (``flexkit/eval/accuracy``); steps done is ``step + 1``, so the ``"step": -1`` record is the evaluation before
    training (step 0). A run folder from before that record existed gets ``first`` (the runner's first
    evaluation, as the trainer returned it) as its step-0 point. Rollouts are the run's own cumulative count
    (``flexkit/run/rollouts``; ``steps × rollouts_per_step`` for records without one). Level curves are keyed
    ``eval_accuracy/<level>``, as the final evaluation. ``spent_curve`` holds, per evaluation, the trained samples
    and optimizer steps counted up to it (the evaluation record's own step included) and the record's wall
    seconds (``flexkit/run/seconds``; ``None`` without one, and for the ``first`` point).

    Counts, from the training records (``step >= 0``): a step trains on ``flexkit/sample/kept_fraction`` × the
    responses it generated (all of them without one: no filter), rounded, plus the responses ``[replay]`` trained on
    again (``flexkit/replay/responses``); it is an optimizer step when that is
    more than zero (a dynamic-sampling step that kept nothing makes no update). Draws per level: the tasks drawn
    per ``level`` of their rows (``flexkit/level_mix``), summed over the steps (empty when no step logged one).
    """
    from flexkit.run._folder import INITIAL_STEP, METRICS_FILE, read_metrics

    records = [record for _line, record in read_metrics(run_dir / METRICS_FILE)]
    out = RunRecords()
    if TRAINER_EVAL_ACCURACY in first and not any(r["step"] == INITIAL_STEP for r in records):
        _add_eval(out, 0, 0, record_evaluation(first), Spent())
    previous = 0
    for record in records:
        step = int(record["step"])
        rollouts = record.get(RUN_ROLLOUTS)
        spent = int(rollouts) if rollouts is not None else (step + 1) * rollouts_per_step
        if step >= 0:
            trained = _trained(record, spent - previous)
            out.steps = max(out.steps, step + 1)
            out.trained_samples += trained
            out.optimizer_steps += trained > 0
            previous = spent
            _add_draws(out.level_draws, record.get(LEVEL_MIX))
        if record.get(EVAL_ACCURACY) is not None:
            clock: Any = record.get(RUN_SECONDS)
            _add_eval(out, step + 1, spent, record,
                      Spent(out.trained_samples, out.optimizer_steps, float(clock) if is_number(clock) else None))
    return out


def _trained(record: dict[str, Any], responses: int) -> int:
    """Samples of a step's ``responses`` that entered the loss, and the responses ``[replay]`` trained on again."""
    kept = record.get(KEPT_FRACTION)
    replayed = record.get(REPLAY_RESPONSES)
    again = int(replayed) if isinstance(replayed, int) and replayed > 0 else 0
    if kept is None:
        return responses + again
    return round(float(kept) * responses) + again


def _add_draws(draws: dict[str, int], mix: Any) -> None:
    """Add one step's tasks drawn per level (a ``{level: count}`` table; anything else, and any count that is not
    a finite number of at least 0, is ignored)."""
    if not isinstance(mix, dict):
        return
    for level, count in mix.items():
        if is_number(count) and count >= 0:
            draws[str(level)] = draws.get(str(level), 0) + int(count)


def _add_eval(out: RunRecords, steps: int, rollouts: int, record: dict[str, Any], spent: Spent) -> None:
    """Add one evaluation of a record (overall and per level) and what the run had ``spent`` by it to the curves;
    values that are not finite numbers (a trainer's ``None`` or NaN) are no points of them."""
    raw = record.get(EVAL_ACCURACY)
    if not is_number(raw):
        return
    acc = float(raw)  # type: ignore[arg-type]  # is_number: a finite int or float
    out.curve.append((steps, acc))
    out.rollout_curve.append((rollouts, acc))
    out.spent_curve.append(spent)
    for key, value in record.items():
        if key.startswith(_RECORD_LEVEL_PREFIX) and is_number(value):
            level = LEVEL_PREFIX + key.removeprefix(_RECORD_LEVEL_PREFIX)
            out.level_curves.setdefault(level, []).append((rollouts, float(value)))
