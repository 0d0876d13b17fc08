"""``shuffle``: a fresh random permutation of the taskset every epoch, served in order.

Source: Trinity-RFT task selection ("Shuffles the dataset once per epoch; then iterates sequentially").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.errors import StateMismatchError
from flexkit.selectors._base import Selector


@attrs.frozen(kw_only=True)
class ShuffleConfig:
    """The ``shuffle`` selector takes no parameters."""


class ShuffleSelector(Selector):
    """Serve a random permutation of ``0 .. size-1`` per epoch.

    Each epoch's permutation is drawn from the selector's RNG when the epoch starts (the first one on the
    first call). A batch that crosses the end of an epoch takes the rest of that epoch and then the start of
    the next, as in the reference; such a batch may therefore hold an index twice (once per epoch).

    Consecutive epochs always differ (when ``size > 1``): a permutation equal to the previous epoch's is
    redrawn. This keeps the distribution uniform over the permutations other than the previous one; it
    matters only for tiny tasksets (with 2 tasks the epochs alternate ``[0, 1]`` / ``[1, 0]``).

    State: the current epoch's permutation, the position in it and the epoch number (plus the RNG), so a
    resumed run continues exactly.
    """

    Config = ShuffleConfig
    repeats_across_epochs = True  # a batch crossing the end of an epoch may hold an index once per epoch

    def _init_state(self) -> None:
        self.epoch = -1  # no epoch started yet
        self.position = 0
        self.permutation: np.ndarray | None = None

    def _next_epoch(self) -> None:
        new = self.rng.permutation(self.size)
        if self.permutation is not None and self.size > 1:
            while np.array_equal(new, self.permutation):
                new = self.rng.permutation(self.size)
        self.permutation = new.astype(np.int64, copy=False)
        self.epoch += 1
        self.position = 0

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        if self.permutation is None or self.position >= self.size:
            self._next_epoch()
        assert self.permutation is not None
        epoch, start = self.epoch, self.position
        take = min(batch_size, self.size - start)
        parts = [self.permutation[start : start + take]]
        self.position = start + take
        if take < batch_size:
            self._next_epoch()
            rest = batch_size - take
            parts.append(self.permutation[:rest])
            self.position = rest
        indices = np.concatenate(parts) if len(parts) > 1 else parts[0].copy()
        info = {"epoch": epoch, "position": start} if return_extra_info else {}
        return indices, info

    def state_dict(self) -> dict[str, Any]:
        """The RNG state, the epoch number, the position in the epoch and the epoch's permutation."""
        perm = None if self.permutation is None else self.permutation.copy()
        return {**super().state_dict(), "epoch": self.epoch, "position": self.position, "permutation": perm}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (lists in place of arrays are accepted)."""
        perm = state["permutation"]
        if perm is not None:
            perm = np.array(perm, dtype=np.int64)
            if perm.shape != (self.size,):
                raise StateMismatchError(f"saved permutation has shape {perm.shape}, expected ({self.size},)")
        position = int(state["position"])
        if not 0 <= position <= self.size:
            raise StateMismatchError(f"position {position} is out of range for a taskset of {self.size} tasks")
        super().load_state_dict(state)
        self.epoch = int(state["epoch"])
        self.position = position
        self.permutation = perm
