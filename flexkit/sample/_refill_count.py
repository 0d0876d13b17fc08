"""A training step's refill accounting, in one record: :class:`RefillCount`.

A step generates one or more rounds (more under dynamic sampling, ``[sample.refill]``); each round's groups
are drawn, filtered (a group filter keeps some), and, past the step's target, dropped as surplus. The counts of
those rounds live here and nowhere else: a group filter keeps the step's count of the groups it kept
(:class:`~flexkit.sample.actuators.group_filter.GroupFilter`: target, rounds, kept so far; its checkpointed
state), :func:`flexkit.fill_batch` returns the step's count with what the update trains on and
what the rounds cost (``FilledBatch.count``), ``flexkit run`` writes :meth:`RefillCount.metrics` into its records
and :func:`flexkit.pipeline_metrics` reports the same names for a host adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from flexkit._metric_names import FILTER_ROUNDS, KEPT_FRACTION, KEPT_GROUPS

__all__ = ["RefillCount"]


@attrs.frozen(kw_only=True)
class RefillCount:
    """One step's rounds, groups and responses; :meth:`add_round` returns the count with one more round."""

    #: The training step counted (``None``: none yet).
    step: int | None = None
    #: Groups the step wants kept (a group filter's ``target_groups``; 0: no target, no refill).
    target_groups: int = 0
    #: Rounds (batches generated and filtered) this step.
    rounds: int = 0
    #: Groups generated this step, kept or not.
    groups_drawn: int = 0
    #: Groups the filter kept this step, before the surplus rule.
    groups_passed: int = 0
    #: Groups the update trains on (after the surplus rule).
    groups_kept: int = 0
    #: Responses generated this step, kept or not: the cost (rollouts spent).
    responses: int = 0
    #: Responses the update trains on (``None``: the step's stage weights responses rather than selecting them).
    responses_kept: int | None = None
    #: Response tokens generated this step (``response_mask`` summed).
    tokens: int = 0

    @classmethod
    def start(cls, step: int, target_groups: int = 0) -> RefillCount:
        """A count for ``step`` before its first round."""
        return cls(step=step, target_groups=target_groups, responses_kept=0)

    @property
    def groups_needed(self) -> int:
        """Groups still missing for the target (0 once the filter kept enough)."""
        return max(0, self.target_groups - self.groups_passed)

    @property
    def surplus_dropped(self) -> int:
        """Groups the filter kept that the update does not train on (the last round's beyond the target)."""
        return self.groups_passed - self.groups_kept

    @property
    def kept_fraction(self) -> float | None:
        """Responses trained on / responses generated (``None`` when the responses are weighted, not selected)."""
        if self.responses_kept is None:
            return None
        return self.responses_kept / self.responses if self.responses else 0.0

    def add_round(self, *, groups: int, passed: int, kept: int | None = None, responses: int = 0,
                  responses_kept: int | None = None, tokens: int = 0) -> RefillCount:
        """The count with one more round of ``groups`` groups, ``passed`` of them kept by the filter and ``kept``
        of those trained on (default: all ``passed``), ``responses`` responses (``responses_kept`` trained on)
        and ``tokens`` tokens."""
        trained = self.responses_kept
        if trained is not None and responses_kept is not None:
            trained += responses_kept
        elif responses_kept is None:
            trained = None
        return attrs.evolve(self, rounds=self.rounds + 1, groups_drawn=self.groups_drawn + groups,
                            groups_passed=self.groups_passed + passed,
                            groups_kept=self.groups_kept + (passed if kept is None else kept),
                            responses=self.responses + responses, responses_kept=trained,
                            tokens=self.tokens + tokens)

    def metrics(self) -> dict[str, float]:
        """The step's ``flexkit/sample/...`` counts: kept groups and rounds (whole numbers) and the kept fraction
        (when responses were selected). The groups still needed are the group filter's to report."""
        out: dict[str, float] = {KEPT_GROUPS: self.groups_kept, FILTER_ROUNDS: self.rounds}
        fraction = self.kept_fraction
        if fraction is not None:
            out[KEPT_FRACTION] = fraction
        return out

    def state_dict(self) -> dict[str, Any]:
        """What a group filter checkpoints: step, target, groups kept so far and rounds."""
        return {"step": self.step, "target": self.target_groups, "kept": self.groups_passed, "rounds": self.rounds}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RefillCount:
        """The count a group filter saved with :meth:`state_dict` (its caller checks the values)."""
        target, kept, rounds = (int(state[k]) for k in ("target", "kept", "rounds"))
        return cls(step=None if state["step"] is None else int(state["step"]), target_groups=target, rounds=rounds,
                   groups_passed=kept, groups_kept=kept)
