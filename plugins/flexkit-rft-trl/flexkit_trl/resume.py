"""The curriculum in TRL's checkpoints: saved with every checkpoint, restored on ``resume_from_checkpoint``.

What must survive a kill is the pipeline's state (scheduler, selectors, RNGs, sample stage: :meth:`Pipeline.state_dict
<flexkit.Pipeline.state_dict>`), the position of the sampler in the current scheduler batch, and the ``[replay]``
buffer. Two things of the HF Trainer make "the state now" the wrong thing to save:

* **Lookahead.** The data loader draws indices ahead of the batch being trained on (accelerate fetches one
  loader batch ahead; workers prefetch more). Those indices were drawn from the sampler but never trained on; a
  run killed after the checkpoint loses them. :class:`TrackedSampler` keeps the indices yielded but not yet
  consumed by a training step, and the checkpoint puts them back in front of the sampler's buffer, so the resumed
  run trains on exactly what the uninterrupted one did next. A scheduler batch read for the lookahead stays read
  (its selection already happened, after the feedback it saw): the resumed sampler replays its indices instead
  of selecting it again.
* **Fast-forward.** On resume the Trainer skips the batches of the current epoch it already trained on by
  drawing them again from the loader (``skip_first_batches``). Drawing them from the restored sampler would
  advance the scheduler a second time; :class:`TrackedSampler` yields that many filler indices (row 0) first,
  which the Trainer throws away, and counts them as the epoch's consumed part.

A checkpoint is only exact at a generation boundary: TRL does not save its buffered generations, so a resumed run
regenerates the current generation batch. A save between generations is marked (``mid_generation``), and
resuming from it is refused; :func:`check_save_alignment` refuses ``save_steps`` that would cause it.

With a :class:`~flexkit.Pipeline` the state is a flexkit checkpoint (:meth:`Pipeline.save_checkpoint
<flexkit.Pipeline.save_checkpoint>`: atomic, checksummed, refused when loaded into a different pipeline) in
``<checkpoint>/flexkit/``; with a bare scheduler it is the sampler's state in ``<checkpoint>/flexkit_sampler.pt``
(loaded with ``weights_only=True``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from flexkit import CheckpointError, ConfigError, ConfigIssue, FlexkitSampler, Pipeline

__all__ = ["PIPELINE_DIR", "SAMPLER_FILE", "TrackedSampler", "check_save_alignment", "load_state", "save_state"]

#: The flexkit checkpoint's folder inside a TRL checkpoint (with a Pipeline).
PIPELINE_DIR = "flexkit"
#: The sampler state's file inside a TRL checkpoint (with a bare scheduler).
SAMPLER_FILE = "flexkit_sampler.pt"


class TrackedSampler(FlexkitSampler):  # type: ignore[misc]  # flexkit exports it lazily (Any to mypy)
    """A :class:`~flexkit.FlexkitSampler` that knows which yielded indices a training step consumed (see the
    module docstring): :meth:`consume` after each step's batch, :meth:`position_state` for a checkpoint,
    :meth:`skip` before the Trainer's fast-forward."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[int] = []
        self._filler = 0

    def __iter__(self) -> Iterator[int]:
        """The filler indices of a resume's fast-forward (once), then the epoch's indices, tracked."""
        filler, self._filler = self._filler, 0
        for _ in range(filler):
            yield 0
        for index in super().__iter__():
            self._pending.append(index)
            yield index

    def consume(self, count: int) -> None:
        """A training step took the oldest ``count`` yielded indices."""
        del self._pending[:count]

    @property
    def lookahead(self) -> int:
        """Indices yielded but not consumed yet."""
        return len(self._pending)

    def position_state(self) -> dict[str, Any]:
        """The sampler's state (:meth:`~flexkit.FlexkitSampler.state_dict`) as of the last consumed index: the
        lookahead goes back in front of the buffer, out of the epoch's count."""
        state: dict[str, Any] = self.state_dict()
        if state["yielded"] < len(self._pending):
            raise CheckpointError(f"the sampler yielded {state['yielded']} indices this epoch but {len(self._pending)} "
                                  "are not consumed yet: the loader's lookahead crossed an epoch")
        state["buffer"] = [*self._pending, *state["buffer"]]
        state["yielded"] -= len(self._pending)
        return state

    def restore(self, state: Mapping[str, Any], skipped: int) -> None:
        """Load a :meth:`position_state` output, with the Trainer about to skip ``skipped`` indices of the current
        epoch (its fast-forward): they are yielded as filler, and count as the epoch's consumed part."""
        self.load_state_dict({**state, "yielded": skipped})
        self._pending = []
        self._filler = skipped


