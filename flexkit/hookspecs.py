"""The flexkit hook specification: one hook per pipeline stage, plus lifecycle hooks for observers.

A plugin is a module (or any object) with functions decorated by :data:`hookimpl` whose names match the
hooks below. Registration hooks receive a ``register`` callback; calling it declares one component::

    from flexkit import hookimpl

    @hookimpl
    def flexkit_register_selectors(register):
        register("my_selector", MySelector, MySelectorConfig)

``register(name, factory, config=None, *, description=None)``:

- ``name``: the component's ``type`` in a pipeline TOML (lowercase letters, digits, ``_`` and ``-``);
- ``factory``: a callable building the component, called as ``factory(config, **context)`` with the
  validated config instance and stage-specific keyword arguments (listed under each hook);
- ``config``: an attrs class describing the component's parameters (``None``: it takes none); its fields
  are validated strictly and appear in the JSON Schema;
- ``description``: one line for ``flexkit plugins`` (default: the first line of the factory's docstring).

flexkit checks names, duplicates and config classes and reports problems with the plugin's name and
distribution. Hooks are always called with keyword arguments; later versions may add arguments, never
remove them, so implementations may accept only the ones they use.
"""

from __future__ import annotations

from typing import Any

import pluggy

#: The pluggy project name: entry points live in the ``flexkit`` group.
PROJECT_NAME = "flexkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator marking a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def flexkit_register_selectors(register: Any) -> None:
    """Select stage: register selectors that pick task indices inside one taskset.

    Factory context: ``size`` (int, number of tasks), ``seed`` (int or ``numpy.random.SeedSequence``) and
    ``features`` (mapping of feature-column name to numpy array). The factory returns an object with
    ``get_indices(batch_size, return_extra_info=False)``, ``feedback(indices, values)``, ``state_dict()`` and
    ``load_state_dict(state)``; subclassing :class:`flexkit.selectors.Selector` provides most of it.
    """


@hookspec
def flexkit_register_scorers(register: Any) -> None:
    """Score stage: register scorers that turn a rollout batch into scores.

    Factory context: none beyond the config. A scorer declares ``requires``, ``timing``, ``granularity`` and
    ``needs_groups``.
    """


@hookspec
def flexkit_register_actuators(register: Any) -> None:
    """Act stage: register actuators that turn scores into an action.

    An action keeps some samples (select), weights them (reweight) or sets taskset proportions (mix).
    Factory context: none beyond the config.
    """


@hookspec
def flexkit_register_feedback(register: Any) -> None:
    """Feedback stage: register operators that turn experiences into selector feedback.

    Factory context: none beyond the config. The operator's ``process(experiences)`` returns
    ``(experiences, {flexkit.SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}})``.
    """


@hookspec
def flexkit_register_storages(register: Any) -> None:
    """Taskset storage: register the ``storage_type`` values a ``[[tasksets]]`` table can name.

    Factory context: ``name`` (the taskset's name) and ``base_dir`` (the directory relative paths are
    resolved against: the pipeline file's). The factory returns a taskset: ``len()``, ``read(indices)``
    returning one dict per index, and ``column(key)`` returning a feature column as a numpy array.
    """


@hookspec
def flexkit_register_trainers(register: Any) -> None:
    """Trainer backends that ``flexkit run`` drives (the ``[trainer]`` table's ``type``).

    Factory context: ``seed`` (a ``numpy.random.SeedSequence`` derived from the pipeline seed). The factory
    returns a :class:`flexkit.trainer.Trainer`: ``setup(pipeline)``, ``rollout(tasks, step=...)``,
    ``compute_advantages(batch, step=...)``, ``update(batch, weights, step=...)``, ``evaluate(step=...)``,
    ``state_dict()`` and ``load_state_dict(state)``.
    """


# -- lifecycle hooks: observers (loggers, dashboards) see each step; return values are ignored ----------------


@hookspec
def flexkit_on_select(step: int, tasks: Any) -> None:
    """Called when the scheduler hands out batch ``step`` (0-based); ``tasks`` is its list of
    :class:`flexkit.scheduler.Task` (``taskset_id``, ``taskset``, ``index``, ``data``). Must not modify them."""


@hookspec
def flexkit_on_feedback(step: int, metrics: Any) -> None:
    """Called after feedback reached the selectors; ``metrics`` maps taskset id (or name) to
    ``{"indices": [...], "values": [...]}`` as given; ``step`` is the number of batches handed out so far."""
