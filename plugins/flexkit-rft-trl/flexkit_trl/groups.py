"""Held-out accuracy per group of the pipeline's grouping column, from a TRL evaluation's rewards.

A selector that pools evidence by a column (``frontier`` with ``feature_keys = ["level"]`` or ``["source"]``)
can steer its retention floor by each group's held-out accuracy (``guard_metric = "eval_accuracy/{}"``, ``{}``
standing for the group's value of its first feature key). ``flexkit run`` gets those values from its trainer's
``evaluate``; under TRL, :class:`EvalGroups` computes them from the evaluation's own rewards: each evaluated
completion's weighted reward sum, pooled by its prompt's value in the column (``eval_dataset`` rows carry the
column, as the training rows' taskset does). A group's accuracy is the mean reward of its evaluated completions
(each prompt has ``num_generations_eval`` of them, so it is also the mean of its prompts' mean rewards).

Values are named as the selectors name their groups (:func:`group_label`): an integral number as an integer
(``1`` and ``1.0`` both give ``"1"``), any other number or label as ``str`` gives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from flexkit import ConfigError, ConfigIssue, Pipeline, Selector, TasksetScheduler, feature_keys_of

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "EvalGroups", "GroupColumn", "group_columns", "group_label"]

#: The metric (after the evaluation's prefix, ``eval_``) of the mean reward over all evaluated completions.
ACCURACY = "accuracy"
#: The ``guard_metric`` template whose names :class:`EvalGroups` reports (with the default ``eval`` prefix).
GUARD_TEMPLATE = "eval_accuracy/{}"
#: The placeholder of a group's value in a ``guard_metric`` template.
PLACEHOLDER = "{}"


def group_label(value: Any) -> str:
    """``value`` (one row's value in a grouping column) as the selectors name its group: an integral float as an
    integer (``3.0`` → ``"3"``), anything else as ``str`` gives it (``3`` → ``"3"``, ``"gsm8k"``, ``0.5``)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    item = getattr(value, "item", None)  # a numpy or torch scalar from a dataset: its Python value
    if callable(item) and not isinstance(value, (str, bytes)):
        return group_label(item())
    return str(value)


@attrs.frozen
class GroupColumn:
    """A column the evaluation pools rewards by: its name, and whether a selector's guard needs it (a missing
    column is then an error, not a skipped report)."""

    name: str
    required: bool


def _selector_configs(source: Pipeline | TasksetScheduler) -> list[tuple[str, Any]]:
    """Each taskset's name and selector config."""
    if isinstance(source, Pipeline):
        return [(ts.name, ts.selector.config) for ts in source.config.tasksets]
    return [(entry.name, entry.selector.config) for entry in source.entries if isinstance(entry.selector, Selector)]


def _params(config: Any) -> dict[str, Any]:
    """A selector config's fields (attrs configs; anything else has none to read)."""
    return attrs.asdict(config, recurse=False) if attrs.has(type(config)) else {}


def group_columns(source: Pipeline | TasksetScheduler) -> list[GroupColumn]:
    """The first feature key of every taskset's selector (the column its groups are named by), each once;
    required where a selector's ``guard_metric`` names one metric per group.

    Raises :class:`~flexkit.ConfigError` for a per-group ``guard_metric`` other than :data:`GUARD_TEMPLATE`
    (no metric of another name is reported, so that guard would never see one) and for one over quantile
    ``bins`` (a bin's name is its range in the training pool, which an evaluation row cannot be named by).
    """
    columns: dict[str, bool] = {}
    issues: list[ConfigIssue] = []
    for i, (name, config) in enumerate(_selector_configs(source)):
        keys = feature_keys_of(config)
        if not keys:
            continue
        params = _params(config)
        guard = params.get("guard_metric")
        per_group = isinstance(guard, str) and PLACEHOLDER in guard
        where = f"tasksets[{i}].selector"
        if per_group and guard != GUARD_TEMPLATE:
            issues.append(ConfigIssue(f"{where}.guard_metric", (
                f"taskset {name!r}: FlexkitGRPOTrainer reports each group's held-out accuracy as "
                f"{GUARD_TEMPLATE!r} (eval_accuracy/<value of {keys[0]!r}>), so guard_metric = {guard!r} would "
                f"never see a value: set guard_metric = {GUARD_TEMPLATE!r}")))
            continue
        if per_group and params.get("bins"):
            issues.append(ConfigIssue(f"{where}.bins", (
                f"taskset {name!r}: guard_metric = {guard!r} with bins = {params['bins']} names each group by a "
                f"quantile range of {keys[0]!r} in the training pool, which evaluation rows cannot be named by: "
                "group by a categorical column (bins = 0), or name one metric for the whole pool "
                "(guard_metric = \"eval_accuracy\")")))
            continue
        columns[keys[0]] = columns.get(keys[0], False) or per_group
    if issues:
        raise ConfigError(issues)
    return [GroupColumn(name, required) for name, required in columns.items()]


def check_eval_columns(columns: Sequence[GroupColumn], eval_dataset: Any) -> None:
    """Refuse an ``eval_dataset`` (one dataset, or a mapping of named ones) whose rows lack a column a guard
    needs; datasets that do not list their columns are checked at evaluation time."""
    parts = eval_dataset.items() if isinstance(eval_dataset, Mapping) else [("eval_dataset", eval_dataset)]
    issues = []
    for label, dataset in parts:
        names = getattr(dataset, "column_names", None)
        if not isinstance(names, (list, tuple)):
            continue
        missing = [c.name for c in columns if c.required and c.name not in names]
        if missing:
            issues.append(ConfigIssue("eval_dataset", (
                f"{label} lacks the column(s) {', '.join(map(repr, missing))}: a selector's guard_metric reads each "
                f"group's held-out accuracy ({GUARD_TEMPLATE}), computed from the evaluation rows' values in its "
                "grouping column; add the column to the evaluation rows")))
    if issues:
        raise ConfigError(issues)


class EvalGroups:
    """Sums and counts of evaluated rewards, overall and per group of each :class:`GroupColumn`, over one
    evaluation (:meth:`reset` at its start, :meth:`add` per scored batch, :meth:`metrics` at its end)."""

    def __init__(self, columns: Sequence[GroupColumn]) -> None:
        self.columns = list(columns)
        self._sums: dict[str, list[float]] = {}
        self._total = [0.0, 0.0]

    def reset(self) -> None:
        """Forget what earlier evaluations added."""
        self._sums, self._total = {}, [0.0, 0.0]

    def add(self, rows: Sequence[Mapping[str, Any]], rewards: Sequence[float]) -> None:
        """Add one scored batch: ``rows[i]`` (its evaluation row) got reward ``rewards[i]`` (NaN: unscored, left
        out). A required column missing from a row raises ``KeyError`` naming it."""
        for column in self.columns:
            if rows and column.name not in rows[0]:
                if column.required:
                    raise KeyError(f"evaluation rows lack the column {column.name!r}, which a selector's "
                                   f"guard_metric ({GUARD_TEMPLATE}) groups held-out accuracy by")
                continue
            for row, reward in zip(rows, rewards, strict=True):
                if reward != reward:  # NaN: every reward function returned None
                    continue
                part = self._sums.setdefault(group_label(row[column.name]), [0.0, 0.0])
                part[0] += float(reward)
                part[1] += 1.0
        for reward in rewards:
            if reward == reward:
                self._total[0] += float(reward)
                self._total[1] += 1.0

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """``<prefix>_accuracy`` and ``<prefix>_accuracy/<group>`` (mean rewards) of what was added."""
        out: dict[str, float] = {}
        if self._total[1]:
            out[f"{prefix}_{ACCURACY}"] = self._total[0] / self._total[1]
        for label, (total, count) in sorted(self._sums.items()):
            out[f"{prefix}_{ACCURACY}/{label}"] = total / count
        return out