def check_save_alignment(args: Any, generate_every: int) -> None:
    """Refuse ``save_strategy = "steps"`` with ``save_steps × gradient_accumulation_steps`` not a multiple of
    ``generate_every`` (``steps_per_generation × num_iterations``): such checkpoints fall between generations."""
    steps = args.save_steps
    if str(args.save_strategy).rsplit(".", 1)[-1].lower() != "steps" or not steps or steps < 1:
        return
    micro = int(steps) * int(args.gradient_accumulation_steps)
    if micro % generate_every == 0:
        return
    fits = generate_every // math.gcd(generate_every, int(args.gradient_accumulation_steps))
    raise ConfigError([ConfigIssue("save_steps", (
        f"GRPOConfig save_steps = {steps} with gradient_accumulation_steps = {args.gradient_accumulation_steps} "
        f"saves between two generations (one every steps_per_generation × num_iterations = {generate_every} "
        f"micro-steps); TRL does not save its buffered generations, so a resumed run would not continue the "
        f"curriculum exactly: make save_steps a multiple of {fits}"))])


def save_state(source: Any, sampler: TrackedSampler, folder: str | os.PathLike[str], *,
               extra: Mapping[str, Any], mid_generation: bool) -> None:
    """Write the curriculum's state into the TRL checkpoint ``folder`` (see the module docstring); ``extra`` (the
    replay buffer's state, ...) goes with it."""
    position = sampler.position_state()
    meta = {"buffer": position["buffer"], "yielded": position["yielded"], "mid_generation": mid_generation}
    if isinstance(source, Pipeline):
        source.save_checkpoint(Path(folder) / PIPELINE_DIR, extra={"sampler": meta, **extra})
    else:
        torch.save({**position, "mid_generation": mid_generation}, Path(folder) / SAMPLER_FILE)


def load_state(source: Any, sampler: TrackedSampler, folder: str | os.PathLike[str], *, skipped: int) -> dict[str, Any]:
    """Restore what :func:`save_state` wrote in ``folder`` into ``source`` and ``sampler`` (the Trainer about to
    skip ``skipped`` indices); returns the saved ``extra``. A checkpoint without it, or saved between two
    generations, raises :class:`~flexkit.CheckpointError`."""
    folder = Path(folder)
    if isinstance(source, Pipeline):
        if not (folder / PIPELINE_DIR).is_dir():
            raise CheckpointError(f"{folder} holds no flexkit state ({PIPELINE_DIR}/): it was not written by "
                                  "FlexkitGRPOTrainer, so the curriculum cannot resume from it")
        extra = source.load_checkpoint(folder / PIPELINE_DIR)
        meta = extra.pop("sampler")
        position = {**sampler.state_dict(), "buffer": meta["buffer"]}
    else:
        if not (folder / SAMPLER_FILE).is_file():
            raise CheckpointError(f"{folder} holds no flexkit state ({SAMPLER_FILE}): it was not written by "
                                  "FlexkitGRPOTrainer, so the curriculum cannot resume from it")
        meta = torch.load(folder / SAMPLER_FILE, weights_only=True)
        position, extra = {k: v for k, v in meta.items() if k != "mid_generation"}, {}
    if meta["mid_generation"]:
        raise CheckpointError(f"{folder} was saved between two generations (TRL does not save its buffered "
                              "generations), so the curriculum cannot resume from it exactly: resume from a "
                              "checkpoint saved at a generation boundary")
    sampler.restore(position, skipped)
    return extra
