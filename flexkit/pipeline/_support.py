"""What a host honours of a pipeline, and the one check that refuses the rest before any training.

A *host* drives a pipeline: ``flexkit run`` with its ``[trainer]``, TRL's ``FlexkitGRPOTrainer``, verl's sampler and
trainer mixin, Trinity-RFT's selector. Some parts of a pipeline need something only the host can give:

* ``sample``: a ``[sample]`` stage, whose keep and weights must reach the policy loss;
* ``refill``: ``[sample.refill]``, which needs the host to roll out again within a step;
* ``replay``: ``[replay]``, which needs the host to train on stored rows weighed by their behaviour log-probabilities;
* ``evaluation``: a selector that reads held-out evaluations (``frontier``'s ``guard_metric``), which needs the host
  to hand it evaluations (:meth:`flexkit.Pipeline.evaluation`);
* ``group_accuracy``: a selector that reads each group's validation accuracy as ``val_accuracy/<group>``
  (``guard_metric = "val_accuracy/{}"``), which needs the host to compute it from its validation rewards pooled by
  the selector's grouping column (:mod:`flexkit.pipeline._guard_groups`).

A bare :class:`~flexkit.TasksetScheduler` (the torch sampler's ``sampler_for_dataset``, a hand-built scheduler)
has no ``[sample]`` or ``[replay]`` table: its needs are its selectors'.

Each host declares a :class:`HostSupport`; :func:`check_support` is the one rule for all of them: every part the
pipeline needs and the host does not give is a :class:`~flexkit.ConfigError` naming the table or key and what to do,
raised where the host is built (and by ``flexkit validate --for HOST``), never a part silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from flexkit.errors import ConfigError, ConfigIssue
from flexkit.pipeline._pipeline import Pipeline
from flexkit.scheduler._scheduler import TasksetScheduler
from flexkit.selectors._base import Selector

__all__ = ["PARTS", "HostSupport", "Need", "check_support", "pipeline_needs", "selector_needs", "unmet_needs"]

#: A part of a pipeline that needs something of its host.
Part = Literal["sample", "refill", "replay", "evaluation", "group_accuracy"]
#: Every :data:`Part`, in the order problems are reported.
PARTS: tuple[Part, ...] = ("sample", "refill", "replay", "evaluation", "group_accuracy")

#: What each part asks of a host, for the messages.
_WHAT: dict[str, str] = {
    "sample": "applies a [sample] stage's keep and weights to the policy loss",
    "refill": "rolls out again within a step for [sample.refill]",
    "replay": "trains on replayed rows weighed by their behaviour log-probabilities ([replay])",
    "evaluation": "hands the pipeline held-out evaluations (Pipeline.evaluation)",
    "group_accuracy": "reports each group's validation accuracy as val_accuracy/<group>",
}


@attrs.frozen(kw_only=True)
class HostSupport:
    """What one host honours of a pipeline: one flag per :data:`PARTS` entry, and per part the advice a refusal
    gives (what to do instead, e.g. ``"set [run] eval_every > 0"``)."""

    #: The host, as messages name it (``"FlexkitGRPOTrainer (TRL)"``).
    name: str
    sample: bool = False
    refill: bool = False
    replay: bool = False
    evaluation: bool = False
    #: Each group's validation accuracy as ``val_accuracy/<group>``; by default wherever evaluations are given.
    group_accuracy: bool = attrs.field(default=attrs.Factory(lambda self: self.evaluation, takes_self=True))
    #: Per part: what to do when the pipeline needs it and this host does not give it.
    advice: Mapping[str, str] = attrs.field(factory=dict)
    #: Per part it gives: what the host's own settings must provide for it at run time (an ``eval_dataset``, a
    #: validation file...), which the host checks when it is built and ``flexkit validate --for`` lists.
    requirements: Mapping[str, str] = attrs.field(factory=dict)

    def run_time_requirements(self, pipeline: Pipeline | TasksetScheduler) -> list[str]:
        """``"<key>: <requirement>"`` for each part ``pipeline`` needs that this host gives and sets a requirement
        for (:attr:`requirements`), in :data:`PARTS` order, each once."""
        lines = [f"{need.key}: {self.requirements[need.part]}" for need in pipeline_needs(pipeline)
                 if self.gives(need.part) and need.part in self.requirements]
        return list(dict.fromkeys(lines))

    def gives(self, part: Part) -> bool:
        """Whether this host honours ``part``."""
        flags = {"sample": self.sample, "refill": self.refill, "replay": self.replay, "evaluation": self.evaluation,
                 "group_accuracy": self.group_accuracy}
        return flags[part]


@attrs.frozen
class Need:
    """One thing a pipeline needs of its host: the :data:`Part` and the config key that asks for it."""

    part: Part
    #: The table or key, as a config path (``"replay"``, ``"tasksets[0].selector.guard_metric"``).
    key: str


def selector_needs(selector: Any, prefix: str) -> list[Need]:
    """The needs of one selector, its keys under ``prefix`` (``"tasksets[0].selector"``): an ``evaluation`` need
    per key of :meth:`~flexkit.Selector.evaluation_keys` and a ``group_accuracy`` need per key of
    :meth:`~flexkit.Selector.group_accuracy_keys`. A plugin selector that does not derive from
    :class:`~flexkit.Selector` declares none."""
    if not isinstance(selector, Selector):
        return []
    return ([Need("evaluation", f"{prefix}.{key}") for key in selector.evaluation_keys()]
            + [Need("group_accuracy", f"{prefix}.{key}") for key in selector.group_accuracy_keys()])


def pipeline_needs(pipe: Pipeline | TasksetScheduler) -> list[Need]:
    """Every :class:`Need` of ``pipe``: a :class:`~flexkit.Pipeline`'s from its config and its selectors'
    :meth:`~flexkit.Selector.evaluation_keys` (this builds the scheduler: its tasksets are opened); a bare
    :class:`~flexkit.TasksetScheduler`'s from its selectors alone (it has no ``[sample]`` or ``[replay]``)."""
    needs: list[Need] = []
    if isinstance(pipe, TasksetScheduler):
        scheduler = pipe
    else:
        config = pipe.config
        if config.sample is not None:
            needs.append(Need("sample", "sample"))
            if config.sample.refill is not None:
                needs.append(Need("refill", "sample.refill"))
        if config.replay is not None:
            needs.append(Need("replay", "replay"))
        scheduler = pipe.scheduler
    for number, entry in enumerate(scheduler.entries):
        needs.extend(selector_needs(entry.selector, f"tasksets[{number}].selector"))
    return needs


