"""Restoring :class:`~flexkit_verl.FlexkitSampler` from verl's ``data.pt`` whatever verl did with it.

verl saves ``train_dataloader.state_dict()`` as ``<checkpoint>/global_step_<N>/data.pt``; the sampler's state
(pipeline + position) is inside it. The legacy ``RayPPOTrainer._load_checkpoint`` skips that file when ``N``
is a multiple of the steps per epoch ("Skipping dataloader state restore"), so a resume at the end of an epoch
restarted the curriculum from its first batch with fresh selectors. :func:`restore_sampler` loads the
sampler's part of the file on its own; at an epoch boundary that is all the loader needs (its next pass is a
new epoch), elsewhere it is the state the loader restores too.

The file is read with ``torch.load(weights_only=True)``: tensors and plain containers only, never an arbitrary
pickle, so a crafted ``data.pt`` cannot run code here (the sampler's state holds its arrays as tensors for
that; see :class:`flexkit.FlexkitSampler`). A file that needs more is refused with a ``CheckpointError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from flexkit import CheckpointError
from flexkit_verl.replay import VerlReplay, prune_replay_files
from flexkit_verl.sampler import FlexkitSampler


@runtime_checkable
class HasSampler(Protocol):
    """A dataloader, as far as flexkit reads it: verl's ``StatefulDataLoader``, or any loader with a ``sampler``."""

    sampler: Any


def loader_sampler(loader: Any) -> FlexkitSampler | None:
    """The :class:`FlexkitSampler` of ``loader`` (``None``: no loader, or another sampler)."""
    sampler = loader.sampler if isinstance(loader, HasSampler) else None
    return sampler if isinstance(sampler, FlexkitSampler) else None


def checkpoint_folder(config: Any, global_steps: int) -> str | None:
    """The ``global_step_<N>`` folder verl resumed from, or ``None`` (fresh start, resume disabled)."""
    trainer = config.trainer
    if trainer.get("resume_mode", "auto") == "disable" or not global_steps:
        return None
    if trainer.get("resume_mode") == "resume_path" and trainer.get("resume_from_path"):
        folder = str(trainer.resume_from_path)
    else:
        folder = os.path.join(str(trainer.default_local_dir), f"global_step_{int(global_steps)}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def sampler_state(loader_state: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The sampler's ``state_dict()`` inside a ``StatefulDataLoader`` state (``num_workers`` 0 or more)."""
    candidates = [loader_state]
    snapshot = loader_state.get("_snapshot")
    if isinstance(snapshot, Mapping):
        candidates.append(snapshot.get("_main_snapshot") or {})
    for state in candidates:
        inner = state.get("_sampler_iter_state") if isinstance(state, Mapping) else None
        if isinstance(inner, Mapping) and isinstance(inner.get("sampler_state"), Mapping):
            found: Mapping[str, Any] = inner["sampler_state"]
            return found
    return None


def restore_sampler(loader: Any, folder: str | None) -> bool:
    """Load the :class:`FlexkitSampler` of ``loader`` from ``folder/data.pt``; ``False`` when there is none
    (no flexkit sampler, no folder or no file). A file without a sampler state raises ``CheckpointError``; one that
    ``torch.load(weights_only=True)`` refuses (it holds objects besides tensors and plain data, e.g. a crafted
    pickle) raises :class:`~flexkit.errors.CheckpointError`, and none of its code runs."""
    sampler = loader_sampler(loader)
    if sampler is None or folder is None:
        return False
    path = os.path.join(folder, "data.pt")
    if not os.path.exists(path):
        return False
    try:
        loaded = torch.load(path, weights_only=True)
    except Exception as exc:  # UnpicklingError for anything but tensors and plain data; damaged files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CheckpointError(f"cannot restore the flexkit sampler from {path}: torch.load(weights_only=True) "
                              f"refused it ({type(exc).__name__}: {first[:200]}); flexkit never unpickles "
                              "arbitrary objects from a checkpoint") from None
    state = sampler_state(loaded) if isinstance(loaded, Mapping) else None
    if state is None:
        raise CheckpointError(f"{path} holds no sampler state: it was not saved by a loader with a FlexkitSampler")
    sampler.load_state_dict(state)
    return True


def save_with_replay(save: Callable[[], Any], replay: VerlReplay | None, config: Any, global_steps: int) -> Any:
    """verl's checkpoint save (``save``, a trainer's ``super()._save_checkpoint``) with the ``[replay]`` buffer
    written into ``global_step_<N>/flexkit_replay.pt`` first (so ``latest_checkpointed_iteration.txt`` then names a
    folder that holds it) and, after, the buffer files of the folders whose actor checkpoint verl has deleted removed
    (:func:`~flexkit_verl.replay.prune_replay_files`)."""
    root = str(config.trainer.default_local_dir)
    folder = os.path.join(root, f"global_step_{int(global_steps)}")
    if replay is not None:
        replay.save(folder)
    result = save()
    if replay is not None:
        prune_replay_files(root, folder)
    return result


def restore_after_load(loader: Any, replay: VerlReplay | None, config: Any, global_steps: int) -> None:
    """After verl's checkpoint load: the flexkit sampler of ``loader`` from ``data.pt`` (whatever verl skipped,
    :func:`restore_sampler`) and the ``[replay]`` buffer from the folder verl resumed from."""
    folder = checkpoint_folder(config, global_steps)
    restore_sampler(loader, folder)
    if replay is not None and folder is not None:
        replay.load(folder)
