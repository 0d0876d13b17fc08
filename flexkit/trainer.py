"""The trainer protocol: what ``flexkit run`` drives each step.

A trainer backend is registered through ``flexkit_register_trainers`` and named by a pipeline's ``[trainer]``
table. Each step the runner (:mod:`flexkit.runner`) does::

    tasks = pipe.scheduler.read()
    rollout = trainer.rollout(tasks, step=step)            # rewards per response, experiences per response
    pipe.feedback(rollout.experiences)                     # pass_rate_calculator -> selectors
    pipe.apply_sample_stage(rollout.batch, step=step, timing="post_reward")
    trainer.compute_advantages(rollout.batch, step=step)
    pipe.apply_sample_stage(rollout.batch, step=step, timing="post_advantage")
    weights = pipe.sample_stage.token_weights(rollout.batch, step=step)   # select / reweight stages only
    metrics = trainer.update(rollout.batch, weights, step=step)

and every ``[run] eval_every`` steps ``trainer.evaluate(step=step)``. Third-party trainers follow the same
protocol, so the runner has no special case for flexkit's own.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from flexkit.configurable import Configurable


@attrs.frozen(kw_only=True)
class Rollout:
    """What one step's generation produced.

    ``batch`` is a :class:`~flexkit.sample.RolloutBatch` (one row per response: rewards, ``response_mask``,
    ``uid`` group ids, ``taskset_id``, ``index``); ``experiences`` feed the feedback operator: one per response
    (``reward``, ``taskset_id``, ``index``), or the same as columns (a mapping of three equal-length arrays);
    ``metrics`` are logged as they are. ``payload`` is free for a host trainer's own batch object (e.g. verl's
    ``DataProto``), so that :func:`flexkit.dynamic_sampling.fill_batch` hands it back with the rows kept.
    """

    batch: Any
    experiences: Sequence[Any] | Mapping[str, Any]
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    payload: Any = None


class Trainer(Configurable, abc.ABC):
    """Base class of trainer backends (see the module docstring for the step they take part in).

    Built by its registered factory as ``factory(config, seed=...)``; a subclass sets :attr:`Config` and calls
    ``super().__init__(config)`` (``None``: ``Config()``, its defaults) before reading ``self.config``.
    """

    def setup(self, pipeline: Any) -> None:
        """Called once before the first step (and before a checkpoint is loaded): build models, warm up."""

    @abc.abstractmethod
    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Generate responses for ``tasks`` (a list of :class:`~flexkit.scheduler.Task`) and score them."""

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """Add ``advantages`` to ``batch`` (e.g. GRPO's group-relative ones)."""

    @abc.abstractmethod
    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One policy update from ``batch`` with per-token loss ``weights`` (``None``: all ones)."""

    @abc.abstractmethod
    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Held-out evaluation: at least ``eval_accuracy``, and ``eval_accuracy/<level>`` per difficulty level."""

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state (JSON values and numpy arrays) to continue exactly."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