def unmet_needs(needs: list[Need], support: HostSupport) -> list[ConfigIssue]:
    """One :class:`~flexkit.ConfigIssue` per need in ``needs`` (:func:`pipeline_needs`, :func:`selector_needs`)
    that ``support`` does not give, in :data:`PARTS` order, each naming the key, the host, what the part needs and
    the host's advice."""
    issues = []
    no_evaluation = {need.key for need in needs if need.part == "evaluation" and not support.evaluation}
    for need in sorted(needs, key=lambda n: PARTS.index(n.part)):
        if support.gives(need.part) or (need.part == "group_accuracy" and need.key in no_evaluation):
            continue  # a key refused for want of any evaluation is not refused twice
        advice = support.advice.get(need.part) or f"remove {need.key}"
        issues.append(ConfigIssue(need.key, f"{support.name} does not honour this: it needs a host that "
                                            f"{_WHAT[need.part]}; {advice}"))
    return issues


def check_support(pipe: Pipeline | TasksetScheduler, support: HostSupport) -> None:
    """Refuse ``pipe`` (a pipeline or a bare scheduler) for this host: a :class:`~flexkit.ConfigError` listing every
    unmet need (:func:`unmet_needs`), attributed to the pipeline's file; nothing when the host honours it whole."""
    issues = unmet_needs(pipeline_needs(pipe), support)
    if issues:
        raise ConfigError(issues, None if isinstance(pipe, TasksetScheduler) else pipe.source)
