"""What the pipeline's checkpoint helpers read of a pipeline, as a protocol, so that they need not import it.

:class:`~flexkit.Pipeline` satisfies :class:`PipelineView`; :mod:`flexkit.pipeline._state` and
:mod:`flexkit.pipeline._fingerprint` take one, and :mod:`flexkit.pipeline._pipeline` imports them, never the other way.
"""

from __future__ import annotations

from typing import Any, Protocol

from flexkit.config._models import PipelineConfig
from flexkit.errors import KeyPath
from flexkit.sample._stage import SampleStage
from flexkit.scheduler._scheduler import TasksetScheduler

__all__ = ["PipelineView"]


class PipelineView(Protocol):
    """A loaded pipeline as its state and fingerprint helpers see it."""

    @property
    def config(self) -> PipelineConfig:
        """The validated config."""

    @property
    def scheduler(self) -> TasksetScheduler:
        """The taskset scheduler (built on first use)."""

    def state_children(self) -> list[tuple[KeyPath, TasksetScheduler | SampleStage]]:
        """The owners of the pipeline's checkpointed state, each with its key path."""

    def check_state(self, state: Any, path: KeyPath, problems: list[str]) -> None:
        """Append the problems of ``state`` (the pipeline's slice of a checkpoint) to ``problems``."""
