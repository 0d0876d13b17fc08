"""Data-parallel ranks with ``torch.distributed``: one global batch, one shard per rank, one selector state.

Every rank holds a full replica of the pipeline, built from the same file and seed, exactly as
``torch.utils.data.DistributedSampler`` has every rank compute the same permutation: selecting a batch needs no
communication, and every rank reads the same global batch and keeps its contiguous shard
(:func:`shard_bounds`), so shards never overlap and together are the whole batch, in order. Feedback is the
only collective: each rank's part is gathered (``all_gather_object``) before any selector changes, every rank
applies the same concatenation in rank order, which is the global batch's order, so the selectors of all ranks
take identical updates and stay identical, and equal those of a single process fed the whole batch.

Collectives are entered unconditionally: a rank whose own part is malformed still joins the gather (sending
its error), and then every rank raises the same :class:`~flexkit.FeedbackError` with no selector changed, so no
rank is left waiting. :meth:`DistributedPipeline.check_consistent` compares SHA-256 digests of the scheduler
state across ranks (``verify_every`` does it periodically); a mismatch raises
:class:`~flexkit.errors.DistributedStateError`.

Checkpoints: rank 0 writes (the state is identical everywhere, checked first); to resume, rank 0 loads and
checks the checkpoint and broadcasts the state, so no shared filesystem is needed and an error reaches every
rank. Use a CPU (gloo) process group for these objects; with NCCL training pass
``group=torch.distributed.new_group(backend="gloo")``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch.distributed as dist

from flexkit.distributed._payload import as_metrics, digest, merge, normalize
from flexkit.errors import ConfigError, DistributedStateError, FeedbackError, FlexkitError
from flexkit.sample._actuator import Mix
from flexkit.scheduler.feedback import is_columnar, task_triples

if TYPE_CHECKING:
    from flexkit.pipeline._pipeline import Pipeline


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of ``rank``'s contiguous shard of ``n`` items: sizes differ by at most one, earlier
    ranks take the extra items, and the shards of ranks ``0..world_size-1`` tile ``0..n`` in order."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not in a world of {world_size}")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class DistributedPipeline:
    """A :class:`~flexkit.Pipeline` replicated on every rank of a process group (see the module docstring).

    Args:
        pipeline: this rank's replica (same config and seed on every rank).
        group: the process group (default: the world); a gloo group keeps flexkit's objects on CPU.
        verify_every: compare scheduler-state digests across ranks every this many feedbacks (0: never).
    """

    def __init__(self, pipeline: Pipeline, *, group: Any = None, verify_every: int = 0) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise FlexkitError("torch.distributed is not initialised: call init_process_group first")
        if verify_every < 0:
            raise ConfigError(f"verify_every must be >= 0, got {verify_every}")
        self.pipeline = pipeline
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.verify_every = int(verify_every)
        self.global_batch: list[Any] = []
        self._feedbacks = 0

    @property
    def scheduler(self) -> Any:
        """This rank's replica of the scheduler (the same state as every other rank's)."""
        return self.pipeline.scheduler

    # -- reading ------------------------------------------------------------------------------------------

    def read(self) -> list[Any]:
        """The next global batch's shard for this rank (the whole batch is kept in :attr:`global_batch`);
        raises ``StopIteration`` when the run is over, on every rank at the same step."""
        self.global_batch = self.scheduler.read()
        return self.shard(self.global_batch)

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous part of ``items`` (:func:`shard_bounds`)."""
        start, stop = shard_bounds(len(items), self.rank, self.world_size)
        return list(items[start:stop])

    def __iter__(self) -> Iterator[list[Any]]:
        """Shards until the run is over."""
        while True:
            try:
                yield self.read()
            except StopIteration:
                return

    # -- feedback -----------------------------------------------------------------------------------------

    def feedback(self, experiences: Sequence[Any] | Mapping[str, Any], *, compact: bool = True) -> dict[str, Any]:
        """Gather every rank's experiences, run the feedback operator on them in rank order, and route the
        result to the selectors on every rank; returns the (global) metrics.

        ``experiences`` is what the feedback operator accepts: a sequence of experiences or columns (a mapping
        of equal-length ``reward``, ``taskset_id`` and ``index`` arrays, see
        :func:`~flexkit.scheduler.feedback.task_triples`). ``compact`` sends only ``(taskset_id, index, reward)`` of
        each
        experience (enough for ``pass_rate_calculator``), and the operator gets a list of such dicts;
        ``compact=False`` sends the experiences themselves (picklable; columns as numpy arrays) for an operator
        that reads more of them, and the operator gets their concatenation (columns when every rank sent
        columns with the same names)."""
        try:
            local: Any = ("ok", _compact(experiences) if compact else _as_sent(experiences))
        except Exception as exc:  # reported on every rank after the gather, so no rank waits forever
            local = ("error", f"rank {self.rank}: experiences cannot be read: {exc!r}")
        parts = self._gather(local)
        _raise_first_error(parts)
        everything = _concatenate([exps for _status, exps in parts])
        _exps, metrics = self.pipeline.feedback_operator.process(everything)
        self._apply(normalize(self.scheduler, metrics))
        return metrics

    def feedback_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Gather every rank's selector metrics (``{SELECTOR_METRIC: ...}`` for its shard), merge them in rank
        order (:func:`~flexkit.distributed._payload.merge`: a task several ranks report gets their mean) and route
        the result on every rank; returns the merged metrics. Any rank's invalid part raises the same
        :class:`~flexkit.FeedbackError` on every rank, with no selector changed."""
        try:
            local: Any = ("ok", normalize(self.scheduler, metrics))
        except FeedbackError as exc:
            local = ("error", f"rank {self.rank}: {exc}")
        parts = self._gather(local)
        _raise_first_error(parts)
        payload = merge([p for _status, p in parts])
        self._apply(payload)
        return as_metrics(payload)

    def _apply(self, payload: dict[int, Any]) -> None:
        self.scheduler.feedback(as_metrics(payload))
        self._feedbacks += 1
        if self.verify_every and self._feedbacks % self.verify_every == 0:
            self.check_consistent()

    def apply_sample_stage(self, batch: Any, *, step: int, timing: str | None = None) -> Any:
        """Run the sample stage on this rank's ``batch``. A mix action's proportions are rank 0's, set on every
        rank's scheduler so all take the same mix (pass a gathered global batch for a mix over all ranks); an
        error on any rank is raised on every rank."""
        if not self.pipeline.has_sample_stage or (timing is not None and not self.pipeline.sample_stage.should_run(
                timing)):
            return None
        action = None
        try:
            action = self.pipeline.apply_sample_stage(batch, step=step, timing=timing)
            local: Any = ("ok", action.proportions if isinstance(action, Mix) else None)
        except Exception as exc:  # joined the gather all the same, so no rank waits forever
            local = ("error", f"rank {self.rank}: sample stage failed: {exc!r}")
        parts = self._gather(local)
        errors = [value for status, value in parts if status == "error"]
        if errors:
            raise FlexkitError("; ".join(errors))
        if parts[0][1] is not None:
            self.scheduler.set_mix(parts[0][1])
        return action

    # -- consistency and checkpoints ----------------------------------------------------------------------

    def state_digest(self) -> str:
        """SHA-256 of this rank's scheduler state (step, selectors with their RNGs, mix, prefetched batch)."""
        return digest(self.scheduler.state_dict())

    def check_consistent(self) -> str:
        """Compare scheduler-state digests across ranks; raises :class:`~flexkit.errors.DistributedStateError`
        naming the ranks that differ from rank 0. Returns the common digest."""
        digests: list[str] = self._gather(self.state_digest())
        odd = [r for r, d in enumerate(digests) if d != digests[0]]
        if odd:
            raise DistributedStateError(f"scheduler state of rank(s) {odd} differs from rank 0's "
                                        f"(step {self.scheduler.step})")
        return digests[0]

    def save_checkpoint(self, directory: str | os.PathLike[str], *, extra: Mapping[str, Any] | None = None) -> Path:
        """Check that all ranks agree, then rank 0 writes the checkpoint (:meth:`Pipeline.save_checkpoint`);
        every rank returns its path once written, or raises if writing failed."""
        self.check_consistent()
        outcome: list[Any] = [None]
        if self.rank == 0:
            try:
                outcome[0] = ("ok", str(self.pipeline.save_checkpoint(directory, extra=extra)))
            except Exception as exc:
                outcome[0] = ("error", f"rank 0 could not write the checkpoint: {exc!r}")
        dist.broadcast_object_list(outcome, src=self._src(), group=self.group)
        status, value = outcome[0]
        if status != "ok":
            raise DistributedStateError(value)
        return Path(value)

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Rank 0 loads and checks the checkpoint (:meth:`Pipeline.load_checkpoint`) and broadcasts the state;
        every rank applies it and returns the checkpoint's ``extra``. Only rank 0 needs to see ``directory``."""
        outcome: list[Any] = [None]
        if self.rank == 0:
            try:
                extra = self.pipeline.load_checkpoint(directory)
                outcome[0] = ("ok", self.pipeline.state_dict(), extra)
            except Exception as exc:
                outcome[0] = ("error", f"rank 0 could not load the checkpoint: {exc}", None)
        dist.broadcast_object_list(outcome, src=self._src(), group=self.group)
        status, state, extra = outcome[0]
        if status != "ok":
            raise DistributedStateError(state)
        if self.rank != 0:
            self.pipeline.load_state_dict(state)
        self.check_consistent()
        return cast(dict[str, Any], extra)  # broadcast from rank 0 (its load_checkpoint's extra)

    # -- collectives --------------------------------------------------------------------------------------

    def _gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _src(self) -> int:
        """Rank 0 of the group, as a global rank (what ``broadcast_object_list`` expects)."""
        return 0 if self.group is None else dist.get_global_rank(self.group, 0)


