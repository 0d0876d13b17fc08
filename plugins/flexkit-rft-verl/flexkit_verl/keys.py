"""Reading a key of a verl (Hydra) config by its dotted name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["config_get"]


def config_get(config: Any, dotted: str, default: Any = None) -> Any:
    """``config``'s value at ``dotted`` (``"actor_rollout_ref.rollout.n"``), or ``default`` when a part is absent or
    ``None``; ``config`` is a dict or an OmegaConf ``DictConfig`` (a ``Mapping`` too)."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return default
        node = node.get(part, None)
        if node is None:
            return default
    return node
