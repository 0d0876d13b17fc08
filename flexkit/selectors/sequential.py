"""``sequential``: serve tasks in index order, wrapping around at the end.

Source: Trinity-RFT task selection ("Returns samples in fixed order (0, 1, ..., N)").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np

from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector


@attrs.frozen(kw_only=True)
class SequentialConfig:
    """The ``sequential`` selector takes no parameters."""


class SequentialSelector(Selector):
    """Serve ``position, position+1, ...`` modulo the taskset size.

    With 5 tasks and batches of 3 the batches are ``[0, 1, 2]``, ``[3, 4, 0]``, ``[1, 2, 3]``, ... A batch
    never exceeds the taskset size, so it never holds an index twice. Feedback is ignored. State: the
    position of the next task.
    """

    Config: ClassVar[type[Any] | None] = SequentialConfig  # a subclass names its own (offline_easy2hard)

    def _init_state(self) -> None:
        self.position = 0

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        start = self.position
        indices = (start + np.arange(batch_size, dtype=np.int64)) % self.size
        self.position = (start + batch_size) % self.size
        return indices, ({"position": start} if return_extra_info else {})

    def state_dict(self) -> dict[str, Any]:
        """The RNG state and the position of the next task."""
        return {**super().state_dict(), "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        position = int(state["position"])
        if not 0 <= position < self.size:
            raise StateMismatchError(f"position {position} is out of range for a taskset of {self.size} tasks")
        super().load_state_dict(state)
        self.position = position
