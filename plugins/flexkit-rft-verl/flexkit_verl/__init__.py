"""flexkit inside verl 0.9.x: the v1 trainer (default) and the legacy ``RayPPOTrainer``.

v1 (``trainer.use_v1=true``): ``python -m flexkit_verl.main_ppo ... +flexkit.pipeline=/abs/pipeline.toml``, or
verl's own entry point with ``trainer.v1.sampler.custom_sampler.path=pkg://flexkit_verl.replay_buffer`` (the
sample stage alone); see :mod:`flexkit_verl.replay_buffer`, :mod:`flexkit_verl.trainer_v1` (with ``[replay]``:
:mod:`flexkit_verl.tq_replay`), :mod:`flexkit_verl.main_ppo`, :mod:`flexkit_verl.config` and
:mod:`flexkit_verl.checks`. Legacy:

- :class:`FlexkitSampler`: pass it as ``RayPPOTrainer(..., train_sampler=...)``; verl's ``StatefulDataLoader``
  saves its state with the trainer checkpoint (``data.pt``); :meth:`FlexkitSampler.update` feeds a rollout
  ``DataProto`` back (rewards grouped by ``uid`` → ``pass_rate_calculator`` → selectors);
- :class:`IndexedDataset`: wraps the training dataset so every row carries its dataset index through rollout;
- :func:`apply_token_weights`: the pipeline's sample stage on a ``DataProto``, multiplied into
  ``rollout_is_weights``;
- :class:`FlexkitTrainerMixin`: ``class Trainer(FlexkitTrainerMixin, RayPPOTrainer)`` calls both before each
  actor update, and with ``[replay]`` adds the stored groups of earlier steps to it (:mod:`flexkit_verl.replay`).

verl itself is imported only where a function needs it, so this package imports without verl.
"""

from flexkit_verl.config import pipeline_from_config
from flexkit_verl.dataset import INDEX_KEY, IndexedDataset, dataset_indices
from flexkit_verl.sampler import FlexkitSampler
from flexkit_verl.trainer import FlexkitTrainerMixin
from flexkit_verl.weights import apply_token_weights, to_rollout_batch

__version__ = "0.1.0"

__all__ = [
    "INDEX_KEY",
    "FlexkitSampler",
    "FlexkitTrainerMixin",
    "IndexedDataset",
    "__version__",
    "apply_token_weights",
    "dataset_indices",
    "pipeline_from_config",
    "to_rollout_batch",
]
