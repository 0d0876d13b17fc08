"""Warm-started weights shipped with the plugin, so that every machine starts the RL phase from the same policy.

The warm start (:meth:`flexkit_toyrl.trainer.ToyRLTrainer.warm_start`) is 500 supervised Adam steps. Its
floating-point results depend on the CPU's vector instructions and the BLAS kernels torch picks for them
(AVX2, AVX-512), and the tiny differences grow over the steps: with torch 2.13.0 and the same configuration,
x86 machines with different instruction sets left the warm-started policy at held-out accuracies from 0.198 to
0.266 (level 2: 0.16 to 0.48). A comparison run over several sessions, or rerun elsewhere, would then start
its arms from different policies. Real RL fine-tuning starts from one pretrained checkpoint; so does ``toyrl``:
for the configurations of the repository's examples the warm-started weights ship in this folder, and
:meth:`~flexkit_toyrl.trainer.ToyRLTrainer.warm_start` loads them when ``pretrained = true`` (the default) and
every warm-start parameter matches. Other configurations compute the warm start as before.

Each file is ``<operation>-<digest>.npz``: the model's arrays under ``model/<name>``, the warm start's last
loss, and the warm-start parameters as JSON (``identity``), checked in full on load. Regenerate them with
``python -m flexkit_toyrl.write_pretrained PIPELINE.toml ...`` (one file per pipeline's ``[trainer]`` table).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from flexkit_toyrl.config import ToyRLConfig

#: Folder of the shipped files.
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained_weights"
#: Configuration fields that determine the warm-started weights (and nothing else does).
WARM_START_FIELDS = ("operation", "max_digits", "base", "d_model", "n_layers", "n_heads", "warmup_seed",
                     "warmup_steps", "warmup_batch_size", "warmup_learning_rate", "warmup_level_weights",
                     "max_grad_norm")
#: Version of the warm start's procedure and of the file layout (a change to either makes old files unused).
FORMAT = 1


def warm_start_identity(config: ToyRLConfig) -> dict[str, Any]:
    """The warm-start parameters of ``config`` (JSON values) and :data:`FORMAT`."""
    identity: dict[str, Any] = {"format": FORMAT}
    fields = attrs.asdict(config, recurse=False)
    for name in WARM_START_FIELDS:
        value = fields[name]
        identity[name] = list(value) if isinstance(value, tuple) else value
    return identity


def shipped_path(config: ToyRLConfig, directory: Path = PRETRAINED_DIR) -> Path:
    """Where the weights warm-started with ``config``'s parameters are (or would be) shipped."""
    text = json.dumps(warm_start_identity(config), sort_keys=True)
    return directory / f"{config.operation}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"


class PretrainedError(RuntimeError):
    """A shipped warm-start file that does not hold what its name says (a packaging error)."""


def load_shipped(config: ToyRLConfig, names: Mapping[str, tuple[int, ...]],
                 directory: Path = PRETRAINED_DIR) -> tuple[dict[str, np.ndarray], float] | None:
    """The shipped weights for ``config`` and the warm start's last loss, or ``None`` when none ship.

    ``names`` maps each model array to its shape; a file whose identity, arrays or shapes differ raises
    :class:`PretrainedError` (it is never used in part).
    """
    path = shipped_path(config, directory)
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        saved = json.loads(str(data["identity"]))
        if saved != warm_start_identity(config):
            raise PretrainedError(f"{path} holds the warm start of {saved}, not of {warm_start_identity(config)}")
        arrays = {key[len("model/"):]: np.array(data[key]) for key in data.files if key.startswith("model/")}
        loss = float(data["warmup_loss"])
    shapes = {name: tuple(array.shape) for name, array in arrays.items()}
    if shapes != {name: tuple(shape) for name, shape in names.items()}:
        raise PretrainedError(f"{path} holds arrays {shapes}, the model has {dict(names)}")
    return arrays, loss


def save_warm_start(trainer: Any, directory: Path = PRETRAINED_DIR) -> Path:
    """Write ``trainer``'s warm-started weights (warm-starting it first) where :func:`load_shipped` finds them."""
    trainer.warm_start()
    path = shipped_path(trainer.config, directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {f"model/{k}": v.detach().numpy() for k, v in trainer.model.state_dict().items()}
    np.savez(path, identity=np.array(json.dumps(warm_start_identity(trainer.config), sort_keys=True)),
             warmup_loss=np.array(trainer.warmup_loss), **arrays)
    return path
