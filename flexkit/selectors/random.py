"""``random``: each batch is ``batch_size`` distinct indices drawn uniformly, independent of earlier batches.

Source: Trinity-RFT task selection ("Randomly samples without replacement within each batch. Independent
across batches.").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from flexkit.selectors.base import Seed, Selector


@attrs.frozen(kw_only=True)
class RandomConfig:
    """The ``random`` selector takes no parameters."""


class RandomSelector(Selector):
    """Draw ``batch_size`` distinct indices uniformly at random on every call.

    Batches are independent: a task can appear in consecutive batches. The cost is O(batch_size) per call for
    small batches (numpy's ``Generator.choice`` without replacement). Feedback is ignored; the only state is
    the RNG.
    """

    def __init__(
        self,
        config: RandomConfig | None = None,
        *,
        size: int,
        seed: Seed = 0,
        features: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        config = config if config is not None else RandomConfig()
        super().__init__(config, size=size, seed=seed, features=features)

    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        indices = self.rng.choice(self.size, size=batch_size, replace=False).astype(np.int64, copy=False)
        return indices, ({"method": "uniform without replacement"} if return_extra_info else {})
