"""Every registered component, built and driven generically: the support of the contract checks.

A component is built from its default config: the empty table structured by the strict converter, as a pipeline
file that names only its ``type`` would be, plus a generic value for each required field (:data:`REQUIRED_FILLERS`,
by field name). Each stage gets a generic context (:func:`build`): selectors a size, a seed and synthetic feature
columns for every column their config names; storages a name and a base directory; trainers a seed; actuators the
pipeline's taskset names (``bind``). :func:`drive` runs a built selector, scorer or actuator for a few steps on
synthetic inputs drawn from a plan generator, and returns what it produced as plain data.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import numpy as np

from flexkit._lazy import is_tensor
from flexkit.config._components import ComponentSpec
from flexkit.config._converter import make_converter, structure
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.plugins._manager import Component, PluginHost

__all__ = [
    "BATCH",
    "GROUP",
    "REQUIRED_FILLERS",
    "SIZE",
    "TASKSET_NAMES",
    "TOKENS",
    "build",
    "checkpoint_round_trip",
    "default_config",
    "default_table",
    "drive",
    "feature_columns",
    "host",
    "plain",
    "registered",
    "required_fields",
    "spec_class",
    "synthetic_batch",
    "synthetic_features",
    "synthetic_scores",
]

#: The taskset names mix actuators are bound to (ids 0, 1, 2).
TASKSET_NAMES: tuple[str, ...] = ("math", "code", "logic")
#: Tasks in a selector's synthetic taskset.
SIZE = 12
#: Samples (groups of :data:`GROUP` responses) and tokens of a synthetic rollout batch.
BATCH, GROUP, TOKENS = 12, 2, 5


def _taskset_file(workdir: Path | None) -> str:
    if workdir is None:
        raise AssertionError("a file-backed config needs a scratch directory")
    path = workdir / "tasks.jsonl"
    rows = [{"id": i, "f0": i / SIZE, "f1": (i * 7 % SIZE) / SIZE} for i in range(SIZE)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


#: Generic TOML values for required config fields, by field name (called with a scratch directory or None).
REQUIRED_FILLERS: dict[str, Callable[[Path | None], Any]] = {
    "feature_keys": lambda _dir: ["f0"],
    "proportions": lambda _dir: {name: 1.0 for name in TASKSET_NAMES},
    "path": _taskset_file,
    "model": lambda _dir: "model",  # a model folder or Hub name, read only when a trainer is set up
}


@functools.cache
def host() -> PluginHost:
    """Built-ins plus the installed plugin distributions (``FLEXKIT_LOAD_PLUGINS`` applies), loaded once."""
    return PluginHost.load()


def registered(*stages: str, plugins: PluginHost | None = None) -> list[Component]:
    """The registered components of ``stages`` (default: all), by stage then name, of ``plugins`` (default:
    :func:`host`)."""
    return [c for c in (plugins or host()).all_components() if not stages or c.stage in stages]


def spec_class(stage: str) -> type[ComponentSpec]:
    """The :class:`ComponentSpec` subclass of ``stage`` (its discriminator key and converter path)."""
    found = [cls for cls in _spec_classes() if stage == cls.STAGE]
    if len(found) != 1:
        raise AssertionError(f"stage {stage!r} needs exactly one ComponentSpec subclass, found {found}")
    return found[0]


def _spec_classes() -> list[type[ComponentSpec]]:
    todo, out = [ComponentSpec], []
    while todo:
        for sub in todo.pop().__subclasses__():
            out.append(sub)
            todo.append(sub)
    return out


def required_fields(component: Component) -> list[str]:
    """The config keys (aliases) without a default."""
    return [f.alias for f in attrs.fields(component.config_cls) if f.default is attrs.NOTHING]


def default_table(component: Component, workdir: Path | None = None) -> dict[str, Any]:
    """The smallest table that configures ``component``: a generic value for each required key."""
    table: dict[str, Any] = {}
    for key in required_fields(component):
        if key not in REQUIRED_FILLERS:
            raise AssertionError(
                f"{component.stage} {component.name!r}: required key {key!r} has no generic value; add one to "
                "flexkit.testing.REQUIRED_FILLERS (or give the field a default)"
            )
        table[key] = REQUIRED_FILLERS[key](workdir)
    return table


def default_config(component: Component, workdir: Path | None = None, *, plugins: PluginHost | None = None) -> Any:
    """``component``'s config structured from :func:`default_table` by the strict converter of ``plugins``
    (default: :func:`host`)."""
    return structure(make_converter(plugins or host()), default_table(component, workdir), component.config_cls)


def feature_columns(config: Any) -> list[str]:
    """The feature columns a config names: the values of its fields named like ``*feature*``."""
    names: list[str] = []
    for name, value in attrs.asdict(config, recurse=False).items():
        if "feature" not in name or value is None:
            continue
        names.extend([value] if isinstance(value, str) else list(value))
    return names


def synthetic_features(keys: Sequence[str], size: int) -> dict[str, np.ndarray]:
    """A deterministic column in [0, 1) for each key (the same for every build of one size)."""
    return {k: np.random.default_rng([size, zlib.crc32(k.encode())]).random(size) for k in keys}


def build(component: Component, workdir: Path, *, seed: int = 0, config: Any = None,
          plugins: PluginHost | None = None) -> Any:
    """Build ``component`` (default config unless ``config``) with its stage's generic context."""
    if config is None:
        config = default_config(component, workdir, plugins=plugins)
    if component.stage == "selector":
        features = synthetic_features(feature_columns(config), SIZE)
        return component.build(config, size=SIZE, seed=seed, features=features)
    if component.stage == "storage":
        return component.build(config, name="contract", base_dir=workdir)
    if component.stage == "trainer":
        return component.build(config, seed=seed)
    built = component.build(config)
    if component.stage == "actuator":
        built.bind(list(TASKSET_NAMES))
    return built


