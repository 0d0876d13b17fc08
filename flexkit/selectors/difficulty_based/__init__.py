"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

After Trinity-RFT's ``DifficultyBasedSelector`` (arXiv:2505.17826). One module per reader:

* :mod:`.model`: the configuration and the selector, with its statistical model (Beta posteriors, capability
  coefficient, the lazy O(batch) update and fold, state);
* :mod:`.store` with :mod:`.store_state`: the posteriors, kept only for recently observed tasks (the others follow
  a model of their features), and their saved form;
* :mod:`.features`: the caller's feature arrays, kept without a copy whatever their dtype;
* the exact selection engine: :mod:`.costs` (float32 mirrors, exact costs, the passes over all tasks),
  :mod:`.index` with :mod:`.index_structures` and :mod:`.compact_grid` (the greedy top-k for ``tau = 0``
  without a pass),
  :mod:`.sampling` (``tau > 0``), :mod:`.topk` (exact top-k helpers) and :mod:`.tuning` (its constants).
"""

from flexkit.selectors.difficulty_based.model import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.difficulty_based.topk import smallest_k

__all__ = ["DifficultyBasedConfig", "DifficultyBasedSelector", "smallest_k"]
