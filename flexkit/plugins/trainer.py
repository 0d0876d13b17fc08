"""The trainer base class and :class:`Rollout`: what ``flexkit run`` drives each step.

A trainer backend is registered through ``flexkit_register_trainers`` and named by a pipeline's ``[trainer]``
table. Each step (:func:`flexkit.run.step.train_step`) reads a batch, calls :meth:`Trainer.rollout`, snapshots the
experiences, runs the sample stage at ``post_reward``, calls :meth:`Trainer.compute_advantages`, runs the sample
stage at ``post_advantage``, then calls :meth:`Trainer.update` while the feedback (on the snapshot) updates the
selectors in a background thread; every ``[run] eval_every`` steps (and before the first and after the last)
:meth:`Trainer.evaluate` (the **test** split: recorded, what runs are judged on, never shown to the selectors) and,
for a trainer with :attr:`Trainer.supports_validation`, :meth:`Trainer.validate` (the **validation** split: recorded
too, and the only evaluation the selectors get, :meth:`flexkit.Pipeline.evaluation`). The full order,
``[sample.refill]`` included, and the contract: docs/plugins/trainer.md.

Because the feedback reads the snapshot (:func:`flexkit.scheduler.feedback.snapshot_experiences`),
``compute_advantages``
may rewrite rewards in place, even in an array the experiences share, without feeding the selectors advantages.
Metrics (``Rollout.metrics``, ``update``'s and ``evaluate``'s) must be numbers and must not use the names the
runner writes itself (:func:`flexkit.run.trainer_output.trainer_metrics` checks them). Third-party trainers follow
the same protocol, so the runner has no special case for flexkit's own.

Long phases (a warm start, loading a model) can show progress: before :meth:`Trainer.setup` the runner calls
``trainer.set_progress(callback)`` when the trainer has that method (every :class:`Trainer` does), and the
trainer calls ``self.report_progress(phase, done, total)`` as it goes (``"warm start"``, 120, 500); the runner
shows it on its progress display. A trainer without the method works as before, silently.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from flexkit.errors import FeedbackError
from flexkit.plugins.configurable import Configurable


@attrs.frozen(kw_only=True)
class Rollout:
    """What one step's generation produced.

    ``batch`` is a :class:`~flexkit.sample.RolloutBatch` (one row per response: rewards, ``response_mask``,
    ``uid`` group ids, ``taskset_id``, ``index``); ``experiences`` feed the feedback operator: one per response
    (``reward``, ``taskset_id``, ``index``), or the same as columns (a mapping of three equal-length arrays), or
    ``None`` (the default): the feedback reads the batch itself (:meth:`feedback_experiences`), so a trainer
    whose batch holds ``taskset_id``, ``index`` and its rewards builds nothing twice; ``metrics`` are logged as
    they are. ``payload`` is free for a host trainer's own batch object (e.g. verl's
    ``DataProto``), so that :func:`flexkit.run.dynamic_sampling.fill_batch` hands it back with the rows kept.
    """

    batch: Any
    experiences: Sequence[Any] | Mapping[str, Any] | None = None
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    payload: Any = None

    def feedback_experiences(self) -> Sequence[Any] | Mapping[str, Any]:
        """What the feedback operator reads: ``experiences`` when given, else the batch's own columns
        (:meth:`~flexkit.sample.RolloutBatch.feedback_columns`: ``taskset_id``, ``index`` and each response's
        reward, copied). Raises :class:`~flexkit.errors.FeedbackError` when there are no experiences and the
        batch is not a ``RolloutBatch``."""
        if self.experiences is not None:
            return self.experiences
        columns = getattr(self.batch, "feedback_columns", None)
        if not callable(columns):
            raise FeedbackError(f"a Rollout without experiences needs a RolloutBatch to feed back from, got "
                                f"{type(self.batch).__name__}")
        result: Mapping[str, Any] = columns()
        return result


#: ``callback(phase, done, total)``: progress of a trainer's long phase, e.g. ``("warm start", 120, 500)``.
ProgressCallback = Callable[[str, int, int], None]


class Trainer(Configurable, abc.ABC):
    """Base class of trainer backends (see the module docstring for the step they take part in).

    Built by its registered factory as ``factory(config, seed=...)``; a subclass sets :attr:`Config` and calls
    ``super().__init__(config)`` (``None``: ``Config()``, its defaults) before reading ``self.config``.
    """

    #: Whether :meth:`update` honours ``[replay]``: rows whose ``replay_age`` field is above 0 were generated
    #: by an earlier policy, and the loss must use their ``old_log_probs`` (the generating policy's) in the
    #: importance ratio (:mod:`flexkit.sample.replay`). ``flexkit run`` refuses ``[replay]`` for a trainer without it.
    supports_replay: ClassVar[bool] = False

    #: Whether :meth:`validate` evaluates a validation split of the trainer's own, apart from :meth:`evaluate`'s
    #: test split. ``False`` (the default): the trainer has none, ``flexkit run`` never calls :meth:`validate`, the
    #: selectors get no evaluation, and a selector that steers by one (``frontier``'s ``guard_metric``) is refused.
    supports_validation: ClassVar[bool] = False

    #: Where :meth:`report_progress` goes (set by :meth:`set_progress`); ``None``: nowhere.
    progress_callback: ProgressCallback | None = None

    def set_progress(self, callback: ProgressCallback | None) -> None:
        """Called by the runner before :meth:`setup` with its progress display (``None``: no display)."""
        self.progress_callback = callback

    def report_progress(self, phase: str, done: int, total: int) -> None:
        """Report ``done`` of ``total`` units of a long ``phase`` (e.g. warm-start steps); cheap, call it freely."""
        if self.progress_callback is not None:
            self.progress_callback(phase, done, total)

    def setup(self, pipeline: Any) -> None:
        """Called once before the first step (and before a checkpoint is loaded): build models, warm up."""

    @abc.abstractmethod
    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Generate responses for ``tasks`` (a list of :class:`~flexkit.scheduler.scheduler.Task`) and score them."""

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """Add ``advantages`` to ``batch`` (e.g. GRPO's group-relative ones). Called after the rollout's
        experiences were snapshotted for the feedback, so rewriting rewards in place here is safe."""

    @abc.abstractmethod
    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One policy update from ``batch`` with per-token loss ``weights`` (``None``: all ones); returns metrics
        (numbers; not the names the runner writes, :data:`flexkit.run.trainer_output.RESERVED_KEYS`). Runs while
        the step's feedback updates the selectors in a background thread."""

    @abc.abstractmethod
    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Held-out **test** evaluation, what runs are judged on: at least ``eval_accuracy``, and
        ``eval_accuracy/<level>`` per difficulty level. The selectors never see it (:meth:`validate` is theirs);
        no name starts with ``val_``."""

    def validate(self, *, step: int) -> Mapping[str, float]:
        """Held-out **validation** evaluation, on problems disjoint from :meth:`evaluate`'s: ``val_accuracy`` and
        ``val_accuracy/<level>`` per difficulty level (every name starts with ``val_``). ``flexkit run`` calls it
        beside :meth:`evaluate` when :attr:`supports_validation` is set, records it, and hands it (and only it) to
        the selectors. The default: no validation split, an empty mapping."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state (JSON values and numpy arrays) to continue exactly."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
