"""The flexkit hook specification: one hook per pipeline stage, plus lifecycle hooks for observers.

A plugin is a module (or any object) with functions decorated by :data:`hookimpl` whose names match the
hooks below. Registration hooks receive a ``register`` callback; calling it declares one component::

    from flexkit import hookimpl

    @hookimpl
    def flexkit_register_selectors(register):
        register("my_selector", MySelector, MySelectorConfig)

``register(name, factory, config=None, *, description=None)`` (typed as :class:`Register`):

- ``name``: the component's ``type`` in a pipeline TOML (lowercase letters, digits, ``_`` and ``-``);
- ``factory``: a callable building the component, called as ``factory(config, **context)`` with the
  validated config instance and stage-specific keyword arguments (listed under each hook);
- ``config``: an attrs class describing the component's parameters (``None``: it takes none); its fields
  are validated strictly and appear in the JSON Schema;
- ``description``: one line for ``flexkit plugins`` (default: the first line of the factory's docstring).

flexkit checks names, duplicates and config classes and reports problems with the plugin's name and
distribution. What a factory returns must be a component of its stage (the methods the pipeline calls,
:data:`flexkit.plugins._contract.REQUIRED`), else building it raises :class:`~flexkit.errors.ComponentError`; a
selector's, scorer's and actuator's output is checked where it enters flexkit. Hooks are always called with
keyword arguments; later versions may add arguments, never remove them, so implementations may accept only the
ones they use.

flexkit's own components are registered the same way, all in one module: :mod:`flexkit.plugins.builtins`. A component
class follows one pattern (:mod:`flexkit.plugins._contract`): it names its config class as ``Config`` (built with its
defaults when the factory gets ``None``) and never repeats its registered name, which the plugin host sets on
what it builds (``registered_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pluggy

#: The pluggy project name: entry points live in the ``flexkit`` group.
PROJECT_NAME = "flexkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator marking a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """The ``register`` callback a registration hook receives; each call declares one component."""

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any],
        config: type | None = None,
        *,
        description: str | None = None,
    ) -> None:
        """Declare ``name`` (a pipeline's ``type``), built as ``factory(config, **context)`` from an instance of
        the attrs class ``config`` (``None``: no parameters); ``description`` defaults to the factory's
        docstring's first line."""


@hookspec
def flexkit_register_selectors(register: Register) -> None:
    """Select stage: register selectors that pick task indices inside one taskset.

    Factory context: ``size`` (int, number of tasks), ``seed`` (int or ``numpy.random.SeedSequence``) and
    ``features`` (mapping of feature-column name to numpy array). The factory returns an object with
    ``get_indices(batch_size, return_extra_info=False)``, ``feedback(indices, values)``, ``state_dict()`` and
    ``load_state_dict(state)``; subclassing :class:`flexkit.selectors.Selector` provides most of it.

    Conventions the pipeline and the scheduler rely on (:mod:`flexkit.selectors._base`):

    - ``feature_keys``: the config field naming the taskset's feature columns the selector reads, in order; the
      pipeline loads exactly those into ``features`` (a config without the field gets none);
    - ``allows_repeats`` (class attribute, default false): whether one batch may hold an index twice; if not,
      the scheduler refuses a batch share larger than the taskset, and a batch that repeats an index;
    - ``repeats_across_epochs`` (class attribute, default false): a batch crossing the end of the selector's own
      epoch may hold an index twice, once per epoch (``shuffle``);
    - ``learns_from_feedback`` (class attribute, default false): whether feedback changes what it picks;
    - ``_update(indices, values)``: the method a learning :class:`~flexkit.selectors.Selector` overrides;
      ``feedback`` calls it with validated values (int64 indices without duplicates, float64 values in [0, 1]).
    """


@hookspec
def flexkit_register_scorers(register: Register) -> None:
    """Score stage: register scorers that turn a rollout batch into scores.

    Factory context: none beyond the config. A scorer declares ``requires``, ``timing``, ``granularity`` and
    ``needs_groups``.
    """


@hookspec
def flexkit_register_actuators(register: Register) -> None:
    """Act stage: register actuators that turn scores into an action.

    An action keeps some samples (select), weights them (reweight) or sets taskset proportions (mix).
    Factory context: none beyond the config.
    """


@hookspec
def flexkit_register_feedback(register: Register) -> None:
    """Feedback stage: register operators that turn experiences into selector feedback.

    Factory context: none beyond the config. The operator (:class:`flexkit.FeedbackOperator`) has
    ``process(experiences)``, returning
    ``(experiences, {flexkit.SELECTOR_METRIC: {taskset_id: {"indices": [...], "values": [...]}}})``; it is
    rebuilt from the config on resume, so it keeps no state a run depends on.
    """


@hookspec
def flexkit_register_storages(register: Register) -> None:
    """Taskset storage: register the ``storage_type`` values a ``[[tasksets]]`` table can name.

    Factory context: ``name`` (the taskset's name) and ``base_dir`` (the directory relative paths are
    resolved against: the pipeline file's). The factory returns a taskset: ``len()``, ``read(indices)``
    returning one dict per index, and ``column(key)`` returning a feature column as a numpy array.
    """


@hookspec
def flexkit_register_trainers(register: Register) -> None:
    """Trainer backends that ``flexkit run`` drives (the ``[trainer]`` table's ``type``).

    Factory context: ``seed`` (a ``numpy.random.SeedSequence`` derived from the pipeline seed). The factory
    returns a :class:`flexkit.Trainer`: ``setup(pipeline)``, ``rollout(tasks, step=...)``,
    ``compute_advantages(batch, step=...)``, ``update(batch, weights, step=...)``, ``evaluate(step=...)``,
    ``state_dict()`` and ``load_state_dict(state)``.
    """


@hookspec
def flexkit_group_estimators() -> list[str]:  # type: ignore[empty-body]  # a spec: pluggy calls the implementations
    """Names of advantage estimators that sample a group of responses per prompt (GRPO-like), so that a scorer
    with ``needs_groups`` accepts them as ``[sample] estimator``. A trainer plugin returns its own estimators;
    flexkit's built-ins return GRPO's family (:data:`flexkit.sample._scorer.GROUP_ESTIMATORS`). The sample stage
    accepts the union over the plugins."""


# -- lifecycle hooks: observers (loggers, dashboards) see each step; return values are ignored ----------------


@hookspec
def flexkit_on_select(step: int, tasks: Any) -> None:
    """Called after the scheduler handed out batch ``step`` (0-based), outside its lock; ``tasks`` is its list of
    :class:`flexkit.Task` (``taskset_id``, ``taskset``, ``index``, ``data``). Must not modify them.
    An exception is logged (:mod:`flexkit.scheduler._observers`), never raised: the batch is handed out all the same."""


@hookspec
def flexkit_on_feedback(step: int, metrics: Any) -> None:
    """Called after feedback reached the selectors, outside the scheduler's lock; ``metrics`` maps taskset id (or
    name) to ``{"indices": ..., "values": ...}`` as given (lists, or arrays from the built-in operator); ``step``
    is the number of batches handed out so far. An exception is logged (:mod:`flexkit.scheduler._observers`), never
    raised:
    the feedback stays applied."""
