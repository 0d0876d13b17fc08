"""flexkit inside TRL's ``GRPOTrainer``, and TRL inside ``flexkit run``.

- :class:`FlexkitGRPOTrainer`: ``GRPOTrainer`` whose training sampler is a flexkit
  :class:`~flexkit.FlexkitSampler` with ``RepeatSampler``'s grouping, and whose rewards are
  fed back to the pipeline after each generation batch;
- :func:`with_index_column`: the dataset with its row index in a column (how rewards find their tasks);
- ``[trainer] type = "trl"`` (:mod:`flexkit_trl.plugin`, :class:`flexkit_trl.run_trainer.TRLRunTrainer`):
  ``flexkit run`` and ``flexkit compare`` training a causal LM with TRL's GRPO, one flexkit step at a time.

The names that need torch or TRL are imported on first use, so that the plugin's entry points (``flexkit_trl.plugin``,
``flexkit_trl.support``) load without torch or TRL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flexkit_trl.dataset import INDEX_COLUMN, with_index_column
    from flexkit_trl.trainer import FlexkitGRPOTrainer, repeat_sampler

__version__ = "0.1.0"

__all__ = ["INDEX_COLUMN", "FlexkitGRPOTrainer", "__version__", "repeat_sampler", "with_index_column"]

#: Each lazily imported name and its module.
_LAZY = {"FlexkitGRPOTrainer": "trainer", "repeat_sampler": "trainer", "INDEX_COLUMN": "dataset",
         "with_index_column": "dataset"}


def __getattr__(name: str) -> Any:
    """The names of ``__all__`` that need torch or TRL, imported when first asked for."""
    if name in _LAZY:
        import importlib

        return vars(importlib.import_module(f"flexkit_trl.{_LAZY[name]}"))[name]
    raise AttributeError(f"module 'flexkit_trl' has no attribute {name!r}")
