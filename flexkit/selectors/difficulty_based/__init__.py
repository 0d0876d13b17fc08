"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

After Trinity-RFT's ``DifficultyBasedSelector`` (arXiv:2505.17826). The selector composes named parts, one module
per reader:

* :mod:`.model`: the configuration and the selector (the capability coefficient, ``ρ``, feedback, state), which
  builds the parts below and drives them;
* :mod:`.posterior`: every task's Beta posterior (the lazy O(batch) update and the fold), from :mod:`.features`
  (the caller's feature arrays, kept without a copy whatever their dtype), :mod:`.store` with :mod:`.store_state`
  (the stored values, kept only for recently observed tasks, and their saved form) and :mod:`.transform` (the
  global affine map from stored to true values);
* the exact selection engine: :mod:`.costs` (exact costs, the passes over all tasks) on the float32
  :mod:`.mirrors`, :mod:`.index` with :mod:`.task_model`, :mod:`.index_structures` and :mod:`.compact_grid` (the
  greedy top-k for ``tau = 0`` without a pass), :mod:`.sampling` (``tau > 0``), :mod:`.topk` (exact top-k
  helpers) and :mod:`.tuning` (its constants).
"""

from flexkit.selectors.difficulty_based.model import DifficultyBasedConfig, DifficultyBasedSelector
from flexkit.selectors.difficulty_based.topk import smallest_k

__all__ = ["DifficultyBasedConfig", "DifficultyBasedSelector", "smallest_k"]
