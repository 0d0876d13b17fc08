"""Held-out accuracy per group of the pipeline's grouping column, from verl's own validation rewards.

A selector that pools evidence by a column (``frontier`` with ``feature_keys = ["level"]``) steers its retention
floor by each group's held-out accuracy when ``guard_metric = "eval_accuracy/{}"`` (``{}``: the group's value of
its first feature key, named as the selector names its groups). ``flexkit run`` gets those values from its
trainer's ``evaluate``; in verl, :class:`ValidationGroups` computes them from the validation verl runs anyway
(``trainer.test_freq``): every validation response's reward (``rm_scores`` summed), pooled by its prompt's value
in the column, which the validation rows carry (verl stores a row's fields with each of its trajectories). A
prompt's accuracy is the mean reward of its responses (``actor_rollout_ref.rollout.val_kwargs.n`` of them); a
group's is the mean over its prompts; ``eval_accuracy`` is the mean over all prompts.

:func:`group_columns` says which columns to read and refuses, at construction, what no validation can feed:
a per-group ``guard_metric`` other than :data:`GUARD_TEMPLATE` and one over quantile ``bins`` (a bin is named by
its range in the training pool, which a validation row cannot be named by). :func:`column_issues` refuses
validation files that lack a column a guard needs. Nothing here imports verl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from flexkit import ConfigError, ConfigIssue, Pipeline, feature_keys_of

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "GroupColumn", "ValidationGroups", "column_issues", "final_outputs",
           "group_columns", "group_label"]

#: The metric of the mean reward over all validation prompts.
ACCURACY = "eval_accuracy"
#: The ``guard_metric`` template whose names :class:`ValidationGroups` reports.
GUARD_TEMPLATE = "eval_accuracy/{}"
#: The placeholder of a group's value in a ``guard_metric`` template.
PLACEHOLDER = "{}"


def group_label(value: Any) -> str:
    """``value`` (one row's value in a grouping column) as the selectors name its group: an integral float as an
    integer (``3.0`` → ``"3"``), anything else as ``str`` gives it (``3`` → ``"3"``, ``"gsm8k"``, ``0.5``); a
    numpy or torch scalar as its Python value."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    item = getattr(value, "item", None)  # a numpy / torch scalar from a dataset row (not a flexkit object)
    if callable(item) and not isinstance(value, (str, bytes)):
        return group_label(item())
    return str(value)


@attrs.frozen
class GroupColumn:
    """A column validation rewards are pooled by: its name, whether a selector's guard needs it (then a validation
    row without it is an error, not a skipped report), and the config key that names it (for messages)."""

    name: str
    required: bool
    key: str


def _params(config: Any) -> dict[str, Any]:
    """A selector config's fields (attrs configs; anything else has none to read)."""
    return attrs.asdict(config, recurse=False) if attrs.has(type(config)) else {}


def group_columns(pipeline: Pipeline) -> list[GroupColumn]:
    """The first feature key of every taskset's selector (the column its groups are named by), each once;
    required where a selector's ``guard_metric`` names one metric per group.

    Raises :class:`~flexkit.ConfigError` naming ``tasksets[i].selector.guard_metric`` for a per-group template
    other than :data:`GUARD_TEMPLATE` (no metric of another name is computed, so that guard would never see a
    value) and ``tasksets[i].selector.bins`` for a per-group guard over quantile bins.
    """
    columns: dict[str, GroupColumn] = {}
    issues: list[ConfigIssue] = []
    for i, taskset in enumerate(pipeline.config.tasksets):
        config = taskset.selector.config
        keys = feature_keys_of(config)
        if not keys:
            continue
        params = _params(config)
        guard = params.get("guard_metric")
        per_group = isinstance(guard, str) and PLACEHOLDER in guard
        where = f"tasksets[{i}].selector"
        if per_group and guard != GUARD_TEMPLATE:
            issues.append(ConfigIssue(f"{where}.guard_metric", (
                f"taskset {taskset.name!r}: flexkit_verl reports each group's held-out accuracy from verl's "
                f"validation as {GUARD_TEMPLATE!r} (eval_accuracy/<value of {keys[0]!r}>), so guard_metric = "
                f"{guard!r} would never see a value: set guard_metric = {GUARD_TEMPLATE!r}")))
            continue
        if per_group and params.get("bins"):
            issues.append(ConfigIssue(f"{where}.bins", (
                f"taskset {taskset.name!r}: guard_metric = {guard!r} with bins = {params['bins']} names each group "
                f"by a quantile range of {keys[0]!r} in the training pool, which validation rows cannot be named "
                "by: group by a categorical column (bins = 0), or name one metric for the whole pool "
                f"(guard_metric = {ACCURACY!r})")))
            continue
        known = columns.get(keys[0])
        if known is None or (per_group and not known.required):
            columns[keys[0]] = GroupColumn(keys[0], per_group, f"{where}.feature_keys")
    if issues:
        raise ConfigError(issues, source="verl config vs flexkit pipeline")
    return list(columns.values())


def column_issues(columns: Sequence[GroupColumn], available: Iterable[str], *,
                  where: str = "data.val_files") -> list[ConfigIssue]:
    """One :class:`~flexkit.ConfigIssue` (naming ``where``) per required column not in ``available`` (the
    validation dataset's column names)."""
    names = set(available)
    return [ConfigIssue(where, (
        f"the validation rows lack the column {c.name!r}, which {c.key} names and the selector's guard_metric "
        f"({GUARD_TEMPLATE}) groups held-out accuracy by: add it to the validation parquet (the same column the "
        "training rows carry)")) for c in columns if c.required and c.name not in names]


def final_outputs(keys: Sequence[str]) -> list[int]:
    """Positions of the last output of each session among verl v1 trajectory keys ``{uid}_{session}_{index}``
    (a multi-output agent loop stores several per session, all with the session's reward), in batch order;
    a key of another shape is its own session."""
    last: dict[str, tuple[int, int]] = {}
    for pos, key in enumerate(keys):
        parts = key.rsplit("_", 2)
        if len(parts) == 3 and parts[2].isdigit():
            session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        else:
            session, index = key, 0
        if session not in last or index > last[session][0]:
            last[session] = (index, pos)
    return sorted(pos for _, pos in last.values())


class ValidationGroups:
    """Rewards of one validation, per prompt, and each prompt's value in every :class:`GroupColumn`
    (:meth:`reset` at its start, :meth:`add` per sampled batch, :meth:`metrics` at its end)."""

    def __init__(self, columns: Sequence[GroupColumn]) -> None:
        self.columns = list(columns)
        self._prompts: dict[str, list[float]] = {}
        self._labels: dict[str, dict[str, str]] = {}

    @property
    def names(self) -> list[str]:
        """The column names to read from the validation trajectories."""
        return [c.name for c in self.columns]

    def reset(self) -> None:
        """Forget what earlier validations added."""
        self._prompts, self._labels = {}, {}

    def add(self, prompts: Sequence[str], rewards: Sequence[float], values: Mapping[str, Sequence[Any]]) -> None:
        """Add one batch of responses: response ``i`` answers prompt ``prompts[i]`` and got ``rewards[i]`` (NaN:
        unscored, left out); ``values[column][i]`` is its row's value in each column. A required column absent
        from ``values`` raises :class:`~flexkit.ConfigError` naming the config key that asks for it."""
        missing = [c for c in self.columns if c.required and c.name not in values]
        if missing:
            raise ConfigError(column_issues(missing, ()), source="verl validation")
        for i, (prompt, reward) in enumerate(zip(prompts, rewards, strict=True)):
            if reward != reward:
                continue
            self._prompts.setdefault(prompt, []).append(float(reward))
            labels = self._labels.setdefault(prompt, {})
            for column in self.columns:
                if column.name in values and column.name not in labels:
                    labels[column.name] = group_label(values[column.name][i])

    def metrics(self) -> dict[str, float]:
        """:data:`ACCURACY` and ``eval_accuracy/<group>``: mean over prompts of each prompt's mean reward."""
        means = {prompt: sum(r) / len(r) for prompt, r in self._prompts.items()}
        if not means:
            return {}
        out = {ACCURACY: sum(means.values()) / len(means)}
        pooled: dict[str, list[float]] = {}
        for prompt, mean in means.items():
            for label in dict.fromkeys(self._labels.get(prompt, {}).values()):
                pooled.setdefault(label, []).append(mean)
        for label in sorted(pooled):
            out[f"{ACCURACY}/{label}"] = sum(pooled[label]) / len(pooled[label])
        return out
