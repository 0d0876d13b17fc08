"""``difficulty_based``: pick tasks whose predicted success rate is nearest a target (a Beta per task).

After Trinity-RFT's ``DifficultyBasedSelector`` (arXiv:2505.17826). The selector composes named parts, one module
per reader:

* :mod:`.model`: the configuration and the selector (the capability coefficient, ``ρ``, feedback, state), which
  builds the parts below and drives them;
* :mod:`._posterior`: every task's Beta posterior (the lazy O(batch) update and the fold), from :mod:`._features`
  (the caller's feature arrays, kept without a copy whatever their dtype), :mod:`._store` with :mod:`._store_state`
  (the stored values, kept only for recently observed tasks, and their saved form) and :mod:`._transform` (the
  global affine map from stored to true values);
* the exact selection engine: :mod:`._costs` (exact costs, the passes over all tasks) on the float32
  :mod:`._mirrors`, :mod:`._index` with :mod:`._task_model`, :mod:`._index_structures` and :mod:`._compact_grid` (the
  greedy top-k for ``tau = 0`` without a pass), :mod:`._sampling` (``tau > 0``), :mod:`._topk` (exact top-k
  helpers) and :mod:`.tuning` (its constants).
"""

from flexkit.selectors.difficulty_based._topk import smallest_k
from flexkit.selectors.difficulty_based.model import DifficultyBasedConfig, DifficultyBasedSelector

__all__ = ["DifficultyBasedConfig", "DifficultyBasedSelector", "smallest_k"]
