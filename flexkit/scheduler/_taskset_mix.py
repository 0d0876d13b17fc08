"""The taskset mix: the proportions batches are drawn in, from a given step on.

A mix actuator's action reaches the scheduler through :meth:`Pipeline.apply_sample_stage
<flexkit.Pipeline.apply_sample_stage>` and :meth:`TasksetScheduler.set_mix
<flexkit.TasksetScheduler.set_mix>`, which keeps it as a :class:`TasksetMix`: the one copy of a
pipeline's mix. Its slice of a checkpoint is two keys of the scheduler's table, ``mix`` and ``mix_from``; the
sample stage keeps none (checkpoints written before flexkit stored the mix once also hold the stage's copy as
``sample.proportions``: it is ignored on load, :meth:`SampleStage.check_state
<flexkit.SampleStage.check_state>`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from flexkit._state_problems import add_problem, is_count, is_number, short
from flexkit.errors import KeyPath

__all__ = ["TasksetMix"]

_PROPORTIONS, _FROM = "mix", "mix_from"


@attrs.frozen
class TasksetMix:
    """Taskset proportions (by taskset id, summing to 1) that batches from step ``start`` on are drawn in;
    ``proportions`` None: no mix (the epoch plan by sizes or weights)."""

    proportions: tuple[float, ...] | None = None
    start: int = 0

    def applies(self, step: int) -> bool:
        """Whether batch ``step`` is drawn in these proportions."""
        return self.proportions is not None and step >= self.start

    def state_dict(self) -> dict[str, Any]:
        """The mix's keys of the scheduler's state: ``mix`` (a list, or None) and ``mix_from``."""
        return {_PROPORTIONS: None if self.proportions is None else list(self.proportions), _FROM: self.start}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> TasksetMix:
        """The mix held by a scheduler state (checked with :meth:`check_state`)."""
        mix = state.get(_PROPORTIONS)
        return cls(None if mix is None else tuple(float(w) for w in mix), int(state.get(_FROM, 0)))

    @staticmethod
    def check_state(state: Mapping[str, Any], path: KeyPath, problems: list[str], *, tasksets: int,
                    step: int | None) -> None:
        """Append the problems of the mix's keys of the scheduler state ``state`` (at ``path``) to ``problems``:
        ``tasksets`` finite proportions >= 0 summing to 1 (or null), and a ``mix_from`` step from 0 to ``step +
        1`` (the scheduler's step, when valid)."""
        mix = state.get(_PROPORTIONS)
        if mix is not None:
            if not isinstance(mix, list) or len(mix) != tasksets or not all(is_number(v) and v >= 0 for v in mix):
                add_problem(problems, (*path, _PROPORTIONS), f"expected {tasksets} finite proportions >= 0, got "
                                                             f"{short(mix)}")
            elif not math.isclose(math.fsum(mix), 1.0, rel_tol=0.0, abs_tol=1e-9):
                add_problem(problems, (*path, _PROPORTIONS), f"proportions must sum to 1, got a sum of "
                                                             f"{math.fsum(mix)!r}")
        start = state.get(_FROM, 0)
        if not is_count(start) or (step is not None and start > step + 1):
            add_problem(problems, (*path, _FROM), f"expected a step number from 0 to step + 1, got {short(start)}")
