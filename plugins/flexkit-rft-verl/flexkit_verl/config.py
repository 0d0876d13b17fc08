"""The ``flexkit`` keys of a verl (Hydra) config: which pipeline to load, with which overrides.

A verl run names its pipeline with Hydra keys (``+`` adds them to verl's config)::

    +flexkit.pipeline=/abs/path/pipeline.toml         # a TOML file on the node that runs the task runner
    '+flexkit.set=["run.seed=3","run.total_epochs=2"]'  # optional: flexkit's ``--set`` overrides
    +flexkit.plugins=[my_plugin]                       # optional: extra flexkit plugins (module names)

``+flexkit.pipeline=`` may also be a mapping (the pipeline's tables inline in the YAML), built with
:func:`flexkit.pipeline_from_dict`; relative storage paths then resolve against ``flexkit.base_dir``
(default: the working directory). The former single key ``flexkit_pipeline=/abs/path.toml`` is still read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flexkit import ConfigError, Pipeline, load_pipeline, pipeline_from_dict

#: The top-level key of flexkit's settings in a verl config.
CONFIG_KEY = "flexkit"
#: The single key the first flexkit-rft-verl release read (a TOML path).
LEGACY_KEY = "flexkit_pipeline"


def _plain(value: Any) -> Any:
    """A plain Python value of an OmegaConf node (or the value itself)."""
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        return value
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def flexkit_settings(config: Any) -> dict[str, Any] | None:
    """``config.flexkit`` as a plain dict (``{"pipeline": ...}`` for the legacy key), or ``None`` when absent."""
    if not isinstance(config, Mapping):  # a dict or an OmegaConf DictConfig (a Mapping too)
        return None
    getter = config.get
    section = getter(CONFIG_KEY, None)
    if section is not None:
        section = _plain(section)
        if isinstance(section, str):  # +flexkit=/path.toml
            section = {"pipeline": section}
        if not isinstance(section, Mapping):
            raise ConfigError(f"{CONFIG_KEY} must be a mapping with a 'pipeline' key, got {type(section).__name__}")
        return dict(section)
    legacy = getter(LEGACY_KEY, None)
    return {"pipeline": _plain(legacy)} if legacy is not None else None


def pipeline_from_settings(settings: Mapping[str, Any], *, key: str = CONFIG_KEY) -> Pipeline:
    """The pipeline ``settings`` describe (see the module docstring); errors name the config keys."""
    unknown = sorted(set(settings) - {"pipeline", "set", "plugins", "base_dir"})
    if unknown:
        raise ConfigError(f"{key}: unknown keys {unknown} (known: pipeline, set, plugins, base_dir)")
    source = settings.get("pipeline")
    overrides = _strings(settings.get("set") or [], f"{key}.set")
    plugins = _strings(settings.get("plugins") or [], f"{key}.plugins")
    if isinstance(source, Mapping):
        return pipeline_from_dict(dict(source), base_dir=Path(settings.get("base_dir") or "."),
                                  source=f"{key}.pipeline", plugins=plugins, overrides=overrides)
    if isinstance(source, str) and source:
        if not Path(source).is_file():
            raise ConfigError(f"{key}.pipeline={source!r}: no such file on this node (the TOML file must exist "
                              "where verl's task runner runs; or give the pipeline's tables inline)")
        return load_pipeline(source, plugins=plugins, overrides=overrides)
    raise ConfigError(f"{key}.pipeline must be a TOML path or a mapping of the pipeline's tables, got {source!r}")


def pipeline_from_config(config: Any) -> Pipeline | None:
    """The pipeline a verl config names under ``flexkit`` (or the legacy ``flexkit_pipeline``); ``None`` if none."""
    settings = flexkit_settings(config)
    return None if settings is None else pipeline_from_settings(settings)


def _strings(value: Any, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key} must be a list of strings, got {value!r}")
    return list(value)
