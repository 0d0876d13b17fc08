"""A pipeline checkpoint's state: its top-level layout, the walk over the owners of its parts, and their names.

A checkpoint's state is ``{"pipeline": Pipeline.state_dict(), "extra": {...}}`` (``extra``: the caller's, e.g.
``flexkit run``'s trainer state under ``trainer`` and its counters under ``runner``). Each owner checks its own
slice (:meth:`Pipeline.check_state <flexkit.Pipeline.check_state>`, which hands the scheduler's and
the
sample stage's slices to them, and so on down: :mod:`flexkit._state_problems`); :func:`checkpoint_problems`
collects them. The owners name their children's keys (``state_children``); :func:`state_parts` walks them to
say which component a key path belongs to (:func:`component_of`) and which one refuses its state
(:func:`refusing_component`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from flexkit._state_problems import add_problem
from flexkit.errors import KeyPath
from flexkit.pipeline._checkpoint import META_KEY
from flexkit.pipeline._view import PipelineView
from flexkit.sample._stage import SampleStage
from flexkit.scheduler._scheduler import TasksetScheduler

__all__ = ["EXTRA_KEY", "PIPELINE_KEY", "TRAINER_KEY", "StatePart", "checkpoint_problems", "component_of",
           "refusing_component", "state_parts"]

#: The checkpoint's key of :meth:`Pipeline.state_dict <flexkit.Pipeline.state_dict>`.
PIPELINE_KEY = "pipeline"
#: The checkpoint's key of the caller's extra state.
EXTRA_KEY = "extra"
#: The key of the trainer's state in the extra state (``flexkit run``, ``flexkit annotate --checkpoint``).
TRAINER_KEY = "trainer"


@attrs.frozen
class StatePart:
    """A part of a pipeline checkpoint: its key path from the checkpoint's root, how messages name it, and the
    component that checks it when it loads it (None for an owner whose ``check_state`` checks it)."""

    path: KeyPath
    who: str
    component: Any = None


def state_parts(pipe: PipelineView) -> list[StatePart]:
    """The owners and components of ``pipe``'s checkpointed state, each with its key path; the scheduler first."""
    cfg, parts = pipe.config, list[StatePart]()
    for key, owner in pipe.state_children():
        root = (PIPELINE_KEY, *key)
        if isinstance(owner, TasksetScheduler):
            parts.append(StatePart(root, "the taskset scheduler"))
            for i, ((sub, selector), ts) in enumerate(zip(owner.state_children(), cfg.tasksets, strict=True)):
                parts.append(StatePart((*root, *sub), f"selector {ts.selector.type!r} of taskset {ts.name!r} "
                                                      f"(tasksets[{i}].selector)", selector))
        elif isinstance(owner, SampleStage) and cfg.sample is not None:
            parts.append(StatePart(root, "the sample stage"))
            for sub, component in owner.state_children():
                kind, spec = ("scorer", cfg.sample.scorer) if component is owner.scorer else \
                    ("actuator", cfg.sample.actuator)
                parts.append(StatePart((*root, *sub), f"{kind} {spec.type!r} (sample.{kind})", component))
    if cfg.trainer is not None:
        parts.append(StatePart((EXTRA_KEY, TRAINER_KEY), f"trainer {cfg.trainer.type!r}"))
    return parts


def component_of(pipe: PipelineView, path: KeyPath) -> tuple[str, KeyPath]:
    """The component of ``pipe`` whose state holds key path ``path`` of a checkpoint (``{"pipeline": ...,
    "extra": ...}``), and the rest of the path inside that component's state."""
    path = tuple(path)
    found = [part for part in state_parts(pipe) if path[:len(part.path)] == part.path]
    if found:
        part = max(found, key=lambda p: len(p.path))
        return part.who, path[len(part.path):]
    if path[:1] == (EXTRA_KEY,) and len(path) > 1:
        return f"the extra state {path[1]!r}", path[2:]
    if path[:1] == (META_KEY,):
        return "the checkpoint's fingerprint", path[1:]
    return "the pipeline", path


def checkpoint_problems(pipe: PipelineView, state: Mapping[str, Any]) -> list[str]:
    """The problems of a loaded checkpoint state for ``pipe``, each as ``key.path: what``: the pipeline's (each
    owner checks its own slice) and the extra state's type."""
    problems: list[str] = []
    pipe.check_state(state[PIPELINE_KEY], (PIPELINE_KEY,), problems)
    extra = state.get(EXTRA_KEY, {})
    if not isinstance(extra, Mapping):
        add_problem(problems, (EXTRA_KEY,), f"expected a table, got {type(extra).__name__}")
    return problems


def refusing_component(pipe: PipelineView, state: Mapping[str, Any]) -> str:
    """The component whose part of a pipeline ``state`` (checked) fails to load: each is tried alone, and
    restored after; the scheduler when none does alone."""
    parts = state_parts(pipe)
    for part in parts:
        if part.component is None or part.path[0] != PIPELINE_KEY:
            continue
        value: Any = state
        for key in part.path[1:]:
            value = value[key]
        before = part.component.state_dict()
        try:
            part.component.load_state_dict(value)
        except Exception:
            return part.who
        finally:
            part.component.load_state_dict(before)
    return parts[0].who
