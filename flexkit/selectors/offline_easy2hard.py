"""``offline_easy2hard``: a fixed curriculum sorted by precomputed feature columns, replayed every epoch.

Source: Trinity-RFT task selection ("Sorts samples by pre-defined features (e.g., loss, length), serving
easier ones first, progressing to harder ones").
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit.config import field
from flexkit.selectors._base import read_feature_columns
from flexkit.selectors.sequential import SequentialSelector


@attrs.frozen(kw_only=True)
class OfflineEasy2HardConfig:
    """Parameters of the ``offline_easy2hard`` selector."""

    feature_keys: tuple[str, ...] = field(
        min_items=1,
        doc="Feature columns to sort by: the first is the primary key, later ones break ties.",
    )
    order: str = field(
        default="descending",
        choices=("descending", "ascending"),
        doc='"descending": a higher feature value is easier and served first (as in Trinity-RFT); '
        '"ascending": lower values first.',
    )


class OfflineEasy2HardSelector(SequentialSelector):
    """Serve tasks in a fixed order sorted by feature columns, wrapping so the curriculum replays each epoch.

    The order is built once with ``np.lexsort``: ``feature_keys[0]`` is the primary key, later keys break
    ties. With ``order="ascending"`` remaining ties go to the smaller index first; ``"descending"`` is exactly
    the reverse order, so remaining ties go to the larger index first (as the reference does). Batches are
    served by :class:`~flexkit.selectors.sequential.SequentialSelector` over that order. Feedback is
    ignored. State: the position in the order (the order itself is rebuilt from the features).
    """

    Config = OfflineEasy2HardConfig

    def _init_state(self) -> None:
        super()._init_state()
        keys = self.config.feature_keys
        columns = read_feature_columns(self.features, keys, self.size, owner="offline_easy2hard")
        self._columns = dict(zip(keys, columns, strict=True))
        # np.lexsort sorts by its *last* key first and is stable (ties keep index order).
        order = np.lexsort(columns[::-1]).astype(np.int64, copy=False)
        if self.config.order == "descending":
            order = order[::-1].copy()
        self.order: np.ndarray = order

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        ranks, _ = super()._select(batch_size, False)
        indices = self.order[ranks]
        info: dict[str, Any] = {}
        if return_extra_info:
            info = {
                "rank": ranks,
                "features": {k: col[indices] for k, col in self._columns.items()},
            }
        return indices, info
