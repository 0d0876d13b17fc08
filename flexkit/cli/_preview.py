"""``flexkit preview``: what a pipeline's scheduler would draw, step by step, without a trainer.

Each step is summarised by taskset, by ``level`` (when the rows carry an integer one), by each taskset's grouping
column (:class:`TasksetGrouping`: the ``feature_keys`` of a selector that groups tasks, a string label or a number
column cut into its ``bins``; else the taskset's first categorical column) and, for ``--feedback FIELD``, by bins
of that field's values; the drawn indices follow. With ``--feedback`` the selectors learn
from simulated rewards. A pipeline with ``[sample.refill]`` (dynamic sampling) is previewed with its refill
rounds: each task's group of responses is drawn as Bernoulli outcomes of its simulated reward (``[trainer]
group_size`` responses, else :data:`DEFAULT_GROUP_SIZE`), the pipeline's own group filter drops the groups it
drops, and the scheduler is read again until the kept groups fill the batch, as ``flexkit run`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from flexkit.errors import FlexkitError
from flexkit.pipeline._grouping import TasksetGrouping
from flexkit.plugins._contract import group_size_of
from flexkit.run._estimates import level_mix
from flexkit.tasksets._base import finite_number

#: Responses per task when the pipeline names no ``[trainer] group_size``.
DEFAULT_GROUP_SIZE = 8
#: Equal-width bins of [0, 1] for a ``--feedback FIELD`` summary.
FIELD_BINS = 4


@attrs.define
class PreviewStep:
    """One previewed step: the tasks drawn (all rounds), per-taskset indices and the summaries."""

    step: int
    epoch: int
    tasksets: dict[str, list[int]]
    levels: dict[str, int] | None
    bins: dict[str, dict[str, int]] | None
    feedback: dict[int, dict[str, list[Any]]] | None
    #: Per taskset: the column(s) its drawn tasks are counted by (``by``) and the count per group (``counts``).
    groups: dict[str, dict[str, Any]] | None = None
    rounds: int | None = None
    kept_groups: int | None = None
    target_groups: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` record (keys with no value left out; ``feedback`` keyed by taskset id as a string)."""
        record: dict[str, Any] = {"step": self.step, "epoch": self.epoch, "tasksets": self.tasksets}
        if self.feedback is not None:
            record["feedback"] = {str(k): v for k, v in self.feedback.items()}
        optional = {"levels": self.levels, "groups": self.groups, "bins": self.bins, "rounds": self.rounds,
                    "kept_groups": self.kept_groups, "target_groups": self.target_groups}
        record.update({key: value for key, value in optional.items() if value is not None})
        return record

    def lines(self) -> list[str]:
        """The text display: a header with the taskset mix, the summaries, then the indices."""
        mix = ", ".join(f"{name}: {len(ix)}" for name, ix in self.tasksets.items())
        out = [f"step {self.step} (epoch {self.epoch}) [{mix}]"]
        groups = self.groups or {}
        if self.levels and not any(part["by"] == "level" for part in groups.values()):
            out.append("  by level: " + ", ".join(f"{k}: {v}" for k, v in self.levels.items()))
        for name, part in groups.items():
            where = f"{name} " if len(self.tasksets) > 1 else ""
            out.append(f"  {where}by {part['by']}: " + ", ".join(f"{k}: {v}" for k, v in part["counts"].items()))
        for field, counts in (self.bins or {}).items():
            out.append(f"  by {field}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
        if self.rounds is not None:
            out.append(f"  refill: {self.rounds} round{'s' if self.rounds != 1 else ''}, kept {self.kept_groups} of "
                       f"{self.target_groups} groups")
        out += [f"  {name}: {indices}" for name, indices in self.tasksets.items() if indices]
        return out


def field_bins(tasks: Sequence[Any], field: str) -> dict[str, int]:
    """How many ``tasks`` have ``field`` in each of :data:`FIELD_BINS` equal bins of [0, 1] (values outside are
    clipped into the end bins); keys like ``"0.25-0.5"``."""
    edges = np.linspace(0.0, 1.0, FIELD_BINS + 1)
    labels = [f"{edges[i]:g}-{edges[i + 1]:g}" for i in range(FIELD_BINS)]
    counts = dict.fromkeys(labels, 0)
    for task in tasks:
        value = finite_number(task.data.get(field) if isinstance(task.data, Mapping) else None)
        if value is not None:
            counts[labels[min(FIELD_BINS - 1, max(0, int(min(max(value, 0.0), 1.0) * FIELD_BINS)))]] += 1
    return counts



def simulated_feedback(
    mode: str, tasks: Sequence[Any], rng: np.random.Generator
) -> dict[int, dict[str, list[Any]]] | None:
    """Per-taskset feedback: none, uniform random rewards, or each task row's numeric ``mode`` field."""
    if mode == "none":
        return None
    values: dict[int, dict[str, list[Any]]] = {}
    for task in tasks:
        part = values.setdefault(task.taskset_id, {"indices": [], "values": []})
        if task.index in part["indices"]:
            continue
        if mode == "random":
            value = float(rng.uniform())
        else:
            raw = task.data.get(mode) if isinstance(task.data, Mapping) else None
            number = finite_number(raw)
            if number is None:
                got = "no such field" if raw is None else f"{raw!r}"[:40]
                raise FlexkitError(f"--feedback {mode}: task {task.index} of {task.taskset!r} has no finite numeric "
                                   f"field {mode!r} ({got})")
            value = number
        part["indices"].append(task.index)
        part["values"].append(value)
    return values


def _summary(sched: Any, step: int, epoch: int, tasks: Sequence[Any], feedback_mode: str,
             values: dict[int, dict[str, list[Any]]] | None,
             groupings: Mapping[str, TasksetGrouping] | None = None) -> PreviewStep:
    by_taskset: dict[str, list[int]] = {name: [] for name in sched.names}
    for task in tasks:
        by_taskset[task.taskset].append(task.index)
    bins = None
    if feedback_mode not in ("none", "random"):
        bins = {feedback_mode: field_bins(tasks, feedback_mode)}
    groups = {name: {"by": grouping.title, "counts": grouping.counts([t for t in tasks if t.taskset == name])}
              for name, grouping in (groupings or {}).items() if by_taskset.get(name)}
    return PreviewStep(step=step, epoch=epoch, tasksets=by_taskset, levels=level_mix(tasks), bins=bins,
                       feedback=values, groups=groups or None)


def preview_steps(pipe: Any, steps: int, feedback: str = "none") -> Iterator[PreviewStep]:
    """Draw up to ``steps`` batches of ``pipe`` and summarise each (see the module docstring). Ends early when
    the pipeline's run ends; the caller closes the scheduler."""
    from flexkit.scheduler.feedback import SELECTOR_METRIC

    sched = pipe.scheduler
    rng = np.random.default_rng(pipe.config.run.seed)
    sample = pipe.config.sample
    refill = sample is not None and sample.refill is not None and feedback != "none"
    groupings = pipe.task_groupings()
    for shown in range(steps):
        if refill:  # a step reads the scheduler once per round: steps are counted here, as flexkit run does
            if shown >= sched.total_steps:
                return
            yield _refill_step(pipe, shown, sched.epoch, feedback, rng, groupings)
            continue
        step, epoch = sched.step, sched.epoch
        try:
            tasks = sched.read()
        except StopIteration:
            return
        values = simulated_feedback(feedback, tasks, rng)
        yield _summary(sched, step, epoch, tasks, feedback, values, groupings)
        if values is not None:
            sched.feedback({SELECTOR_METRIC: values})


def _refill_step(pipe: Any, step: int, epoch: int, feedback: str, rng: np.random.Generator,
                 groupings: Mapping[str, TasksetGrouping]) -> PreviewStep:
    """One dynamic-sampling step with Bernoulli groups of each task's simulated reward."""
    from flexkit.run._dynamic_sampling import fill_batch

    trainer = pipe.config.trainer
    group = int(group_size_of(trainer.config if trainer is not None else None) or DEFAULT_GROUP_SIZE)
    merged: dict[int, dict[str, list[Any]]] = {}

    def rollout(tasks: list[Any]) -> Any:
        values = simulated_feedback(feedback, tasks, rng) or {}
        for tid, part in values.items():
            into = merged.setdefault(tid, {"indices": [], "values": []})
            into["indices"] += part["indices"]
            into["values"] += part["values"]
        rate = {(tid, i): v for tid, part in values.items()
                for i, v in zip(part["indices"], part["values"], strict=True)}
        p = np.array([rate[(t.taskset_id, t.index)] for t in tasks])
        return bernoulli_rollout(tasks, p, group, rng)

    filled = fill_batch(pipe, rollout, step=step)
    summary = _summary(pipe.scheduler, step, epoch, filled.tasks, feedback, merged, groupings)
    summary.rounds, summary.kept_groups = filled.filter_rounds, filled.kept_groups
    summary.target_groups = filled.target_groups
    return summary


def bernoulli_rollout(tasks: Sequence[Any], p: np.ndarray, group: int, rng: np.random.Generator) -> Any:
    """A :class:`~flexkit.Rollout` of ``group`` Bernoulli(``p``) rewards per task (one token each)."""
    import torch

    from flexkit.plugins._contract import Rollout
    from flexkit.sample._batch import RolloutBatch

    rewards = (rng.random((len(tasks), group)) < np.clip(p, 0.0, 1.0)[:, None]).astype(np.float32).reshape(-1)
    taskset_ids = np.repeat([t.taskset_id for t in tasks], group)
    indices = np.repeat([t.index for t in tasks], group)
    batch = RolloutBatch.from_dict({"token_level_scores": torch.from_numpy(rewards[:, None].copy()),
                                    "response_mask": torch.ones(len(rewards), 1),
                                    "uid": np.repeat(np.arange(len(tasks)), group),
                                    "taskset_id": taskset_ids, "index": indices})
    experiences = {"reward": rewards, "taskset_id": taskset_ids, "index": indices}
    return Rollout(batch=batch, experiences=experiences, metrics={"reward_mean": float(rewards.mean())})
