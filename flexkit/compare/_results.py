"""The records of a ``flexkit compare``: one run's outcome (or failure), one setting's runs, and the whole
comparison."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from flexkit.config._overrides import Setting

__all__ = ["Comparison", "ReportInfo", "RunFailure", "RunOutcome", "SettingResult", "Spent"]


@attrs.frozen
class Spent:
    """What a run had spent by one of its evaluations, cumulated over its steps: the samples that entered the loss
    (replayed ones included), the optimizer steps, and the wall seconds of the run so far (its record's
    ``flexkit/run/seconds``; ``None`` for a record written before it existed)."""

    trained_samples: int = 0
    optimizer_steps: int = 0
    seconds: float | None = None


@attrs.define
class RunOutcome:
    """One (setting, seed) run: its folder, evaluation curves, what it spent and what it reached.

    ``curve`` pairs steps done with eval accuracy; ``rollout_curve`` pairs the responses generated so far (the
    run's own count, refills included) with the same evaluations; ``level_curves`` maps each level's key
    (``eval_accuracy/<level>``) to its ``(rollouts, accuracy)`` pairs. ``steps`` counts training steps,
    ``optimizer_steps`` those whose update trained on at least one sample, and ``trained_samples`` the samples
    (responses) that entered the loss, summed over steps; ``level_draws`` the tasks drawn per level of their rows,
    summed over steps (empty when the run logged no level mix). ``spent_curve`` holds what the run had spent by
    each evaluation of ``curve`` (:class:`Spent`, one per point, in order). The ``*_to_targets`` and
    ``accuracy_at_budgets`` lists follow the comparison's targets and budgets: at the first evaluation reaching a
    target, its steps, rollouts, trained samples, optimizer steps and seconds (``None``: not reached, or for
    seconds not logged); ``steps_to_target``, ``rollouts_to_target`` (the first target) and ``accuracy_at_budget``
    (the largest budget) are the single values of earlier versions.
    """

    seed: int
    run_dir: Path
    curve: list[tuple[int, float]]
    final: dict[str, float]
    seconds: float
    rollout_curve: list[tuple[int, float]] = attrs.field(factory=list)
    steps_to_target: int | None = None
    rollouts_to_target: int | None = None
    accuracy_at_budget: float | None = None
    level_curves: dict[str, list[tuple[int, float]]] = attrs.field(factory=dict)
    steps: int = 0
    optimizer_steps: int = 0
    trained_samples: int = 0
    steps_to_targets: list[int | None] = attrs.field(factory=list)
    rollouts_to_targets: list[int | None] = attrs.field(factory=list)
    accuracy_at_budgets: list[float | None] = attrs.field(factory=list)
    level_draws: dict[str, int] = attrs.field(factory=dict)
    spent_curve: list[Spent] = attrs.field(factory=list)
    trained_samples_to_targets: list[int | None] = attrs.field(factory=list)
    optimizer_steps_to_targets: list[int | None] = attrs.field(factory=list)
    seconds_to_targets: list[float | None] = attrs.field(factory=list)

    @property
    def rollouts(self) -> int:
        """Responses the run generated up to its last evaluation."""
        return self.rollout_curve[-1][0] if self.rollout_curve else 0


@attrs.frozen
class RunFailure:
    """A (setting, seed) run that did not finish: its exit status (``None`` when unknown) and its stderr's
    last lines (for a run in the comparison's own process: the error it raised)."""

    seed: int
    run_dir: Path
    exit_status: int | None
    stderr_tail: str


@attrs.define
class SettingResult:
    """All runs of one setting (finished and failed) and what a step costs in rollouts."""

    setting: Setting
    rollouts_per_step: int
    runs: list[RunOutcome] = attrs.field(factory=list)
    failures: list[RunFailure] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class ReportInfo:
    """How a comparison was run, as its reports state it beside the results (the keys of ``results.json``).

    ``target`` and ``rule`` are the first target's; ``budget`` and ``budget_rule`` the largest budget's.
    """

    target: float
    rule: str
    budget: int
    budget_rule: str
    command: str
    path: str
    seeds: Sequence[int]
    seconds: float
    targets: Sequence[float] = ()
    budgets: Sequence[int] = ()


@attrs.define
class Comparison:
    """What :func:`~flexkit.compare.compare` produced; ``failures`` lists the runs that did not finish."""

    out_dir: Path
    target: float
    target_rule: str
    budget: int
    budget_rule: str
    results: list[SettingResult]
    markdown: str
    plot: Path | None
    targets: list[float] = attrs.field(factory=list)
    budgets: list[int] = attrs.field(factory=list)
    level_plot: Path | None = None

    @property
    def failures(self) -> list[tuple[str, RunFailure]]:
        """``(setting name, failure)`` for every run that did not finish."""
        return [(res.setting.name, f) for res in self.results for f in res.failures]
