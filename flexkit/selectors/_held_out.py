"""Each group's held-out accuracy, read from the trainer's evaluations: the latest value and the best so far.

A selector that keeps a solved group's skill needs to know when that skill slides. The trainer's sampled answers
do not show it: a solved level's sampled pass rate stays near 1 while its greedy held-out accuracy slides by a
few points. The held-out evaluation does, and :class:`HeldOutWatch` keeps what a selector needs from it: per
group the latest value and the best one, so which groups are more than a margin below their best, and a share
of a floor per group that each evaluation raises when it shows the group sliding and lowers when it shows it
holding (additive increase and decrease, as a control loop: the share settles where slides stay rare).

The evaluations a selector gets are the trainer's **validation** split (``val_accuracy/<level>``: ``flexkit run``
hands the selectors only ``validate``'s metrics), never the test split that judges the run (``eval_accuracy``):
:func:`reads_test_split` refuses a guard that names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from flexkit._log import say
from flexkit._state_problems import is_number
from flexkit.errors import ConfigError, ConfigIssue, StateMismatchError
from flexkit.selectors._estimates import load_array

#: Marks the place of a group's value in a metric template (``"val_accuracy/{}"``).
PLACEHOLDER = "{}"
#: The test split's names (a trainer's ``evaluate``, as it returns them and as runs record them): what a run is
#: judged on, so never what a selector steers by.
TEST_METRIC_PREFIXES = ("eval_accuracy", "flexkit/eval/")
#: The validation split's name of a group's accuracy, the guard's template.
VALIDATION_TEMPLATE = "val_accuracy/{}"


def reads_test_split(template: str) -> str | None:
    """Why a guard may not read ``template`` (a test-split name, :data:`TEST_METRIC_PREFIXES`), with the
    migration; ``None`` for any other name."""
    if not template.startswith(TEST_METRIC_PREFIXES):
        return None
    fix = ("val_accuracy" + template.removeprefix("eval_accuracy") if template.startswith("eval_accuracy")
           else VALIDATION_TEMPLATE)
    return (f"guard_metric = {template!r} reads the test split (eval_accuracy: the trainer's evaluate, what results, "
            f"targets and flexkit compare judge a run by), so the guard would steer on the exam it is judged on; a "
            f"guard reads the validation split: set guard_metric = {fix!r} (the trainer's validate, on problems "
            "apart from the test set's)")


def metric_names(template: str, first_values: Sequence[str] | None, count: int) -> list[str]:
    """The evaluation metric of each of ``count`` groups: ``template`` with :data:`PLACEHOLDER` replaced by the
    group's first feature value (its level); a template without it names one metric for every group."""
    if first_values is None:
        return [template.replace(PLACEHOLDER, "")] * count
    return [template.replace(PLACEHOLDER, value) for value in first_values]


