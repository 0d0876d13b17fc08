"""What a finished ``flexkit run`` reports: the :class:`RunResult`, why the run stopped (:func:`stop_reason`) and
the before/after summary printed at the end (:func:`summary_lines`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs

from flexkit._metric_names import RUN_GENERATED_TOKENS, RUN_ROLLOUTS

__all__ = ["ROLLOUT_BUDGET", "STEP_LIMIT", "RunResult", "stop_reason", "summary_lines"]


@attrs.define
class RunResult:
    """What a run produced: its folder, the number of steps done, and the first and last evaluations."""

    run_dir: Path
    steps: int
    first_eval: dict[str, float]
    last_eval: dict[str, float]
    last_metrics: dict[str, Any]
    #: Why the run stopped: :data:`STEP_LIMIT` (all of ``[run] total_steps`` / ``total_epochs`` done) or
    #: :data:`ROLLOUT_BUDGET` (``[run] max_rollouts`` spent first).
    stop_reason: str = ""
    total_steps: int = 0
    max_rollouts: int | None = None


#: :attr:`RunResult.stop_reason` values.
STEP_LIMIT = "step limit"
ROLLOUT_BUDGET = "rollout budget"


def stop_reason(steps: int, total_steps: int, rollouts: int | None, max_rollouts: int | None) -> str:
    """Why a run that did ``steps`` of ``total_steps`` and generated ``rollouts`` stopped."""
    if steps < total_steps and max_rollouts is not None and rollouts is not None and rollouts >= max_rollouts:
        return ROLLOUT_BUDGET
    return STEP_LIMIT


#: A group name that is a number (a level), as the hosts name groups (:func:`flexkit.host.group_label`).
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _group_label(group: str) -> str:
    """A group's row in the summary: ``level 3`` for a number (a level), the value itself for a label (``gsm8k``)."""
    return f"level {group}" if _NUMBER.fullmatch(group) else group


def summary_lines(result: RunResult) -> list[str]:
    """The before/after evaluation table printed at the end of a run."""
    first, last = result.first_eval, result.last_eval
    keys = [k for k in last if k.startswith("eval_accuracy/")]
    lines = [f"run folder: {result.run_dir}", ""]
    if first.get("eval_accuracy") is None or last.get("eval_accuracy") is None:
        lines.append("eval accuracy: not evaluated ([run] eval_every = 0)")
    else:
        lines.append(f"{'eval accuracy':<22}{'before':>8}{'after':>8}{'change':>8}")
    for key in ["eval_accuracy", *keys]:
        label = "all levels" if key == "eval_accuracy" else _group_label(key.split("/", 1)[1])
        before, after = first.get(key), last.get(key)
        if before is None or after is None:
            continue
        lines.append(f"{label:<22}{before:>8.3f}{after:>8.3f}{after - before:>+8.3f}")
    spent = result.last_metrics.get(RUN_ROLLOUTS)
    if spent is not None:
        tokens = result.last_metrics.get(RUN_GENERATED_TOKENS, 0)
        lines += ["", f"rollouts generated: {spent:,} ({tokens:,} tokens)"]
    if result.stop_reason == ROLLOUT_BUDGET:
        lines.append(f"stopped: rollout budget spent ([run] max_rollouts = {result.max_rollouts:,}) after step "
                     f"{result.steps} of {result.total_steps}")
    elif result.stop_reason == STEP_LIMIT and result.total_steps:
        lines.append(f"stopped: step limit reached ({result.steps} of {result.total_steps} steps, [run] "
                     "total_steps / total_epochs)")
    return lines
