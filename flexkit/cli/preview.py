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
from flexkit.plugins.contract import group_size_of
from flexkit.run.estimates import level_mix
from flexkit.selectors._grouping import TaskGroups, group_label
from flexkit.selectors.base import feature_keys_of
from flexkit.tasksets.base import finite_number

#: Responses per task when the pipeline names no ``[trainer] group_size``.
DEFAULT_GROUP_SIZE = 8
#: Equal-width bins of [0, 1] for a ``--feedback FIELD`` summary.
FIELD_BINS = 4
#: Rows read (evenly strided) to find a taskset's first categorical column.
CATEGORY_SAMPLE = 256
#: Most distinct values a categorical column has among those rows (and at most half as many as the rows).
MAX_CATEGORIES = 32


@attrs.frozen
class TasksetGrouping:
    """How preview counts one taskset's drawn tasks: by the columns ``keys``, cut into the pool's quantile
    ``bins`` (then ``groups``, the selector's own grouping of the pool) or by their values."""

    keys: tuple[str, ...]
    bins: int = 0
    groups: TaskGroups | None = None

    @property
    def title(self) -> str:
        """``level``, ``source`` or ``difficulty (4 bins)``."""
        return ", ".join(self.keys) + (f" ({self.bins} bins)" if self.bins else "")

    def name(self, task: Any) -> str:
        """The group of ``task`` (a value, ``"[0.1, 0.3)"`` for a bin; ``key=value, ...`` for several columns)."""
        if self.groups is not None:
            name = self.groups.names[int(self.groups.group[task.index])]
        else:
            row = task.data if isinstance(task.data, Mapping) else {}
            name = ", ".join(f"{key}={group_label(row[key]) if key in row else '?'}" for key in self.keys)
        if len(self.keys) == 1:
            name = name.removeprefix(self.keys[0]).removeprefix("=").removeprefix("∈")
        return name

    def counts(self, tasks: Sequence[Any]) -> dict[str, int]:
        """How many of ``tasks`` fall in each group (the groups' order, numbers by value)."""
        counts: dict[str, int] = {}
        for task in tasks:
            name = self.name(task)
            counts[name] = counts.get(name, 0) + 1
        if self.groups is not None:
            order = {name.removeprefix(self.keys[0]).removeprefix("∈") if len(self.keys) == 1 else name: i
                     for i, name in enumerate(self.groups.names)}
            return dict(sorted(counts.items(), key=lambda item: order.get(item[0], len(order))))
        return dict(sorted(counts.items(), key=lambda item: _natural(item[0])))


def _natural(name: str) -> tuple[int, float, str]:
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def taskset_grouping(selector_config: Any, taskset: Any, name: str) -> TasksetGrouping | None:
    """The grouping of a taskset's preview: the ``feature_keys`` of a selector that groups tasks (its config has
    ``bins``: 0 groups by value, k by the pool's k quantile bins, as the selector does), else the taskset's first
    categorical column (:func:`first_categorical_column`); ``None`` when there is none."""
    params = attrs.asdict(selector_config, recurse=False) if attrs.has(type(selector_config)) else {}
    keys = feature_keys_of(selector_config)
    if keys and "bins" in params:
        bins = int(params["bins"] or 0)
        if bins > 0:
            groups = TaskGroups.from_features(taskset.features(keys), keys, len(taskset), bins=bins,
                                              owner=f"preview of {name!r}")
            return TasksetGrouping(keys, bins, groups)
        return TasksetGrouping(keys)
    column = first_categorical_column(taskset)
    return TasksetGrouping((column,)) if column is not None else None


def first_categorical_column(taskset: Any) -> str | None:
    """The first column (in row order) of :data:`CATEGORY_SAMPLE` evenly strided rows whose values are all labels
    (strings or integers) with at most :data:`MAX_CATEGORIES` distinct values, and at most half as many as the rows
    (an id or a prompt is no category); ``None`` when no column is."""
    size = len(taskset)
    if size == 0:
        return None
    rows = taskset.read(np.unique(np.linspace(0, size - 1, min(size, CATEGORY_SAMPLE)).astype(np.int64)))
    limit = min(MAX_CATEGORIES, max(1, len(rows) // 2))
    for key in rows[0]:
        values = [row.get(key) for row in rows]
        if not all(isinstance(v, (str, int, np.integer)) and not isinstance(v, bool) for v in values):
            continue
        if len({group_label(v) for v in values}) <= limit:
            return str(key)
    return None


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


def _groupings(pipe: Any) -> dict[str, TasksetGrouping]:
    """Each taskset's :func:`taskset_grouping` (those with one)."""
    out: dict[str, TasksetGrouping] = {}
    for spec, entry in zip(pipe.config.tasksets, pipe.scheduler.entries, strict=True):
        grouping = taskset_grouping(spec.selector.config, entry.taskset, entry.name)
        if grouping is not None:
            out[entry.name] = grouping
    return out


def preview_steps(pipe: Any, steps: int, feedback: str = "none") -> Iterator[PreviewStep]:
    """Draw up to ``steps`` batches of ``pipe`` and summarise each (see the module docstring). Ends early when
    the pipeline's run ends; the caller closes the scheduler."""
    from flexkit.scheduler.feedback import SELECTOR_METRIC

    sched = pipe.scheduler
    rng = np.random.default_rng(pipe.config.run.seed)
    sample = pipe.config.sample
    refill = sample is not None and sample.refill is not None and feedback != "none"
    groupings = _groupings(pipe)
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
    from flexkit.run.dynamic_sampling import fill_batch

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
    """A :class:`~flexkit.plugins.contract.Rollout` of ``group`` Bernoulli(``p``) rewards per task (one token each)."""
    import torch

    from flexkit.plugins.contract import Rollout
    from flexkit.sample.batch import RolloutBatch

    rewards = (rng.random((len(tasks), group)) < np.clip(p, 0.0, 1.0)[:, None]).astype(np.float32).reshape(-1)
    taskset_ids = np.repeat([t.taskset_id for t in tasks], group)
    indices = np.repeat([t.index for t in tasks], group)
    batch = RolloutBatch.from_dict({"token_level_scores": torch.from_numpy(rewards[:, None].copy()),
                                    "response_mask": torch.ones(len(rewards), 1),
                                    "uid": np.repeat(np.arange(len(tasks)), group),
                                    "taskset_id": taskset_ids, "index": indices})
    experiences = {"reward": rewards, "taskset_id": taskset_ids, "index": indices}
    return Rollout(batch=batch, experiences=experiences, metrics={"reward_mean": float(rewards.mean())})
