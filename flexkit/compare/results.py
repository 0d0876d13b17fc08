"""The records of a ``flexkit compare``: one run's outcome, one setting's runs, and the whole comparison."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from flexkit.compare.overrides import Setting

__all__ = ["Comparison", "ReportInfo", "RunOutcome", "SettingResult"]


@attrs.define
class RunOutcome:
    """One (setting, seed) run: its folder, evaluation curves and what it reached.

    ``curve`` pairs steps done with eval accuracy; ``rollout_curve`` pairs the responses generated so far (the
    run's own count, refills included) with the same evaluations.
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

    @property
    def rollouts(self) -> int:
        """Responses the run generated up to its last evaluation."""
        return self.rollout_curve[-1][0] if self.rollout_curve else 0


@attrs.define
class SettingResult:
    """All runs of one setting and what a step costs in rollouts."""

    setting: Setting
    rollouts_per_step: int
    runs: list[RunOutcome] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class ReportInfo:
    """How a comparison was run, as its reports state it beside the results (the keys of ``results.json``)."""

    target: float
    rule: str
    budget: int
    budget_rule: str
    command: str
    path: str
    seeds: Sequence[int]
    seconds: float


@attrs.define
class Comparison:
    """What :func:`~flexkit.compare.compare` produced."""

    out_dir: Path
    target: float
    target_rule: str
    budget: int
    budget_rule: str
    results: list[SettingResult]
    markdown: str
    plot: Path | None
