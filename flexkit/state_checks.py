"""Checks of a loaded pipeline checkpoint before it is applied, and names for the parts of a pipeline state.

:meth:`Pipeline.load_checkpoint <flexkit.pipeline.Pipeline.load_checkpoint>` verifies the checksums (in
:mod:`flexkit.checkpoint`) and the fingerprint, then runs :func:`pipeline_state_problems`: the scheduler's step,
weights, mix, pending batch and the presence of every selector's and the sample stage's state are checked here,
so that a malformed value is refused at load with its key path instead of breaking a later read. Each component
checks its own state when it loads it; :func:`component_of` names the component a key path belongs to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from flexkit.errors import KeyPath, format_key_path
from flexkit.scheduler import STATE_VERSION

if TYPE_CHECKING:
    from flexkit.pipeline import Pipeline
    from flexkit.scheduler import TasksetScheduler

__all__ = ["component_of", "differences", "is_count", "is_number", "pipeline_state_problems"]


def is_count(value: Any) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a non-negative int (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and bool(value >= 0)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def component_of(pipe: Pipeline, path: KeyPath) -> tuple[str, KeyPath]:
    """The component of ``pipe`` whose state holds key path ``path`` of a checkpoint (``{"pipeline": ...,
    "extra": ...}``), and the rest of the path inside that component's state."""
    cfg = pipe.config
    head, rest = tuple(path[:4]), tuple(path[4:])
    if head[:3] == ("pipeline", "scheduler", "selectors") and len(head) == 4 and isinstance(head[3], int) \
            and 0 <= head[3] < len(cfg.tasksets):
        ts = cfg.tasksets[head[3]]
        return f"selector {ts.selector.type!r} of taskset {ts.name!r} (tasksets[{head[3]}].selector)", rest
    if head[:2] == ("pipeline", "scheduler"):
        return "the taskset scheduler", tuple(path[2:])
    if head[:2] == ("pipeline", "sample") and cfg.sample is not None:
        part = head[2] if len(head) > 2 else None
        if part == "scorer":
            return f"scorer {cfg.sample.scorer.type!r} (sample.scorer)", tuple(path[3:])
        if part == "actuator":
            return f"actuator {cfg.sample.actuator.type!r} (sample.actuator)", tuple(path[3:])
        return "the sample stage", tuple(path[2:])
    if head[:2] == ("extra", "trainer") and cfg.trainer is not None:
        return f"trainer {cfg.trainer.type!r}", tuple(path[2:])
    if head[:1] == ("extra",) and len(head) > 1:
        return f"the extra state {head[1]!r}", tuple(path[2:])
    if head[:1] == ("<meta>",):
        return "the checkpoint's fingerprint", tuple(path[1:])
    return "the pipeline", tuple(path)


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Readable differences between two fingerprints (``tasksets[1].size: 100 in the checkpoint, 120 now``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    if old != new:
        return [f"{path or 'pipeline'}: {old!r} in the checkpoint, {new!r} now"]
    return []


def fingerprint_hints(diffs: Sequence[str]) -> list[str]:
    """What to do about fingerprint differences that users make on purpose (weights, edited taskset files)."""
    hints = []
    if any(".weight:" in d for d in diffs):
        hints.append("taskset weights cannot change within a run (each epoch's plan is drawn from them): put the "
                     "checkpoint's weights back to resume, or start a new run with the new weights")
    if any(".content:" in d for d in diffs):
        hints.append("a taskset's rows changed since the checkpoint, so its selector's state (kept per task index) "
                     "would describe other tasks: restore the taskset the run started with, or start a new run")
    if any(d.startswith("sample.refill") for d in diffs):
        hints.append("[sample.refill] (dynamic sampling) cannot be added, removed or changed within a run (the "
                     "checkpointed steps were drawn and trained with the checkpoint's setting): put it back as it "
                     "was to resume, or start a new run")
    if any(d.startswith("feedback") for d in diffs):
        hints.append("the [feedback] table cannot change within a run (the selectors' state was learnt from its "
                     "values): put it back as it was to resume, or start a new run")
    return hints


# -- the scheduler and the sample stage --------------------------------------------------------------------------


def pipeline_state_problems(pipe: Pipeline, state: Any) -> list[str]:
    """Problems of a :meth:`Pipeline.state_dict`-shaped ``state`` for ``pipe``, each as ``key.path: what``."""
    if not isinstance(state, Mapping):
        return [f"pipeline: expected a table, got {type(state).__name__}"]
    problems = []
    sched = state.get("scheduler")
    if not isinstance(sched, Mapping):
        problems.append("pipeline.scheduler: missing, or not a table")
    else:
        problems += scheduler_state_problems(pipe.scheduler, sched, ("pipeline", "scheduler"))
    if pipe.has_sample_stage:
        problems += _sample_problems(pipe, state.get("sample"), ("pipeline", "sample"))
    return problems


def _at(path: KeyPath, message: str) -> str:
    return f"{format_key_path(path)}: {message}"


def scheduler_state_problems(sched: TasksetScheduler, state: Mapping[str, Any], path: KeyPath) -> list[str]:
    """Problems of a scheduler state for ``sched``: version, step, taskset list, weights, mix, selectors and the
    prefetched batch."""
    out: list[str] = []
    n = len(sched.entries)
    if state.get("version") != STATE_VERSION:
        out.append(_at((*path, "version"), f"expected {STATE_VERSION}, got {_short(state.get('version'))}"))
    step = state.get("step")
    if not is_count(step):
        out.append(_at((*path, "step"), f"expected a step number >= 0, got {_short(step)}"))
        step = None
    mine = [{"name": e.name, "size": e.size} for e in sched.entries]
    theirs = state.get("tasksets")
    if not isinstance(theirs, list) or [dict(t) if isinstance(t, Mapping) else t for t in theirs] != mine:
        out.append(_at((*path, "tasksets"), f"{_short(theirs)} does not match this pipeline's {_short(mine)}"))
    weights = state.get("weights")
    expected = None if sched.entries[0].weight is None else [
        float(e.weight) for e in sched.entries  # type: ignore[arg-type]  # all tasksets have a weight, or none
    ]
    if weights != expected:
        out.append(_at((*path, "weights"), f"{_short(weights)} does not match the pipeline's weights "
                                           f"{_short(expected)}"))
    out += _mix_problems(state.get("mix"), n, (*path, "mix"))
    mix_from = state.get("mix_from", 0)
    if not is_count(mix_from) or (step is not None and mix_from > step + 1):
        out.append(_at((*path, "mix_from"), f"expected a step number from 0 to step + 1, got {_short(mix_from)}"))
    selectors = state.get("selectors")
    if not isinstance(selectors, list) or len(selectors) != n:
        out.append(_at((*path, "selectors"), f"expected one state per taskset ({n}), got {_short(selectors)}"))
    else:
        out += [_at((*path, "selectors", i), f"expected a table, got {type(s).__name__}")
                for i, s in enumerate(selectors) if not isinstance(s, Mapping)]
    out += _pending_problems(sched, state.get("pending"), step, (*path, "pending"))
    return out


def _mix_problems(mix: Any, n: int, path: KeyPath) -> list[str]:
    if mix is None:
        return []
    if not isinstance(mix, list) or len(mix) != n or not all(is_number(v) and v >= 0 for v in mix):
        return [_at(path, f"expected {n} finite proportions >= 0, got {_short(mix)}")]
    if not math.isclose(math.fsum(mix), 1.0, rel_tol=0.0, abs_tol=1e-9):
        return [_at(path, f"proportions must sum to 1, got a sum of {math.fsum(mix)!r}")]
    return []


def _pending_problems(
    sched: TasksetScheduler, pending: Any, step: int | np.integer[Any] | None, path: KeyPath
) -> list[str]:
    if pending is None:
        return []
    if not isinstance(pending, Mapping):
        return [_at(path, f"expected a table or null, got {type(pending).__name__}")]
    out = []
    if step is not None and pending.get("step") != step:
        got = _short(pending.get("step"))
        out.append(_at((*path, "step"), f"the prefetched batch must be step {step}'s, got {got}"))
    indices = pending.get("indices")
    if not isinstance(indices, list) or len(indices) != len(sched.entries):
        return [*out, _at((*path, "indices"), f"expected one index list per taskset, got {_short(indices)}")]
    for i, (entry, part) in enumerate(zip(sched.entries, indices, strict=True)):
        arr = np.asarray(part) if isinstance(part, (list, np.ndarray)) else None
        ok = arr is not None and arr.ndim == 1 and (arr.size == 0 or (
            np.issubdtype(arr.dtype, np.integer) and int(arr.min()) >= 0 and int(arr.max()) < entry.size))
        if not ok:
            out.append(_at((*path, "indices", i), f"expected task indices of taskset {entry.name!r} (0 to "
                                                   f"{entry.size - 1}), got {_short(part)}"))
    return out


def _sample_problems(pipe: Pipeline, state: Any, path: KeyPath) -> list[str]:
    if not isinstance(state, Mapping):
        return [_at(path, "missing, or not a table (the pipeline has a [sample] stage)")]
    out = [_at((*path, part), "missing, or not a table") for part in ("scorer", "actuator")
           if not isinstance(state.get(part), Mapping)]
    props = state.get("proportions")
    n = len(pipe.config.tasksets)
    if props is not None and (not isinstance(props, list) or not all(
            isinstance(p, list) and len(p) == 2 and is_count(p[0]) and p[0] < n and is_number(p[1]) and p[1] >= 0
            for p in props)):
        out.append(_at((*path, "proportions"), f"expected [taskset id, proportion >= 0] pairs, got {_short(props)}"))
    return out
