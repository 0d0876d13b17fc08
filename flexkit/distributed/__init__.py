"""Scaling out: data-parallel ranks (``torch.distributed``) and many rollout workers around one scheduler.

- :class:`~flexkit.distributed._torch_dist.DistributedPipeline` (imported on first use, it needs torch):
  every rank a replica, each reading its shard of the same global batch, feedback gathered before any selector
  changes;
- :class:`~flexkit.distributed._ledger.BatchLedger`: one scheduler (single writer) handing batches to many
  workers under leases, feedback applied exactly once per batch id; the ``flexkit-rft-ray`` plugin serves it from a
  Ray actor.

See ``docs/distributed.md``.
"""

from __future__ import annotations

from typing import Any

from flexkit.distributed._ledger import BatchLedger, Lease
from flexkit.distributed._payload import digest
from flexkit.errors import DistributedStateError  # noqa: F401  # importable here as before; home: flexkit.errors

__all__ = ["BatchLedger", "DistributedPipeline", "Lease", "digest", "shard_bounds"]

_TORCH_NAMES = ("DistributedPipeline", "shard_bounds")


def __getattr__(name: str) -> Any:
    """Import the torch.distributed part lazily, so ``import flexkit.distributed`` does not import torch."""
    if name in _TORCH_NAMES:
        from flexkit.distributed import _torch_dist as torch_dist

        return getattr(torch_dist, name)
    raise AttributeError(f"module 'flexkit.distributed' has no attribute {name!r}")
