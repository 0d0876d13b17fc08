"""A select actuator that keeps or drops whole groups and tells the trainer how many groups to refill.

DAPO's dynamic sampling (arXiv 2503.14476) and Online Difficulty Filtering (arXiv 2504.03380) both drop
groups, then generate more until the training batch holds ``target`` kept groups, with a cap on extra
generation rounds. flexkit's actuator cannot roll out, so it reports what the trainer needs to refill:
:class:`GroupKeep` (a :class:`~flexkit.Keep` with group counts) and :meth:`GroupFilter.metrics`.

Calls for the same step accumulate: the first call at a step opens a round count and a target (the
configured ``target_groups``, or the first batch's number of groups); each further call at that step (a refill
batch) adds its kept groups. ``groups_needed = max(0, target − kept so far)``; ``refill`` is true while groups
are needed and fewer than ``max_rounds`` batches were filtered at this step. That count is a
:class:`~flexkit.sample._refill_count.RefillCount` (:attr:`GroupFilter.count`), also the filter's state.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit._metric_names import FILTER_ROUNDS, GROUPS_NEEDED, KEPT_GROUPS
from flexkit.config import field
from flexkit.errors import SampleError, StateMismatchError
from flexkit.sample._actuator import Actuator, Keep
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._refill_count import RefillCount


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
        #: The current step's count: target, rounds, groups kept so far.
        self.count = RefillCount()
        self.last: GroupKeep | None = None

    @abc.abstractmethod
    def keep_mask(self, scores: np.ndarray) -> np.ndarray:
        """A bool per sample: whether its (group) score passes the filter."""

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> GroupKeep:
        """Keep the samples of the groups whose every member passes; update the step's refill accounting."""
        step = int(step)
        count = self.count
        if count.step is not None and step < count.step:
            raise SampleError(f"steps must not go backwards: got step {step} after step {count.step}")
        values = scores.detach().to("cpu").double().numpy().reshape(-1)
        gid, num_groups = batch.group_index()
        passes = self.keep_mask(values)
        members = np.bincount(gid, minlength=num_groups)
        group_kept = np.bincount(gid, weights=passes, minlength=num_groups) == members
        kept_groups = int(group_kept.sum())
        if step != count.step:
            target = self.config.target_groups
            count = RefillCount.start(step, int(target) if target is not None else num_groups)
        indices = np.flatnonzero(group_kept[gid])
        count = self.count = count.add_round(groups=num_groups, passed=kept_groups, responses=len(values),
                                             responses_kept=len(indices))
        needed = count.groups_needed
        self.last = GroupKeep(indices, kept_groups=kept_groups, total_groups=num_groups,
                              kept_so_far=count.groups_passed, groups_needed=needed, rounds=count.rounds,
                              refill=needed > 0 and count.rounds < self.config.max_rounds,
                              target_groups=count.target_groups)
        return self.last

    def metrics(self) -> dict[str, float]:
        """The step's count so far (:attr:`count`): ``flexkit/sample/kept_groups`` (every call at this step),
        ``flexkit/sample/groups_needed`` and ``flexkit/sample/filter_rounds``; empty before the first call."""
        if self.last is None:
            return {}
        return {KEPT_GROUPS: float(self.count.groups_passed),
                GROUPS_NEEDED: float(self.count.groups_needed),
                FILTER_ROUNDS: float(self.count.rounds)}

    def state_dict(self) -> dict[str, Any]:
        """The current step's refill accounting (step, target, kept groups so far, rounds)."""
        return self.count.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if not state:
            return
        values = [int(state[k]) for k in ("target", "kept", "rounds")]
        if min(values) < 0:
            raise StateMismatchError(f"saved group filter state holds negative counts: {values}")
        self.count = RefillCount.from_state(state)
