"""Held-out accuracy per group of the pipeline's grouping column, from a TRL evaluation's rewards.

A selector that pools evidence by a column (``frontier`` with ``feature_keys = ["level"]`` or ``["source"]``)
can steer its retention floor by each group's held-out accuracy (``guard_metric = "val_accuracy/{}"``, ``{}``
standing for the group's value of its first feature key). ``flexkit run`` gets those values from its trainer's
``evaluate``; under TRL, :class:`EvalGroups` computes them from the evaluation's own rewards: each evaluated
completion's weighted reward sum, pooled by its prompt's value in the column (``eval_dataset`` rows carry the
column, as the training rows' taskset does). A group's accuracy is the mean reward of its evaluated completions
(each prompt has ``num_generations_eval`` of them, so it is also the mean of its prompts' mean rewards).

Values are named as the selectors name their groups (:func:`flexkit.host.group_label`): an integral number as an integer
(``1`` and ``1.0`` both give ``"1"``), any other number or label as ``str`` gives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flexkit import ConfigError, ConfigIssue, Pipeline, TasksetScheduler, ValidationRows
from flexkit.host import GUARD_TEMPLATE, GroupColumn, group_label, guard_columns
from flexkit_trl.dataset import eval_parts, listed_columns

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "EvalGroups", "GroupColumn", "group_columns", "group_label"]

#: The metric (after the evaluation's prefix, ``eval_``) of the mean reward over all evaluated completions.
ACCURACY = "accuracy"


def group_columns(source: Pipeline | TasksetScheduler) -> list[GroupColumn]:
    """The columns the evaluation pools rewards by (:func:`flexkit.host.guard_columns`: a per-group guard other
    than :data:`GUARD_TEMPLATE`, or over quantile ``bins``, is a :class:`~flexkit.ConfigError`)."""
    return guard_columns(source, "FlexkitGRPOTrainer")


def check_eval_columns(columns: Sequence[GroupColumn], eval_dataset: Any) -> None:
    """Refuse an ``eval_dataset`` (one dataset, or a mapping of named ones) whose rows lack a column a guard
    needs; datasets that do not list their columns are checked at evaluation time."""
    issues = []
    for label, dataset in eval_parts(eval_dataset):
        names = listed_columns(dataset)
        if names is None:
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
    evaluation (:meth:`reset` at its start, :meth:`add` per scored batch, :meth:`metrics` at its end), and with
    ``texts`` the scored rows themselves (:meth:`validation_rows`)."""

    def __init__(self, columns: Sequence[GroupColumn], texts: Sequence[str] = ()) -> None:
        self.columns = list(columns)
        #: The text columns the selectors' prompt models read (:func:`flexkit.host.text_columns`): kept per row,
        #: with its reward, for :meth:`validation_rows`.
        self.texts = list(texts)
        self._sums: dict[str, list[float]] = {}
        self._total = [0.0, 0.0]
        self._rows: list[tuple[dict[str, Any], float]] = []

    @property
    def reads(self) -> list[str]:
        """Every column :meth:`add` reads of an evaluation row."""
        return list(dict.fromkeys([c.name for c in self.columns] + self.texts))

    def reset(self) -> None:
        """Forget what earlier evaluations added."""
        self._sums, self._total, self._rows = {}, [0.0, 0.0], []

    def validation_rows(self) -> ValidationRows | None:
        """The scored rows added since :meth:`reset`, in the :attr:`texts` columns they have, each with its reward
        clipped into [0, 1] (as the selectors' feedback is); ``None`` without text columns or rows."""
        if not self.texts or not self._rows:
            return None
        columns = {key: [row.get(key) for row, _ in self._rows] for key in self.texts
                   if all(key in row for row, _ in self._rows)}
        return ValidationRows(columns, np.clip([reward for _, reward in self._rows], 0.0, 1.0))

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
        for row, reward in zip(rows, rewards, strict=True):
            if reward == reward:
                self._total[0] += float(reward)
                self._total[1] += 1.0
                if self.texts:
                    self._rows.append(({key: row[key] for key in self.texts if key in row}, float(reward)))

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """``<prefix>_accuracy`` and ``<prefix>_accuracy/<group>`` (mean rewards) of what was added."""
        out: dict[str, float] = {}
        if self._total[1]:
            out[f"{prefix}_{ACCURACY}"] = self._total[0] / self._total[1]
        for label, (total, count) in sorted(self._sums.items()):
            out[f"{prefix}_{ACCURACY}/{label}"] = total / count
        return out