# -- driving ---------------------------------------------------------------------------------------------


def synthetic_batch(plan: np.random.Generator) -> Any:
    """A rollout batch of :data:`BATCH` responses in groups of :data:`GROUP`, with every field the built-in
    scorers read: rewards (0/1, so some groups are all-equal), advantages, log-probs, uid, taskset ids."""
    import torch

    from flexkit.sample import RolloutBatch

    groups = BATCH // GROUP
    lengths = plan.integers(1, TOKENS + 1, size=BATCH)
    mask = torch.tensor(np.arange(TOKENS)[None, :] < lengths[:, None], dtype=torch.int64)
    rewards = (plan.random(BATCH) < 0.5).astype(np.float64)
    scores = np.zeros((BATCH, TOKENS))
    scores[np.arange(BATCH), lengths - 1] = rewards
    return RolloutBatch.from_dict({
        "response_mask": mask,
        "token_level_scores": torch.tensor(scores),
        "advantages": torch.tensor(plan.normal(size=(BATCH, TOKENS))) * mask,
        "old_log_probs": -torch.tensor(plan.random((BATCH, TOKENS))),
        "uid": np.repeat(np.arange(groups), GROUP),
        "taskset_id": np.repeat(plan.integers(0, len(TASKSET_NAMES), size=groups), GROUP),
        "index": np.repeat(plan.integers(0, SIZE, size=groups), GROUP),
    })


def synthetic_scores(accepts: Sequence[str], batch: Any, plan: np.random.Generator) -> Any:
    """Scores of the first granularity an actuator accepts (prompt scores are equal within a group)."""
    import torch

    granularity = next(g for g in ("prompt", "response", "domain", "token") if g in accepts)
    if granularity == "prompt":
        group, n = batch.group_index()
        return torch.tensor(plan.choice([0.0, 0.25, 0.5, 1.0], size=n)[group])
    if granularity == "response":
        return torch.tensor(plan.random(BATCH))
    if granularity == "domain":
        return {int(t): float(plan.random()) for t in np.unique(batch["taskset_id"])}
    return torch.tensor(plan.random((BATCH, TOKENS)))


def drive(stage: str, built: Any, steps: range, plan: np.random.Generator) -> list[Any]:
    """Run a selector, scorer or actuator for ``steps`` on inputs drawn from ``plan``; its outputs, plain."""
    out = []
    for step in steps:
        if stage == "selector":
            idx = built.get_indices(int(plan.integers(1, SIZE // 2 + 1)))
            unique = np.unique(idx)
            built.feedback(unique, plan.random(unique.size))
            out.append(plain(idx))
        elif stage == "scorer":
            out.append(plain(built(synthetic_batch(plan), step=step)))
        elif stage == "actuator":
            batch = synthetic_batch(plan)
            out.append(plain(built(synthetic_scores(built.accepts, batch, plan), batch, step=step)))
        else:
            raise ValueError(f"no generic driver for stage {stage!r}")
    return out


# -- state -----------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` as comparable plain data: arrays and tensors as lists, tuples as lists, NaN as ``"nan"``,
    attrs instances (actions) as their class name and fields."""
    if is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return plain(value.item())
    if attrs.has(type(value)):
        return {"__class__": type(value).__name__,
                **{name: plain(v) for name, v in attrs.asdict(value, recurse=False).items()}}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def checkpoint_round_trip(state: Mapping[str, Any], directory: Path) -> dict[str, Any]:
    """``state`` written and read back by the checkpoint code (JSON for structure, ``.npz`` for arrays)."""
    save_state(directory, {"component": state}, meta={})
    return cast(dict[str, Any], load_state(directory)[0]["component"])  # read back from JSON and .npz

