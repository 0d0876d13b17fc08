"""An example flexkit plugin: the ``reverse`` selector serves tasks from the last index down, wrapping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit import Register, Selector, field, hookimpl


@attrs.frozen(kw_only=True)
class ReverseConfig:
    """Parameters of the ``reverse`` selector."""

    skip: int = field(default=0, ge=0, doc="Tasks to skip at the start (from the end of the taskset).")


class ReverseSelector(Selector):
    """Serve tasks from the last index down to 0, then wrap around."""

    Config = ReverseConfig

    def _init_state(self) -> None:
        self.position = self.config.skip

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        steps = self.position + np.arange(batch_size)
        self.position += batch_size
        return (self.size - 1 - steps % self.size), {}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "position": self.position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.position = int(state["position"])


@hookimpl
def flexkit_register_selectors(register: Register) -> None:
    """Register the example's components."""
    register("reverse", ReverseSelector, ReverseConfig)
