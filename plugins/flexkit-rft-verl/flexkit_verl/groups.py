"""Held-out accuracy per group of the pipeline's grouping column, from verl's own validation rewards.

A selector that pools evidence by a column (``frontier`` with ``feature_keys = ["level"]``) steers its retention
floor by each group's held-out accuracy when ``guard_metric = "val_accuracy/{}"`` (``{}``: the group's value of
its first feature key, named as the selector names its groups). ``flexkit run`` gets those values from its
trainer's ``evaluate``; in verl, :class:`ValidationGroups` computes them from the validation verl runs anyway
(``trainer.test_freq``): every validation response's reward (``rm_scores`` summed), pooled by its prompt's value
in the column, which the validation rows carry (verl stores a row's fields with each of its trajectories). A
prompt's accuracy is the mean reward of its responses (``actor_rollout_ref.rollout.val_kwargs.n`` of them); a
group's is the mean over its prompts; ``val_accuracy`` is the mean over all prompts.

:func:`group_columns` says which columns to read and refuses, at construction, what no validation can feed:
a per-group ``guard_metric`` other than :data:`GUARD_TEMPLATE` and one over quantile ``bins`` (a bin is named by
its range in the training pool, which a validation row cannot be named by). :func:`column_issues` refuses
validation files that lack a column a guard needs. Nothing here imports verl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from flexkit import ConfigError, ConfigIssue, Pipeline, TasksetScheduler
from flexkit.host import ACCURACY, GUARD_TEMPLATE, GroupColumn, group_label, guard_columns

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "GroupColumn", "ValidationGroups", "column_issues", "dataset_columns",
           "final_outputs", "group_columns", "group_label", "validation_columns"]


def group_columns(pipeline: Pipeline | TasksetScheduler) -> list[GroupColumn]:
    """The columns validation rewards are pooled by (:func:`flexkit.host.guard_columns`: a per-group guard other
    than :data:`GUARD_TEMPLATE`, or over quantile ``bins``, is a :class:`~flexkit.ConfigError`)."""
    try:
        return guard_columns(pipeline, "flexkit_verl (from verl's validation)")
    except ConfigError as exc:
        raise ConfigError(exc.issues, source="verl config vs flexkit pipeline") from None


def validation_columns(source: Pipeline | TasksetScheduler, val_columns: Iterable[str] | None) -> list[GroupColumn]:
    """The columns a validation pools rewards by (:func:`group_columns`): the required ones, and the others where
    the validation rows have them (``val_columns``: their names; ``None``: not known, the required ones only)."""
    known = set(val_columns) if val_columns is not None else set()
    return [c for c in group_columns(source) if c.required or c.name in known]


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
            labels = {c.name: group_label(values[c.name][i]) for c in self.columns if c.name in values}
            # a prompt is its id and its groups: rows that share an id (a uid the validation file carries) but not
            # a group are pooled apart, each under its own group
            key = prompt + "".join(f"\x00{name}={label}" for name, label in sorted(labels.items()))
            self._prompts.setdefault(key, []).append(float(reward))
            self._labels.setdefault(key, labels)

    def metrics(self) -> dict[str, float]:
        """:data:`ACCURACY` and ``val_accuracy/<group>``: mean over prompts of each prompt's mean reward."""
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


@runtime_checkable
class _HasDataframe(Protocol):
    """verl's ``RLHFDataset``, as far as :func:`dataset_columns` reads it: its Hugging Face ``dataframe``."""

    dataframe: Any


@runtime_checkable
class _Columned(Protocol):
    """A Hugging Face ``datasets.Dataset``, as far as :func:`dataset_columns` reads it."""

    column_names: Any


def dataset_columns(dataset: Any) -> list[str] | None:
    """The column names of a verl ``RLHFDataset`` (its Hugging Face ``dataframe``), ``None`` for a dataset that
    does not expose them (its columns are then checked at the first validation)."""
    frame = dataset.dataframe if isinstance(dataset, _HasDataframe) else None
    names = frame.column_names if isinstance(frame, _Columned) else None
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else None
