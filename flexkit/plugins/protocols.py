"""The stage contracts as typing protocols: what flexkit calls on each kind of component.

A component need not derive from flexkit's base classes (:class:`~flexkit.selectors.Selector`,
:class:`~flexkit.sample.Scorer`, :class:`~flexkit.sample.Actuator`, :class:`~flexkit.plugins.trainer.Trainer`,
:class:`~flexkit.tasksets.Taskset`): the plugin host checks what a factory built against
:data:`flexkit.plugins.contracts.REQUIRED`, and flexkit then uses only the members named here. Annotations take these
protocols where any conforming object will do. Members a component may lack (``bind``, ``metrics``,
``learns_from_feedback``, ``check_rows``, ``content_id``, ``set_progress``, ...) are not part of them: flexkit
probes for those.

The sample level's types (:class:`~flexkit.sample.RolloutBatch`, the actions) live above this module's layer, so
the scorer's and actuator's batches, scores and actions are typed ``Any`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from flexkit.plugins.trainer import Rollout

__all__ = [
    "ActuatorLike",
    "FeedbackOperator",
    "GroupFilterLike",
    "OutOfRange",
    "ScorerLike",
    "SelectorLike",
    "Stateful",
    "TasksetLike",
    "TrainerLike",
    "is_group_filter",
]

#: What to do with a feedback value outside [0, 1]: clip it into range, or reject the payload.
OutOfRange = Literal["clip", "error"]


class Stateful(Protocol):
    """A component whose state a checkpoint holds: plain data (JSON values and numpy arrays)."""

    def state_dict(self) -> dict[str, Any]:
        """The state to continue exactly."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        ...


class SelectorLike(Stateful, Protocol):
    """A selector: picks task indices inside one taskset and learns from feedback (``stage = "selector"``)."""

    def get_indices(
        self, batch_size: int, return_extra_info: bool = False
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """The indices of the next ``batch_size`` tasks (with ``return_extra_info``: ``(indices, info)``)."""
        ...

    def feedback(
        self,
        indices: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        *,
        out_of_range: OutOfRange = "clip",
    ) -> None:
        """Learn from observed values (e.g. each task's mean reward) for ``indices``."""
        ...


class TasksetLike(Protocol):
    """A taskset, as a storage's factory builds it (``stage = "storage"``): a table of tasks read by index."""

    def __len__(self) -> int:
        """The number of tasks (rows)."""
        ...

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` as fresh dicts, in the order asked."""
        ...

    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row as a float64 array (read only for selectors that use features)."""
        ...


class ScorerLike(Stateful, Protocol):
    """A scorer (``stage = "scorer"``): turns a rollout batch into scores of its ``granularity``."""

    @property
    def timing(self) -> str:
        """Where the runner calls the stage (one of :data:`flexkit.sample.scorer.TIMINGS`)."""
        ...

    @property
    def granularity(self) -> str:
        """What one score describes (one of :data:`flexkit.sample.scorer.GRANULARITIES`)."""
        ...

    def __call__(self, batch: Any, *, step: int) -> Any:
        """The scores of ``batch`` (a :class:`~flexkit.sample.RolloutBatch`) at training step ``step``."""
        ...


class ActuatorLike(Stateful, Protocol):
    """An actuator (``stage = "actuator"``): turns scores into one action of its ``mechanism``."""

    @property
    def mechanism(self) -> str:
        """One of :data:`flexkit.sample.scorer.MECHANISMS`."""
        ...

    @property
    def accepts(self) -> Sequence[str]:
        """The score granularities it understands."""
        ...

    def __call__(self, scores: Any, batch: Any, *, step: int) -> Any:
        """The action (``Keep``, ``Weights`` or ``Mix``) for ``scores`` of ``batch`` at ``step``."""
        ...


class GroupFilterLike(ActuatorLike, Protocol):
    """A select actuator that keeps or drops whole groups and reports the groups a step still needs, so that
    ``[sample.refill]`` (dynamic sampling) can drive it: its actions carry ``target_groups`` and ``refill``
    (:class:`~flexkit.sample.actuators.group_filter.GroupKeep`)."""

    @property
    def refills(self) -> bool:
        """True: it reports the groups a step still needs."""
        ...


def is_group_filter(actuator: ActuatorLike) -> TypeGuard[GroupFilterLike]:
    """Whether ``actuator`` is a group filter that can drive a refill loop (its ``refills`` is true)."""
    return bool(getattr(actuator, "refills", False))


class TrainerLike(Stateful, Protocol):
    """A trainer backend (``stage = "trainer"``): what ``flexkit run`` drives each step
    (:mod:`flexkit.plugins.trainer`)."""

    def setup(self, pipeline: Any) -> None:
        """Called once before the first step (and before a checkpoint is loaded)."""
        ...

    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Generate responses for ``tasks`` and score them."""
        ...

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """Add ``advantages`` to ``batch``."""
        ...

    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One policy update from ``batch`` with per-token loss ``weights``; returns metrics."""
        ...

    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Held-out evaluation: at least ``eval_accuracy``."""
        ...


@runtime_checkable
class FeedbackOperator(Protocol):
    """What a ``[feedback]`` operator is: built by its registered factory as ``factory(config)``.

    It keeps no state a run depends on: a checkpoint does not hold it, and a resumed run rebuilds it from the
    config. Subclass :class:`~flexkit.plugins.configurable.Configurable` too for the default config and the name.
    """

    def process(self, experiences: Iterable[Any] | Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(experiences, {SELECTOR_METRIC: {taskset_id: {"indices": ..., "values": ...}}})``: the
        experiences (passed on to the trainer) and the feedback for the selectors (lists or 1-D arrays; the
        built-in operator gives int64 and float64 arrays)."""
        ...
