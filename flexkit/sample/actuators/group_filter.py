"""A select actuator that keeps or drops whole groups and tells the trainer how many groups to refill.

DAPO's dynamic sampling (arXiv 2503.14476) and Online Difficulty Filtering (arXiv 2504.03380) both drop
groups, then generate more until the training batch holds ``target`` kept groups, with a cap on extra
generation rounds. flexkit's actuator cannot roll out, so it reports what the trainer needs to refill:
:class:`GroupKeep` (a :class:`~flexkit.sample.actuator.Keep` with group counts) and :meth:`GroupFilter.metrics`.

Calls for the same step accumulate: the first call at a step opens a round count and a target (the
configured ``target_groups``, or the first batch's number of groups); each further call at that step (a refill
batch) adds its kept groups. ``groups_needed = max(0, target − kept so far)``; ``refill`` is true while groups
are needed and fewer than ``max_rounds`` batches were filtered at this step.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import SampleError, StateMismatchError
from flexkit.sample.actuator import Actuator, Keep
from flexkit.sample.batch import RolloutBatch


def target_groups_field() -> Any:
    """The ``target_groups`` config field of group filters."""
    return field(
        default=None, ge=1,
        doc="Kept groups the trainer wants per step (unset: the number of groups in the step's first batch).",
    )


def max_rounds_field() -> Any:
    """The ``max_rounds`` config field of group filters."""
    return field(
        default=10, ge=1, le=1_000_000,
        doc="Most batches filtered per step (the first plus refills) before refill turns false.",
    )


@attrs.frozen(eq=False, kw_only=True)
class GroupKeep(Keep):
    """A :class:`Keep` that also says how many groups were kept and how many more the step needs."""

    kept_groups: int = attrs.field(default=0)
    total_groups: int = attrs.field(default=0)
    kept_so_far: int = attrs.field(default=0)
    groups_needed: int = attrs.field(default=0)
    rounds: int = attrs.field(default=1)
    refill: bool = attrs.field(default=False)
    target_groups: int = attrs.field(default=0)


class GroupFilter(Actuator):
    """Base of group filters: subclasses say which (B,) prompt scores keep their group (:meth:`keep_mask`)."""

    mechanism = "select"
    accepts = ("prompt",)
    #: Reports the groups a step still needs, so ``[sample.refill]`` (dynamic sampling) can drive it.
    refills = True

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._step: int | None = None
        self._target = 0
        self._kept = 0
        self._rounds = 0
        self.last: GroupKeep | None = None

    @abc.abstractmethod
    def keep_mask(self, scores: np.ndarray) -> np.ndarray:
        """A bool per sample: whether its (group) score passes the filter."""

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> GroupKeep:
        """Keep the samples of the groups whose every member passes; update the step's refill accounting."""
        step = int(step)
        if self._step is not None and step < self._step:
            raise SampleError(f"steps must not go backwards: got step {step} after step {self._step}")
        values = scores.detach().to("cpu").double().numpy().reshape(-1)
        gid, num_groups = batch.group_index()
        passes = self.keep_mask(values)
        members = np.bincount(gid, minlength=num_groups)
        group_kept = np.bincount(gid, weights=passes, minlength=num_groups) == members
        kept_groups = int(group_kept.sum())
        if step != self._step:
            self._step, self._kept, self._rounds = step, 0, 0
            target = self.config.target_groups
            self._target = int(target) if target is not None else num_groups
        self._kept += kept_groups
        self._rounds += 1
        needed = max(0, self._target - self._kept)
        self.last = GroupKeep(np.flatnonzero(group_kept[gid]), kept_groups=kept_groups, total_groups=num_groups,
                              kept_so_far=self._kept, groups_needed=needed, rounds=self._rounds,
                              refill=needed > 0 and self._rounds < self.config.max_rounds,
                              target_groups=self._target)
        return self.last

    def metrics(self) -> dict[str, float]:
        """``sample/kept_groups``, ``sample/groups_needed``, ``sample/filter_rounds`` of the latest call."""
        if self.last is None:
            return {}
        return {"sample/kept_groups": float(self.last.kept_groups),
                "sample/groups_needed": float(self.last.groups_needed),
                "sample/filter_rounds": float(self.last.rounds)}

    def state_dict(self) -> dict[str, Any]:
        """The current step's refill accounting (step, target, kept groups so far, rounds)."""
        return {"step": self._step, "target": self._target, "kept": self._kept, "rounds": self._rounds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if not state:
            return
        values = [int(state[k]) for k in ("target", "kept", "rounds")]
        if min(values) < 0:
            raise StateMismatchError(f"saved group filter state holds negative counts: {values}")
        self._step = None if state["step"] is None else int(state["step"])
        self._target, self._kept, self._rounds = values