def _compact(experiences: Any) -> list[dict[str, Any]]:
    """``{"taskset_id", "index", "reward"}`` of each experience (rows or columns)."""
    return [{"taskset_id": tid, "index": index, "reward": reward} for tid, index, reward in task_triples(experiences)]


def _as_sent(experiences: Any) -> Any:
    """The experiences as one rank sends them uncompacted: columns as numpy arrays, rows as a list."""
    if is_columnar(experiences):
        return {name: np.asarray(column) for name, column in experiences.items()}
    return list(experiences)


def _concatenate(parts: Sequence[Any]) -> Any:
    """The ranks' experiences in rank order: one list, or one set of columns when every rank that sent any
    experience sent columns with the same names (the same on every rank, so a mismatch raises everywhere)."""
    if not any(isinstance(p, Mapping) for p in parts):
        return [e for part in parts for e in part]
    sent = [p for p in parts if isinstance(p, Mapping) or len(p)]
    if not all(isinstance(p, Mapping) for p in sent) or len({frozenset(p) for p in sent}) > 1:
        raise FeedbackError("ranks sent experiences in different forms (rows and columns, or different columns); "
                            "send one form from every rank")
    try:
        return {name: np.concatenate([p[name] for p in sent]) for name in sent[0]}
    except ValueError as exc:
        raise FeedbackError(f"the ranks' experience columns cannot be concatenated: {exc}") from None


def _raise_first_error(parts: Sequence[tuple[str, Any]]) -> None:
    errors = [value for status, value in parts if status == "error"]
    if errors:
        raise FeedbackError("; ".join(errors))
