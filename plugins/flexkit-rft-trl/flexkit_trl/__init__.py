"""flexkit inside TRL's ``GRPOTrainer``.

- :class:`FlexkitGRPOTrainer`: ``GRPOTrainer`` whose training sampler is a flexkit
  :class:`~flexkit.integrations.torch.FlexkitSampler` with ``RepeatSampler``'s grouping, and whose rewards are
  fed back to the pipeline after each generation batch;
- :func:`with_index_column`: the dataset with its row index in a column (how rewards find their tasks).
"""

from flexkit_trl.dataset import INDEX_COLUMN, with_index_column
from flexkit_trl.trainer import FlexkitGRPOTrainer, repeat_sampler

__version__ = "0.1.0"

__all__ = ["INDEX_COLUMN", "FlexkitGRPOTrainer", "__version__", "repeat_sampler", "with_index_column"]
