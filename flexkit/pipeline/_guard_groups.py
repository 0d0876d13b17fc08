"""The held-out accuracy per group that a host computes for a ``frontier`` guard: the metric names, how a row's
value names its group, and which columns a pipeline's guards need (one rule for every adapter).

A selector that pools evidence by a column (``feature_keys = ["level"]`` or ``["source"]``) steers its retention
floor by each group's held-out accuracy when its ``guard_metric`` is :data:`GUARD_TEMPLATE` (``{}``: the group's
value of its first feature key). ``flexkit run`` gets those values from its trainer's ``evaluate``; a host adapter
computes them from its own validation's rewards, pooled by each evaluated row's value in that column and named
by :func:`group_label`, the selectors' own naming.
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit.errors import ConfigError, ConfigIssue
from flexkit.pipeline._pipeline import Pipeline
from flexkit.scheduler._scheduler import TasksetScheduler
from flexkit.selectors._base import TEXT_KEY, Selector, feature_keys_of
from flexkit.selectors._grouping import group_label

__all__ = ["ACCURACY", "GUARD_TEMPLATE", "PLACEHOLDER", "GroupColumn", "group_label", "guard_columns", "text_columns"]

#: The metric of the mean reward over every row of the validation split (the split that steers; the test split's
#: ``eval_accuracy`` judges and never reaches a selector).
ACCURACY = "val_accuracy"
#: The per-group ``guard_metric`` template whose names a host reports (``val_accuracy/<group>``).
GUARD_TEMPLATE = "val_accuracy/{}"
#: The placeholder of a group's value in a ``guard_metric`` template.
PLACEHOLDER = "{}"


@attrs.frozen
class GroupColumn:
    """A column a host pools evaluation rewards by: its name, whether a selector's guard needs it (then an
    evaluation row without it is an error, not a skipped report), and the config key that names it."""

    name: str
    required: bool
    key: str


def _selector_configs(source: Pipeline | TasksetScheduler) -> list[tuple[str, Any]]:
    """Each taskset's name and selector config."""
    if isinstance(source, Pipeline):
        return [(ts.name, ts.selector.config) for ts in source.config.tasksets]
    return [(entry.name, entry.selector.config) for entry in source.entries if isinstance(entry.selector, Selector)]


def _params(config: Any) -> dict[str, Any]:
    """A selector config's fields (attrs configs; anything else has none to read)."""
    return attrs.asdict(config, recurse=False) if attrs.has(type(config)) else {}


def guard_columns(source: Pipeline | TasksetScheduler, host: str) -> list[GroupColumn]:
    """The first feature key of every taskset's selector (the column its groups are named by), each once;
    required where a selector's ``guard_metric`` names one metric per group.

    Raises :class:`~flexkit.ConfigError` naming ``tasksets[i].selector.guard_metric`` for a per-group template
    other than :data:`GUARD_TEMPLATE` (``host`` reports no metric of another name, so that guard would never see
    one) and ``tasksets[i].selector.bins`` for a per-group guard over quantile bins (a bin's name is its range in
    the training pool, which an evaluation row cannot be named by).
    """
    columns: dict[str, GroupColumn] = {}
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
                f"taskset {name!r}: {host} reports each group's held-out accuracy as {GUARD_TEMPLATE!r} "
                f"({ACCURACY}/<value of {keys[0]!r}>), so guard_metric = {guard!r} would never see a value: "
                f"set guard_metric = {GUARD_TEMPLATE!r}")))
            continue
        if per_group and params.get("bins"):
            issues.append(ConfigIssue(f"{where}.bins", (
                f"taskset {name!r}: guard_metric = {guard!r} with bins = {params['bins']} names each group by a "
                f"quantile range of {keys[0]!r} in the training pool, which evaluation rows cannot be named by: "
                "group by a categorical column (bins = 0), or name one metric for the whole pool "
                f"(guard_metric = {ACCURACY!r})")))
            continue
        known = columns.get(keys[0])
        if known is None or (per_group and not known.required):
            columns[keys[0]] = GroupColumn(keys[0], per_group, f"{where}.feature_keys")
    if issues:
        raise ConfigError(issues)
    return list(columns.values())


def text_columns(source: Pipeline | TasksetScheduler) -> list[str]:
    """The text columns the selectors' pass-rate models over prompts read (``frontier``'s ``text_key``), each
    once: what a host keeps of its validation rows, with their rewards, for
    :meth:`~flexkit.Pipeline.validation_calibration`."""
    found = [str(_params(config).get(TEXT_KEY) or "") for _name, config in _selector_configs(source)]
    return list(dict.fromkeys(key for key in found if key))
