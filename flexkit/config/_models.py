"""The pipeline's own config tables (components bring their own config classes through plugins)."""

from __future__ import annotations

from typing import Literal

import attrs

from flexkit.config._components import (
    ActuatorSpec,
    FeedbackSpec,
    ScorerSpec,
    SelectorSpec,
    StorageSpec,
    TrainerSpec,
    component_field,
    default_table,
)
from flexkit.config._fields import field
from flexkit.errors import ConfigError, ConfigIssue


@attrs.frozen(kw_only=True)
class RunConfig:
    """``[run]``: how batches are drawn and when the run ends."""

    batch_size: int = field(ge=1, doc="Tasks per training batch (before rollouts are multiplied).")
    seed: int = field(default=0, ge=0, doc="Pipeline seed; every random stream derives from it.")
    total_epochs: int | None = field(
        default=None, ge=1, doc="Epochs over all tasksets (default 1 when total_steps is not set)."
    )
    total_steps: int | None = field(default=None, ge=1, doc="Stop after this many steps (instead of epochs).")
    max_rollouts: int | None = field(
        default=None, ge=1,
        doc="flexkit run: also stop after the step at which this many responses have been generated (refills "
        "included), with a last evaluation and checkpoint; for comparisons at a fixed rollout budget.",
    )
    eval_every: int = field(
        default=10, ge=0, doc="flexkit run: evaluate every this many steps (and at the start and end); 0: never."
    )
    checkpoint_every: int = field(
        default=50, ge=0, doc="flexkit run: checkpoint every this many steps (and at the end); 0: only at the end."
    )
    prefetch: bool | None = field(
        default=None,
        doc="true: select and read the next batch in the background right after each read, so feedback given "
        "after a read shapes the batch after next; false: select each batch when it is read. Default: with a "
        "selector that learns from feedback or [sample.refill], the next batch is selected in the background "
        "right after the step's feedback (it sees that feedback, as with false; off with a mix stage); true "
        "otherwise.",
    )

    def __attrs_post_init__(self) -> None:
        if self.total_epochs is not None and self.total_steps is not None:
            raise ConfigError([ConfigIssue("total_steps", "set total_epochs or total_steps, not both")])


@attrs.frozen(kw_only=True)
class TasksetConfig:
    """One ``[[tasksets]]`` table: a named taskset, where it is stored, and its selector.

    The storage keys (``storage_type`` and its parameters, e.g. ``path``) sit in the same table.
    """

    name: str = field(doc="Taskset name, unique in the pipeline; used in logs and feedback.")
    weight: float | None = field(
        default=None, gt=0, doc="Share of each epoch relative to other tasksets' weights (default: its size)."
    )
    selector: SelectorSpec = component_field(
        default_type="sequential", doc="How indices are picked inside this taskset."
    )
    storage: StorageSpec = component_field(default_type="file", inline=True, doc="Where the tasks are stored.")

    def __attrs_post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError([ConfigIssue("name", "must not be empty")])


@attrs.frozen(kw_only=True)
class FeedbackConfig:
    """``[feedback]``: the operator that turns experiences into selector feedback, and the value policy."""

    out_of_range: Literal["clip", "error"] = field(
        default="clip", doc="Feedback values outside [0, 1]: clip them into range, or reject the payload."
    )
    operator: FeedbackSpec = component_field(
        default_type="pass_rate_calculator", inline=True, doc="The feedback operator (key: type)."
    )


@attrs.frozen(kw_only=True)
class RefillConfig:
    """``[sample.refill]``: dynamic sampling in ``flexkit run`` (DAPO, arXiv 2503.14476).

    With this table, each training step rolls out a batch, drops the groups the ``[sample]`` group filter
    rejects, and draws more batches until the kept groups reach the filter's ``target_groups`` (default: one
    batch's worth) or the filter's ``max_rounds`` is reached. Every rolled-out group's feedback reaches the
    selectors.
    """

    surplus: Literal["drop", "keep"] = field(
        default="drop",
        doc="Groups kept beyond the target in the last round: drop them (train on exactly the target, as DAPO "
        "does) or keep them (train on all kept groups).",
    )


