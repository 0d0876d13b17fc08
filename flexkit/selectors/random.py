"""``random``: each batch is ``batch_size`` distinct indices drawn uniformly, independent of earlier batches.

Source: Trinity-RFT task selection ("Randomly samples without replacement within each batch. Independent
across batches.").
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from flexkit.selectors._base import Selector


@attrs.frozen(kw_only=True)
class RandomConfig:
    """The ``random`` selector takes no parameters."""


class RandomSelector(Selector):
    """Draw ``batch_size`` distinct indices uniformly at random on every call.

    Batches are independent: a task can appear in consecutive batches. The cost is O(batch_size) per call for
    small batches (numpy's ``Generator.choice`` without replacement). Feedback is ignored; the only state is
    the RNG.
    """

    Config = RandomConfig

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        indices = self.rng.choice(self.size, size=batch_size, replace=False).astype(np.int64, copy=False)
        return indices, ({"method": "uniform without replacement"} if return_extra_info else {})
