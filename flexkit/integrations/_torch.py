"""``FlexkitSampler``: a ``torch.utils.data.Sampler`` driven by a flexkit pipeline's TasksetScheduler.

Any map-style dataset gets curricula, adaptive selection and taskset mixing in two lines::

    sampler = FlexkitSampler(flexkit.load_pipeline("pipeline.toml"), dataset)
    loader = StatefulDataLoader(WithIndex(dataset), batch_size=sampler.batch_size, sampler=sampler)
    for indices, batch in loader:
        ...
        sampler.feedback(indices, rewards)

The sampler yields **global dataset indices**: with several tasksets, taskset ``i``'s task ``j`` is index
``offsets[i] + j`` (``offsets`` are the cumulative taskset sizes, the layout of
``torch.utils.data.ConcatDataset([taskset_0, taskset_1, ...])``). Each scheduler batch is yielded in order, so a
loader whose ``batch_size`` is the pipeline's gets exactly one scheduler batch per loader batch.
``mini_repeat_count`` / ``repeat_count`` repeat indices and batches as TRL's ``RepeatSampler`` does. One pass
(``__iter__``) is one epoch of ``steps_per_epoch`` batches, fewer if the scheduler's run ends first.

**Feedback.** :meth:`FlexkitSampler.feedback` takes the global indices of a batch (repeated once per rollout is
fine) and their rewards, turns them into per-task pass rates with the pipeline's feedback operator (default
``pass_rate_calculator``) and routes them to the selectors.

**What your loop honours.** The sampler chooses tasks and routes feedback; a pipeline part that needs more of
its host (a ``[sample]`` stage's weights in the loss, ``[replay]``, ``[sample.refill]``, a ``frontier`` guard that
reads held-out evaluations) is refused where the sampler is built (:func:`flexkit.host.check_support` with
``host``, by default :data:`SAMPLER_SUPPORT`, which gives none), naming the key and what to do. A loop that gives
a part declares it: ``FlexkitSampler(pipe, dataset, host=HostSupport(name="my loop", evaluation=True))`` and
:meth:`FlexkitSampler.evaluation` after each evaluation. ``host=None`` is for a host adapter (TRL's, verl's) that
checks the pipeline itself and declares its own support with :meth:`FlexkitSampler.declare_host`; a sampler that
none declared is checked at its first batch as a host that gives nothing (:data:`UNDECLARED_SUPPORT`).

**State.** :meth:`~FlexkitSampler.state_dict` holds the whole pipeline state plus the position inside the
current batch, so torchdata's ``StatefulDataLoader`` (which saves a sampler that has ``state_dict`` and
``load_state_dict``) resumes exactly, mid-epoch and mid-batch included. Arrays are stored as tensors, so the
state loads with ``torch.load``'s default ``weights_only=True``.

**Workers.** With ``num_workers > 0`` a loader draws indices ``prefetch_factor × num_workers`` batches ahead of
the batch the loop sees, so feedback reaches the selection that many batches later, and a loader checkpoint
restores the sampler as it was when the checkpointed batch was drawn. Use ``num_workers=0`` with adaptive
selectors when feedback timing and exact resume matter (verl asked the same of its curriculum samplers).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

import numpy as np
import torch.utils.data

from flexkit.errors import ConfigError, ConfigTypeError, FeedbackError, StateMismatchError
from flexkit.integrations._rows import check_rows_line_up
from flexkit.integrations._state import from_portable, to_portable
from flexkit.integrations._support import SAMPLER_SUPPORT, UNDECLARED_SUPPORT
from flexkit.pipeline._pipeline import Pipeline, make_selector
from flexkit.pipeline._support import HostSupport, check_support
from flexkit.scheduler._scheduler import TasksetEntry, TasksetScheduler
from flexkit.scheduler.feedback import PassRateCalculator
from flexkit.tasksets import InMemoryTaskset

__all__ = ["SAMPLER_STATE_VERSION", "SAMPLER_SUPPORT", "UNDECLARED_SUPPORT", "FlexkitSampler", "WithIndex",
           "check_dataset", "sampler_for_dataset"]

#: Version of :meth:`FlexkitSampler.state_dict`'s layout.
SAMPLER_STATE_VERSION = 1


class FlexkitSampler(torch.utils.data.Sampler[int]):
    """Yields global dataset indices from a flexkit pipeline's scheduler; learns from :meth:`feedback`.

    Args:
        source: a :class:`~flexkit.Pipeline` (its scheduler, feedback operator and sample stage state are used)
            or a bare :class:`~flexkit.TasksetScheduler` (feedback through ``pass_rate_calculator``).
        data_source: the dataset, optional; when given its length must be the tasksets' total size, and a
            ``ConcatDataset``'s parts must have the tasksets' sizes, in order.
        mini_repeat_count: how many times each index is repeated in a row (responses per prompt).
        repeat_count: how many times each whole scheduler batch is repeated (TRL's ``RepeatSampler`` layout:
            ``for _ in range(repeat_count): for i in batch: for _ in range(mini_repeat_count): yield i``).
        host: what the loop driving the sampler honours of ``source`` (:class:`~flexkit.host.HostSupport`); every
            part it does not give is refused here (:class:`~flexkit.ConfigError` naming the key and what to do).
            Default :data:`SAMPLER_SUPPORT`: selection and feedback only. ``None``: a host adapter checks the
            source and calls :meth:`declare_host` before the first batch (else the first batch checks the source
            against :data:`UNDECLARED_SUPPORT`, which gives no part).
    """

    def __init__(
        self,
        source: Pipeline | TasksetScheduler,
        data_source: Sized | None = None,
        *,
        mini_repeat_count: int = 1,
        repeat_count: int = 1,
        host: HostSupport | None = SAMPLER_SUPPORT,
    ) -> None:
        if isinstance(source, Pipeline):
            self.pipeline: Pipeline | None = source
            self.scheduler = source.scheduler
        elif isinstance(source, TasksetScheduler):
            self.pipeline = None
            self.scheduler = source
        else:
            raise ConfigTypeError(f"FlexkitSampler needs a flexkit Pipeline or TasksetScheduler, got "
                                  f"{type(source).__name__}")
        sizes = self.scheduler.sizes
        #: Global index of each taskset's first task, plus the total size at the end.
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if data_source is not None:
            check_dataset(data_source, sizes, self.scheduler.names)
            check_rows_line_up(data_source, self.scheduler)
        self.data_source = data_source
        for name, value in (("mini_repeat_count", mini_repeat_count), ("repeat_count", repeat_count)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        self.mini_repeat_count = mini_repeat_count
        self.repeat_count = repeat_count
        self._operator: Any = None if self.pipeline is not None else PassRateCalculator()
        self._buffer: list[int] = []  # the current batch's indices (with repeats)
        self._pos = 0  # how many of them were yielded
        self._yielded = 0  # indices yielded in the current epoch
        #: The host whose support the source was checked against (:meth:`declare_host`); ``None`` until one is.
        self.host: HostSupport | None = None
        if host is not None:
            self.declare_host(host)

    # -- the host --------------------------------------------------------------------------------------

    def declare_host(self, support: HostSupport) -> None:
        """Check the source against what the host driving this sampler honours
        (:func:`~flexkit.host.check_support`: a :class:`~flexkit.ConfigError` naming every part it does not give)
        and record it as :attr:`host`. A host adapter that built the sampler with ``host=None`` calls it."""
        check_support(self.pipeline if self.pipeline is not None else self.scheduler, support)
        self.host = support

    def evaluation(self, metrics: Mapping[str, Any]) -> None:
        """Hand the selectors a held-out evaluation (metric name → value: :meth:`flexkit.Pipeline.evaluation`), e.g.
        a ``frontier`` guard's ``val_accuracy/<group>``; declare it with ``host=HostSupport(..., evaluation=True)``."""
        if self.pipeline is not None:
            self.pipeline.evaluation(metrics)
        else:
            self.scheduler.evaluation(metrics)

    # -- the sampler ----------------------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        """Tasks per scheduler batch: give the DataLoader this ``batch_size``."""
        return self.scheduler.batch_size

    def __len__(self) -> int:
        """Indices in one epoch: ``steps_per_epoch × batch_size × mini_repeat_count × repeat_count``."""
        return self.scheduler.steps_per_epoch * self.scheduler.batch_size * self.mini_repeat_count * self.repeat_count

    def __iter__(self) -> Iterator[int]:
        """One epoch of indices, continuing from the saved position (a new epoch once the last one ended)."""
        return self._epoch()

    def _epoch(self) -> Iterator[int]:
        if self.host is None:  # host=None and no adapter declared itself: nothing but selection and feedback
            self.declare_host(UNDECLARED_SUPPORT)
        if self._yielded >= len(self):
            self._yielded = 0
        while self._yielded < len(self):
            if self._pos >= len(self._buffer):
                try:
                    tasks = self.scheduler.read()
                except StopIteration:
                    return
                chunk = [int(self.offsets[t.taskset_id]) + t.index for t in tasks]
                mini, repeat = self.mini_repeat_count, self.repeat_count
                self._buffer = [i for _ in range(repeat) for i in chunk for _ in range(mini)]
                self._pos = 0
            index = self._buffer[self._pos]
            self._pos += 1
            self._yielded += 1
            yield index

    # -- indices ---------------------------------------------------------------------------------------

    def locate(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(taskset_ids, local_indices)`` of global dataset indices; out-of-range ones raise FeedbackError."""
        try:
            idx = np.asarray(indices)
        except (TypeError, ValueError) as exc:
            raise FeedbackError(f"dataset indices must be integers: {exc}") from None
        if idx.dtype == object:
            try:
                idx = idx.astype(np.int64)
            except (TypeError, ValueError) as exc:
                raise FeedbackError(f"dataset indices must be integers: {exc}") from None
        if idx.size and (idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer)):
            raise FeedbackError(f"dataset indices must be integers, got {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
        total = int(self.offsets[-1])
        bad = (idx < 0) | (idx >= total)
        if bad.any():
            raise FeedbackError(f"dataset index {int(idx[bad][0])} is out of range for {total} tasks")
        tids = np.searchsorted(self.offsets, idx, side="right") - 1
        return tids, idx - self.offsets[tids]

    def global_index(self, taskset: int | str, index: int) -> int:
        """The dataset index of taskset ``taskset``'s (id or name) task ``index``."""
        tid = self.scheduler.names.index(taskset) if isinstance(taskset, str) else int(taskset)
        return int(self.offsets[tid]) + int(index)

    # -- feedback --------------------------------------------------------------------------------------

    def feedback(
        self, indices: Sequence[int] | np.ndarray | Any, rewards: Sequence[float] | np.ndarray | Any
    ) -> dict[str, Any]:
        """Feed rewards back: ``indices`` are global dataset indices (one per rollout, repeats allowed),
        ``rewards`` their rewards (tensors are fine). Returns the selector metrics sent to the scheduler."""
        indices = _as_numpy(indices).reshape(-1)
        rewards = _as_numpy(rewards, floats=True)
        if rewards.ndim != 1 or len(rewards) != len(indices):
            raise FeedbackError(f"feedback needs one reward per index, got {np.shape(rewards)} rewards for "
                                f"{len(indices)} indices")
        tids, local = self.locate(indices)
        columns = {"taskset_id": tids, "index": local, "reward": rewards}  # one set of arrays, no dict per rollout
        if self.pipeline is not None:
            if type(self.pipeline.feedback_operator) is PassRateCalculator:
                return self.pipeline.feedback(columns)
            return self.pipeline.feedback([{"taskset_id": int(t), "index": int(i), "reward": r}  # rows, as ever
                                           for t, i, r in zip(tids.tolist(), local.tolist(), rewards.tolist(),
                                                              strict=True)])
        metrics: dict[str, Any]
        _exps, metrics = self._operator.process(columns)  # the PassRateCalculator (there is no pipeline)
        self.scheduler.feedback(metrics)
        return metrics

    # -- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The pipeline (or scheduler) state and the position in the current batch and epoch."""
        pipe = self.pipeline
        state = pipe.state_dict() if pipe is not None else {"scheduler": self.scheduler.state_dict()}
        return {"version": SAMPLER_STATE_VERSION, "pipeline": to_portable(state),
                "buffer": self._buffer[self._pos:], "yielded": self._yielded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (refused when it is for other tasksets)."""
        if not isinstance(state, Mapping) or state.get("version") != SAMPLER_STATE_VERSION:
            version = state.get("version") if isinstance(state, Mapping) else None
            raise StateMismatchError(f"FlexkitSampler state version {version!r} is not {SAMPLER_STATE_VERSION}")
        pipeline_state = from_portable(state["pipeline"])
        buffer = [int(i) for i in state["buffer"]]
        if buffer:
            self.locate(buffer)
        if self.pipeline is not None:
            self.pipeline.load_state_dict(pipeline_state)
        else:
            self.scheduler.load_state_dict(pipeline_state["scheduler"])
        self._buffer, self._pos = buffer, 0
        self._yielded = int(state["yielded"])


class WithIndex(torch.utils.data.Dataset[Any]):
    """``dataset``'s items as ``(index, item)`` pairs, so each loader batch carries the dataset indices that
    :meth:`FlexkitSampler.feedback` needs (the default collate makes them a tensor).

    A host adapter that carries the index elsewhere (a column of dict rows, a field of ``extra_info``)
    subclasses it and overrides :meth:`with_index`.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.with_index(int(index), self.dataset[index])

    def with_index(self, index: int, item: Any) -> Any:
        """The item the loader gets for dataset row ``index``: here ``(index, item)``."""
        return index, item


def check_dataset(dataset: Sized, sizes: Sequence[int], names: Sequence[str]) -> None:
    """Check ``dataset`` has the tasksets' layout: total length, and a ``ConcatDataset``'s part sizes."""
    total = int(sum(sizes))
    if len(dataset) != total:
        raise ConfigError(f"the dataset has {len(dataset)} items but the tasksets "
                          f"({', '.join(f'{n}: {s}' for n, s in zip(names, sizes, strict=True))}) have {total}")
    parts: Sequence[Any] = dataset.datasets if isinstance(dataset, torch.utils.data.ConcatDataset) else ()
    if parts and len(parts) == len(sizes):
        got = [len(p) for p in parts]
        if got != list(sizes):
            raise ConfigError(f"the ConcatDataset's parts have sizes {got}, the tasksets {list(sizes)} "
                              f"({', '.join(names)}): put the parts in taskset order")


def sampler_for_dataset(
    dataset: Sized,
    *,
    batch_size: int,
    selector: str = "shuffle",
    seed: int = 0,
    features: Mapping[str, Any] | None = None,
    total_epochs: int | None = None,
    total_steps: int | None = None,
    host: HostSupport | None = SAMPLER_SUPPORT,
    **params: Any,
) -> FlexkitSampler:
    """A :class:`FlexkitSampler` over ``dataset`` without a pipeline file: one taskset of ``len(dataset)`` tasks
    with the registered selector ``selector`` (``params`` are its settings, checked as in a TOML table;
    ``features`` its feature columns). Without ``total_epochs``/``total_steps`` the run is unbounded. ``host`` is
    the sampler's (what your loop honours): a ``frontier`` grouped by ``feature_keys`` guards by held-out
    evaluations by default, so give ``host=HostSupport(name="my loop", evaluation=True)`` and call
    :meth:`FlexkitSampler.evaluation`, or ``guard_metric=""``."""
    size = len(dataset)
    sel = make_selector(selector, size=size, seed=np.random.SeedSequence(seed, spawn_key=(0, 0)),
                        features=features, **params)
    columns = {k: np.asarray(v, dtype=np.float64) for k, v in (features or {}).items()}
    taskset = InMemoryTaskset("dataset", columns=columns or None, size=size)
    if total_epochs is None and total_steps is None:
        total_steps = np.iinfo(np.int64).max
    scheduler = TasksetScheduler([TasksetEntry(name="dataset", taskset=taskset, selector=sel)],
                                 batch_size=batch_size, seed=seed, total_epochs=total_epochs,
                                 total_steps=total_steps, prefetch=False)
    return FlexkitSampler(scheduler, dataset, host=host)


def _as_numpy(values: Any, *, floats: bool = False) -> np.ndarray:
    """A numpy array of ``values`` (lists, arrays, tensors on any device); floats as float64 when asked."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        return np.asarray(values, dtype=np.float64) if floats else np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"feedback values are not numeric arrays: {exc}") from None
