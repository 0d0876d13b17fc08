"""The TasksetScheduler: which tasksets feed each batch, and which tasks each of them contributes.

Follows Trinity-RFT's TasksetScheduler: within an epoch each taskset contributes its size (or its
``weight`` share); the order in which tasksets are visited is reshuffled every epoch; each batch is a window of
``batch_size`` entries of that order, and each taskset's selector is asked for as many indices as the window
holds of it. Where flexkit differs (on purpose):

- every random stream derives from the pipeline seed: the epoch order from ``(seed, 1, epoch)``, taskset i's
  selector from ``(seed, 0, i)`` (``numpy.random.SeedSequence`` spawn keys), so two tasksets never share a
  stream and adding a taskset does not change the others' streams;
- reads of the next batch are prefetched in a background thread (``prefetch``). ``True``: the batch for step
  t+1 is selected right after step t is handed out, so feedback given after ``read()`` reaches selectors one
  step later than without prefetch. ``"after_feedback"`` (pipelines' default when a selector learns from
  feedback): the batch for step t+1 is selected right after the first feedback following step t's read, so it
  sees that feedback, exactly as without prefetch when feedback comes once per step, while its selection and row
  reads still overlap the rest of the trainer's step. Every mode is deterministic and resumes exactly;
- a checkpoint from a different taskset list is refused instead of silently truncated;
- feedback is validated whole before any selector changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from flexkit._log import say
from flexkit._metric_names import plain_evaluation
from flexkit.errors import ComponentError, ConfigError, FeedbackError, SampleError
from flexkit.plugins._contract import ValidationRows, check_selection, describe_component
from flexkit.scheduler._batch_plan import epoch_counts, mix_counts
from flexkit.scheduler._feedback_apply import apply_feedback
from flexkit.scheduler._feedback_check import check_feedback_payload, taskset_id
from flexkit.scheduler._observers import notify
from flexkit.scheduler._prefetch import AFTER_FEEDBACK, Prefetcher, RowsFailed, take_error
from flexkit.scheduler._state import STATE_VERSION, SchedulerState
from flexkit.scheduler._tasks import Task, TasksetEntry
from flexkit.scheduler._taskset_mix import TasksetMix
from flexkit.scheduler.feedback import SELECTOR_METRIC
from flexkit.selectors import _members as members
from flexkit.selectors._base import OutOfRange

__all__ = ["AFTER_FEEDBACK", "STATE_VERSION", "Task", "TasksetEntry", "TasksetScheduler", "apply_feedback",
           "epoch_counts", "mix_counts"]


class TasksetScheduler(SchedulerState):
    """Draws each batch from one or more tasksets; routes feedback to their selectors. Its state methods
    (``state_dict``, ``check_state``, ``load_state_dict``) are :class:`~flexkit.scheduler._state.SchedulerState`'s.

    Args:
        entries: the tasksets with their selectors (taskset id = position in this list).
        batch_size: tasks per batch.
        seed: the pipeline seed (the epoch order's stream derives from it).
        total_epochs: epochs to run (default 1) unless ``total_steps`` is given.
        total_steps: steps to run instead of epochs.
        prefetch: select and read the next batch in a background thread: ``True`` right after each read,
            :data:`AFTER_FEEDBACK` right after the first feedback following a read, ``False`` never.
        out_of_range: feedback values outside [0, 1] are clipped (``"clip"``) or rejected (``"error"``).
        hooks: a pluggy hook relay for lifecycle hooks (``flexkit_on_select``, ``flexkit_on_feedback``).
    """

    def __init__(
        self,
        entries: Sequence[TasksetEntry],
        *,
        batch_size: int,
        seed: int = 0,
        total_epochs: int | None = None,
        total_steps: int | None = None,
        prefetch: bool | str = True,
        out_of_range: OutOfRange = "clip",
        hooks: Any = None,
    ) -> None:
        if not entries:
            raise ConfigError("a scheduler needs at least one taskset")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        weights = [e.weight for e in entries]
        if any(w is not None for w in weights) and any(w is None for w in weights):
            missing = [e.name for e in entries if e.weight is None]
            raise ConfigError(f"give every taskset a weight or none; missing: {', '.join(missing)}")
        self.entries = list(entries)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        if prefetch not in (True, False, AFTER_FEEDBACK):
            raise ConfigError(f"prefetch must be True, False or {AFTER_FEEDBACK!r}, got {prefetch!r}")
        self.prefetch: bool | str = prefetch
        self.out_of_range: OutOfRange = out_of_range
        self._warned_clipping = False  # feedback outside [0, 1] is reported once (check_feedback)
        self.hooks = hooks
        self._weights: list[float] | None = None if weights[0] is None else [
            float(w) for w in weights if w is not None]  # every taskset has a weight, or none (checked above)
        self.epoch_length = int(sum(e.size for e in self.entries))
        self.steps_per_epoch = self.epoch_length // self.batch_size
        if self.steps_per_epoch < 1:
            raise ConfigError(
                f"batch_size {self.batch_size} exceeds the {self.epoch_length} tasks of one epoch"
            )
        if self._weights is not None:
            self._check_weighted_batches()
        if total_steps is not None:
            self.total_steps = int(total_steps)
        else:
            self.total_steps = (total_epochs or 1) * self.steps_per_epoch
        self.step = 0  # batches handed out so far
        self._lock = threading.RLock()  # guards step, the pending batch, the mix and every selector
        self._prefetch = Prefetcher(self._lock, self._produce)
        self._order_cache: tuple[int, np.ndarray] | None = None
        self._mix = TasksetMix()

    def _check_weighted_batches(self) -> None:
        """Refuse weights that can ask a taskset for more distinct tasks in one batch than it has (an epoch order
        is shuffled, so some batch can hold all of a taskset's entries, up to ``batch_size``)."""
        counts = epoch_counts(self.sizes, self._weights)
        for entry, count in zip(self.entries, counts.tolist(), strict=True):
            most = min(count, self.batch_size)
            if most > entry.size and not members.flag(entry.selector, "allows_repeats"):
                raise ConfigError(
                    f"taskset {entry.name!r} has {entry.size} task(s), but its weight gives it {count} of each "
                    f"epoch's {self.epoch_length} entries, so a batch of {self.batch_size} can ask it for {most} "
                    "distinct tasks; lower its weight or batch_size"
                )

    # -- plan ------------------------------------------------------------------------------------------

    @property
    def sizes(self) -> list[int]:
        """Number of tasks of each taskset."""
        return [e.size for e in self.entries]

    @property
    def names(self) -> list[str]:
        """Taskset names, by id."""
        return [e.name for e in self.entries]

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.step // self.steps_per_epoch

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The taskset id of every entry of ``epoch``'s order (shuffled per epoch from the pipeline seed)."""
        if self._order_cache is not None and self._order_cache[0] == epoch:
            return self._order_cache[1]
        counts = epoch_counts(self.sizes, self._weights)
        order = np.repeat(np.arange(len(self.entries), dtype=np.int64), counts)
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(1, epoch)))
        rng.shuffle(order)
        self._order_cache = (epoch, order)
        return order

    def batch_plan(self, step: int) -> np.ndarray:
        """How many tasks each taskset contributes to batch ``step``."""
        mix = self._mix.proportions
        if mix is not None and step >= self._mix.start:
            return mix_counts(mix, self.batch_size, self.sizes, self._mix_rng(step))
        epoch, offset = divmod(step, self.steps_per_epoch)
        window = self.epoch_order(epoch)[offset * self.batch_size : (offset + 1) * self.batch_size]
        return np.bincount(window, minlength=len(self.entries))

    @property
    def mix(self) -> list[float] | None:
        """The taskset proportions set by :meth:`set_mix` (None: the epoch plan by sizes or weights)."""
        return None if self._mix.proportions is None else list(self._mix.proportions)

    def set_mix(self, proportions: Mapping[Any, float] | Sequence[float]) -> None:
        """Draw batches from now on in these taskset proportions (keys: taskset ids or names).

        Used by mix actuators: from the next batch not yet selected, each batch holds ``batch_size`` tasks split
        by the proportions (largest remainder; the remainder's ties broken by a stream derived from the seed and
        the step). Per-epoch counts then follow the mix instead of the sizes; the run length does not change.
        """
        if isinstance(proportions, Mapping):
            values = [0.0] * len(self.entries)
            for key, value in proportions.items():
                values[taskset_id(self.entries, key)] = float(value)
        else:
            values = [float(v) for v in proportions]
        arr = np.asarray(values, dtype=np.float64)
        with np.errstate(over="ignore"):
            if arr.shape != (len(self.entries),) or not np.isfinite(arr).all() or (arr < 0).any() or arr.sum() <= 0:
                raise SampleError(f"mix proportions must be {len(self.entries)} finite non-negative numbers with a "
                                  f"positive sum, got {values}")
            if not np.isfinite(arr.sum()):  # finite proportions near the float maximum overflow the sum
                arr = arr / arr.max()
        with self._lock:
            self._prefetch.wait()  # a running prefetch selects under the plan it started with, never this one
            self._mix = TasksetMix(tuple((arr / arr.sum()).tolist()),
                                   self.step + (1 if self._prefetch.pending is not None else 0))

    def _mix_rng(self, step: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(2, step)))

    # -- reading ----------------------------------------------------------------------------------------

    def _select(self, step: int) -> list[np.ndarray]:
        """Ask each taskset's selector for its share of batch ``step``; every answer is checked
        (:func:`~flexkit.plugins._contract.check_selection`) before it enters the scheduler."""
        plan = self.batch_plan(step)
        picked = []
        for entry, n in zip(self.entries, plan.tolist(), strict=True):
            if not n:
                picked.append(np.empty(0, dtype=np.int64))
                continue
            def who(entry: TasksetEntry = entry) -> str:
                return f"{describe_component(entry.selector, 'selector')} of taskset {entry.name!r}"

            picked.append(check_selection(
                entry.selector.get_indices(int(n)), int(n), entry.size,
                allows_repeats=members.flag(entry.selector, "allows_repeats"),
                twice=members.flag(entry.selector, "repeats_across_epochs"),
                who=who,
            ))
        return picked

    def _materialise(self, picked: Sequence[np.ndarray]) -> list[Task]:
        tasks: list[Task] = []
        for tid, (entry, indices) in enumerate(zip(self.entries, picked, strict=True)):
            if len(indices) == 0:
                continue
            rows = entry.taskset.read([int(i) for i in indices])
            tasks.extend(
                Task(taskset_id=tid, taskset=entry.name, index=int(i), data=row)
                for i, row in zip(indices, rows, strict=True)
            )
        return tasks

    def _produce(self, step: int) -> tuple[int, list[np.ndarray], list[Task]]:
        """Select batch ``step`` (under the lock) and read its rows; a failed read raises
        :class:`~flexkit.scheduler._prefetch.RowsFailed` carrying the selection, so that it is kept."""
        with self._lock:
            picked = self._select(step)
        try:
            tasks = self._materialise(picked)
        except Exception as exc:
            raise RowsFailed(picked, exc) from exc
        return step, picked, tasks

    def _start_prefetch(self, trigger: str) -> None:
        """Queue the next batch's prefetch (called with the lock held) when ``trigger`` (``"read"`` or
        ``"feedback"``) is this scheduler's moment to: a read with ``prefetch=True``, the first feedback after a
        read with :data:`AFTER_FEEDBACK`."""
        wanted = self.prefetch is True if trigger == "read" else self.prefetch == AFTER_FEEDBACK
        if not wanted or self._prefetch.pending is not None or self.step >= self.total_steps:
            return
        self._prefetch.start(self.step)

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        """Hold the scheduler still: wait for a running prefetch, then keep reads, feedback and prefetches out
        until the block ends. For reading selectors from another thread (metrics, estimate snapshots)."""
        with self._lock:
            self._prefetch.wait()
            yield

    def read(self, *, beyond_end: bool = False) -> list[Task]:
        """The next batch, grouped by taskset; raises ``StopIteration`` when the run is over.

        ``beyond_end`` reads past ``total_steps``: dynamic sampling (:mod:`flexkit.run._dynamic_sampling`) draws
        more batches than the run has training steps, and the trainer decides when to stop.

        An error raised while the batch was prefetched is raised here. When its selection failed, no batch is
        pending and the step is unchanged; when reading its rows failed, the selection stays pending (it is in
        :meth:`state_dict`) and the next call reads the rows again.

        ``flexkit_on_select`` observers are called after the batch is handed out, outside the lock; one that
        raises is logged (:func:`flexkit.scheduler._observers.notify`) and the batch is returned all the same.
        """
        with self._lock:
            self._prefetch.wait()
            if self.step >= self.total_steps and not beyond_end:
                raise StopIteration
            job, step = self._prefetch.pending, self.step
            if job is None:
                job = self._prefetch.produce_now(step)
            elif job.picked is None:  # the prefetch's selection failed: nothing is pending
                self._prefetch.pending = None
                raise take_error(job)
            elif job.tasks is None:
                if job.error is not None:
                    raise take_error(job)
                job.tasks = self._materialise(job.picked)  # a second try at the rows; an error keeps the batch
            self._prefetch.pending = None
            self.step = step + 1
            tasks = job.tasks
            assert tasks is not None
            self._start_prefetch("read")
        notify(self.hooks, "flexkit_on_select", step=step, tasks=tasks)
        return tasks

    async def aread(self) -> list[Task]:
        """:meth:`read` for asyncio code; raises ``StopAsyncIteration`` when the run is over."""
        tasks = await asyncio.get_running_loop().run_in_executor(None, self._read_or_none)
        if tasks is None:  # StopIteration cannot cross a Future, so it travels as None
            raise StopAsyncIteration
        return tasks

    def _read_or_none(self) -> list[Task] | None:
        try:
            return self.read()
        except StopIteration:
            return None

    def __iter__(self) -> Iterator[list[Task]]:
        while True:
            try:
                yield self.read()
            except StopIteration:
                return

    def close(self) -> None:
        """Stop the prefetch thread (a pending batch is kept in the state until the next read)."""
        self._prefetch.close()

    # -- feedback ---------------------------------------------------------------------------------------

    def check_feedback(self, metrics: Mapping[str, Any]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Validate a feedback payload as :meth:`feedback` does, changing nothing: ``(taskset id, int64
        indices, float64 values)`` per taskset, values clipped by ``out_of_range``. Raises
        :class:`~flexkit.errors.FeedbackError` naming the first problem, also for a top-level key that looks
        like a misspelt ``selector_metric`` (other top-level keys are left alone;
        :func:`flexkit.scheduler._feedback_check.check_feedback_payload`)."""
        clipped: list[str] = []
        checked = check_feedback_payload(self.entries, metrics, self.out_of_range, clipped=clipped)
        if clipped and not self._warned_clipping:
            self._warned_clipping = True
            say("feedback_clipped", (
                f"warning: feedback values outside [0, 1] were clipped into it ({'; '.join(clipped)}): the selectors "
                "read feedback as pass rates in [0, 1], so every reward below 0 counts as a failure and every one "
                "above 1 as a pass. Rescale the reward (a reward of -1 / +1: (r + 1) / 2), or set [feedback] "
                'out_of_range = "error" to refuse such feedback. Shown once per run'),
                level="warning", clipped=clipped)
        return checked

    def evaluation(self, metrics: Mapping[str, float]) -> None:
        """Pass the trainer's held-out evaluation (metric name → value) to every selector that takes one
        (:meth:`~flexkit.Selector.observe_evaluation`; plugin selectors without it are skipped).

        A batch already selected in the background (prefetch) is selected first and keeps its tasks: the
        evaluation reaches the selections after it. :class:`~flexkit.errors.ComponentError` names a selector that
        raises; :class:`~flexkit.errors.FeedbackError` for an evaluation that is not a mapping (checked before any
        selector sees it).
        """
        if not isinstance(metrics, Mapping):
            raise FeedbackError("an evaluation is a mapping of metric name to value ({'eval_accuracy': 0.5, ...}), "
                                f"got {type(metrics).__name__}")
        plain = plain_evaluation(metrics)  # Python numbers, from numpy scalars, 0-d arrays and tensors too
        with self._lock:
            self._prefetch.wait()  # the prefetched selection precedes this evaluation, always
            for entry in self.entries:
                try:  # a copy each: one selector cannot change what the next one sees
                    members.observe_evaluation(entry.selector, dict(plain))
                except Exception as exc:
                    raise ComponentError(f"taskset {entry.name!r}: {describe_component(entry.selector, 'selector')} "
                                         f"raised {type(exc).__name__}: {exc} while taking an evaluation") from exc

    def validation_calibration(self, rows: ValidationRows) -> dict[str, dict[str, float]]:
        """Each taskset's selector's predictions of a validation split's ``rows`` held against their scores
        (:meth:`~flexkit.Selector.validation_calibration`), by taskset name; values that are not finite are left
        out, and so are tasksets whose selector predicts nothing for them. Holds the scheduler idle; changes no
        selector.
        :class:`~flexkit.errors.ComponentError` names a selector that raises, or returns something other than a
        mapping of names to numbers."""
        if not isinstance(rows, ValidationRows):
            raise FeedbackError("validation rows are a flexkit.ValidationRows (columns and a score per row), got "
                                f"{type(rows).__name__}")
        out: dict[str, dict[str, float]] = {}
        with self.idle():
            for entry in self.entries:
                who = f"taskset {entry.name!r}: {describe_component(entry.selector, 'selector')}"
                try:
                    found = members.validation_calibration(entry.selector, rows)
                except Exception as exc:
                    raise ComponentError(f"{who} raised {type(exc).__name__}: {exc} while checking its predictions "
                                         "on the validation rows") from exc
                odd = (f"{type(found).__name__}, not a mapping" if not isinstance(found, Mapping) else
                       ", ".join(f"{k!r}: {type(v).__name__}" for k, v in found.items()
                                 if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))))
                if odd:
                    raise ComponentError(f"{who}: validation_calibration must return a mapping of names to numbers; "
                                         f"got {odd}")
                numbers = {str(k): float(v) for k, v in found.items() if math.isfinite(float(v))}
                if numbers:
                    out[entry.name] = numbers
        return out

    def feedback(self, metrics: Mapping[str, Any]) -> None:
        """Route ``metrics[SELECTOR_METRIC]`` (``{taskset_id or name: {"indices", "values"}}``) to selectors.

        Feedback for batches several steps old is fine. The payload is applied whole or not at all: it is
        validated whole first (:meth:`check_feedback`), and when a selector still raises while taking its part,
        the selectors already changed are restored (:func:`apply_feedback`); a
        :class:`~flexkit.errors.FeedbackError` (or :class:`~flexkit.errors.ComponentError` for a selector that
        failed) is raised and no selector has changed.
        """
        checked = self.check_feedback(metrics)
        payload = metrics.get(SELECTOR_METRIC, {})
        with self._lock:
            self._prefetch.wait()  # the prefetched selection precedes this feedback, always
            apply_feedback(self.entries, checked)
            self._start_prefetch("feedback")
            step = self.step
        notify(self.hooks, "flexkit_on_feedback", step=step, metrics=payload)