class HeldOutWatch:
    """Latest and best held-out value per group, from evaluations (metric name → value).

    Args:
        metrics: the evaluation metric of each group (:func:`metric_names`).
        margin: how far below its best a group's latest value must be to count as sliding.
        raise_by: added to a group's floor share (capped at 1) at each evaluation that shows it sliding.
        lower_by: taken from it (down to ``minimum``) at each evaluation that shows it within ``margin`` of its best.
        minimum: every group's share before any evaluation, and the least it falls to.
    """

    def __init__(self, metrics: Sequence[str], margin: float, *, raise_by: float = 1.0,
                 lower_by: float = 1.0, minimum: float = 0.0) -> None:
        self.metrics = list(metrics)
        self.margin = float(margin)
        self.raise_by, self.lower_by, self.minimum = float(raise_by), float(lower_by), float(minimum)
        self.latest = np.full(len(self.metrics), np.nan)
        self.best = np.full(len(self.metrics), np.nan)
        self.share = np.full(len(self.metrics), self.minimum)

    def observe(self, evaluation: Mapping[str, Any]) -> None:
        """Take one evaluation: each group whose metric is a finite number gets it as its latest value (and as
        its best when higher); groups whose metric is missing or not a finite number keep theirs.

        A first evaluation that names none of the groups' metrics means a ``guard_metric`` the trainer does not
        report: a :class:`~flexkit.ConfigError` naming what it did hold. One that lacks some of them (absent, or not a
        finite number) means groups
        the guard will not protect until an evaluation names them (their validation rows missing): a warning
        (``guard_groups_not_evaluated``) naming them."""
        if np.isnan(self.latest).all():
            self._check_first(evaluation)
        values = [evaluation.get(name) for name in self.metrics]
        latest = np.array([float(cast(float, v)) if is_number(v) else np.nan for v in values])
        seen = ~np.isnan(latest)
        if not seen.any():
            return
        self.latest = np.where(seen, latest, self.latest)
        self.best = np.where(seen, np.fmax(self.best, latest), self.best)
        sliding = self.sliding()
        moved = np.where(sliding, self.share + self.raise_by, self.share - self.lower_by)
        self.share = np.where(seen, np.clip(moved, self.minimum, 1.0), self.share)

    def _check_first(self, evaluation: Mapping[str, Any]) -> None:
        """Refuse a first evaluation that names no group's metric, warn of one that lacks some (:meth:`observe`)."""
        wanted = sorted(set(self.metrics))
        missing = [name for name in wanted if not is_number(evaluation.get(name))]  # absent, or no usable value
        if not missing:
            return
        seen = sorted(map(str, evaluation))
        prefix = wanted[0].rpartition("/")[0] + "/"  # the guard's own metrics: the warning lists those it holds
        related = [name for name in seen if name.startswith(prefix)] or seen
        shown = ", ".join(related[:20]) + (f", ... ({len(related)} in all)" if len(related) > 20 else "")
        if not any(name in evaluation for name in wanted):
            raise ConfigError([ConfigIssue("guard_metric", (
                f"the first evaluation names none of the guard's metrics ({', '.join(wanted[:6])}"
                f"{', ...' if len(wanted) > 6 else ''}); it holds: {shown or 'nothing'}. Set guard_metric to a "
                "template of those names ('{}' for the group's value), or make the trainer report each group's "
                "held-out value under it"))])
        say("guard_groups_not_evaluated", (
            f"warning: the guard's first evaluation has no value for {len(missing)} of its {len(wanted)} metrics "
            f"({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}): those groups get no floor until an "
            f"evaluation names them. It holds: {shown}. Give validation rows for every value of the grouping column "
            "in the training pool, or turn the guard off (guard_metric = \"\")"),
            level="warning", missing=missing)

    def sliding(self) -> np.ndarray:
        """Per group: whether its latest value is more than ``margin`` below its best (never evaluated: not)."""
        below: np.ndarray = (self.best - self.latest) > self.margin  # NaN compares False
        return below

    def state_dict(self) -> dict[str, Any]:
        """Which groups were evaluated, their latest and best values (0 where not evaluated) and floor shares."""
        seen = ~np.isnan(self.latest)
        return {"evaluated": seen, "latest": np.where(seen, self.latest, 0.0), "best": np.where(seen, self.best, 0.0),
                "share": self.share.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first: same number of groups, finite values, a best no
        lower than the latest value, shares in [0, 1]; a share below ``minimum``, saved with a lower one, is
        raised to it)."""
        count = len(self.metrics)
        missing = [key for key in ("evaluated", "latest", "best", "share") if key not in state]
        if missing:
            raise StateMismatchError(f"saved held-out accuracies lack {', '.join(map(repr, missing))}")
        seen = load_array(state, "evaluated", count, bool)
        latest = load_array(state, "latest", count, np.float64)
        best = load_array(state, "best", count, np.float64)
        share = load_array(state, "share", count, np.float64, low=0.0, high=1.0)
        if (best < latest)[seen].any():
            raise StateMismatchError("saved held-out values have a best below the latest value")
        self.latest = np.where(seen, latest, np.nan)
        self.best = np.where(seen, best, np.nan)
        self.share = np.maximum(share, self.minimum)