@attrs.frozen(kw_only=True)
class SampleConfig:
    """``[sample]``: the sample-level stage after rewards: a scorer and an actuator (after DataFlex-RL)."""

    mechanism: Literal["select", "reweight", "mix"] = field(
        doc="What the actuator does: keep some rollouts (select), weight them (reweight), or set taskset "
        "proportions for the scheduler (mix)."
    )
    estimator: str = field(
        default="grpo",
        doc="The trainer's advantage estimator (grpo, rloo, grpo_passk, opo, gae, ...); scorers that need "
        "groups of responses per prompt are refused with a non-group estimator such as gae.",
    )
    weights_key: str = field(
        default="rollout_is_weights",
        doc="Batch field holding per-token weights the trainer already computed; flexkit multiplies into it.",
    )
    scorer: ScorerSpec = component_field(doc="The scorer (key: type) and its parameters.")
    actuator: ActuatorSpec = component_field(doc="The actuator (key: type) and its parameters.")
    refill: RefillConfig | None = field(
        default=None,
        doc="Dynamic sampling: refill dropped groups with new rollouts until the batch is full (needs a group "
        "filter such as zero_variance_filter; its max_rounds caps the rounds).",
    )


@attrs.frozen(kw_only=True)
class ReplayConfig:
    """``[replay]``: rollout replay in ``flexkit run`` (after DOTS, arXiv 2506.05316; ``flexkit.host.ReplayBuffer``).

    Each step's update also trains on up to ``groups`` informative answer groups (their rewards differ) that
    earlier steps generated, newest first, none older than ``max_age`` steps. Replayed answers are not generated
    again, so each step generates only ``[run] batch_size`` tasks' answers: set it to the fresh part of the batch
    (e.g. half the batch you trained on before, with ``groups`` the other half). The trainer must weigh replayed
    rows by their behaviour log-probabilities (:attr:`flexkit.Trainer.supports_replay`).
    """

    groups: int = field(ge=1, doc="Stored groups added to each step's update at most (newest first).")
    max_age: int = field(
        default=2, ge=1,
        doc="A stored group is replayed on the steps at most this many after the one that generated it.",
    )


@attrs.frozen(kw_only=True)
class PipelineConfig:
    """A whole pipeline file."""

    plugins: tuple[str, ...] = field(
        factory=tuple, doc="Extra plugins for this pipeline: module names or .py paths relative to this file."
    )
    run: RunConfig = field(doc="Run settings.")
    tasksets: tuple[TasksetConfig, ...] = field(min_items=1, doc="The tasksets batches are drawn from.")
    feedback: FeedbackConfig = default_table(doc="Feedback operator and policy (default: pass_rate_calculator).")
    sample: SampleConfig | None = field(default=None, doc="The sample-level stage (optional).")
    replay: ReplayConfig | None = field(
        default=None, doc="flexkit run: train each step on recent informative groups again (optional)."
    )
    trainer: TrainerSpec | None = field(
        default=None, doc="The trainer backend `flexkit run` drives (key: type), e.g. the simulator."
    )

    def __attrs_post_init__(self) -> None:
        seen: dict[str, int] = {}
        issues = []
        for i, taskset in enumerate(self.tasksets):
            if taskset.name in seen:
                message = f"duplicate taskset name {taskset.name!r} (also tasksets[{seen[taskset.name]}])"
                issues.append(ConfigIssue(f"tasksets[{i}].name", message))
            seen.setdefault(taskset.name, i)
        if self.sample is not None and self.sample.refill is not None and self.run.prefetch:
            issues.append(ConfigIssue("run.prefetch", "prefetch = true cannot be combined with [sample.refill]: a "
                                      "prefetched refill round would be selected before the previous round's "
                                      "feedback; remove prefetch (by default each refill round is selected "
                                      "right after the previous round's feedback)"))
        if (self.replay is not None and self.sample is not None and self.sample.refill is None
                and self.sample.mechanism != "mix"):
            issues.append(ConfigIssue("replay", f"[replay] cannot be combined with a {self.sample.mechanism} "
                                      "[sample] stage without [sample.refill] (its per-sample weights would not "
                                      "cover the replayed rows): drop one of them, or add [sample.refill] to its "
                                      "group filter"))
        if issues:
            raise ConfigError(issues)
