"""The component contract: what every selector, scorer, actuator, feedback operator and trainer shares, in one
module (the registry builds on it; nothing here imports the registry).

- **The component pattern** (:class:`Configurable`): a component names its config class and learns its name from
  the registry.
- **The stage contracts as typing protocols** (:class:`SelectorLike`, :class:`ScorerLike`, :class:`ActuatorLike`,
  :class:`TrainerLike`, :class:`FeedbackOperator`, ...): what a host may call on a component of each stage.
- **The checks a built component meets** (:func:`check_built`, :func:`check_selection`, :func:`describe_component`).
- **The trainer base class** (:class:`Trainer`, :class:`Rollout`): what ``flexkit run`` drives each step.

Each part's own notes follow.

**The component pattern.** A component class names its config class, and learns its name from the registry.

Selectors, scorers, actuators, feedback operators and trainers share it through :class:`Configurable`:

- ``Config``: the component's attrs config class. ``__init__(config=None)`` builds ``Config()`` (its
  defaults) when no config is given, so a subclass never repeats ``config if config is not None else ...``;
- ``registered_name``: the ``type`` name the component was built under. The plugin host sets it on what it
  builds (:meth:`flexkit.plugins._manager.Component.build`), so a class never repeats the name it is registered under;
  :func:`registered_name_of` also finds it for an object built directly, from the default registry. The host
  sets ``registered_plugin`` and ``registered_distribution`` the same way, so an error about a component's
  output can say where it came from.

**The stage protocols.** The stage contracts as typing protocols: what flexkit calls on each kind of component.

A component need not derive from flexkit's base classes (:class:`~flexkit.selectors.Selector`,
:class:`~flexkit.sample.Scorer`, :class:`~flexkit.sample.Actuator`, :class:`~flexkit.Trainer`,
:class:`~flexkit.tasksets.Taskset`): the plugin host checks what a factory built against
:data:`flexkit.plugins._contract.REQUIRED`, and flexkit then uses only the members named here. Annotations take these
protocols where any conforming object will do. Members a component may lack (``bind``, ``metrics``,
``learns_from_feedback``, ``check_rows``, ``content_id``, ``set_progress``, ...) are not part of them: each is
declared on its base class with a documented no-op default, and flexkit calls it there unconditionally. A
duck-typed component that does not derive from the base is asked for them in one place per kind, the readers
built on :func:`optional_member` (``selectors/_members.py``, ``sample/_members.py``, ``tasksets/_base.py``'s
``check_rows``, ``content_id`` and ``path_of``, this module's :func:`set_progress` and
:func:`registered_name_of`, and the traits of a factory that the sample stage's checks and the component reference
read); nothing else in flexkit asks a component whether it has a member.

The sample level's types (:class:`~flexkit.sample.RolloutBatch`, the actions) live above this module's layer, so
the scorer's and actuator's batches, scores and actions are typed ``Any`` here.

**The checks of a built component.** Component contracts, checked where flexkit receives a component or its output.

- :func:`check_built`: what a factory built is a component of its stage (it has the methods and attributes the
  pipeline uses), so a wrong factory fails when it is built, not with an ``AttributeError`` at the first read;
- :func:`check_selection`: what a selector returned for a request of ``n`` indices is ``n`` integers in
  ``0 .. size-1``, without repeats unless the selector ``allows_repeats`` (numpy checks on the batch only);
- :func:`describe_component`: ``selector 'name' (Class, plugin 'p', distribution 'd')`` for messages.

Errors are :class:`~flexkit.errors.ComponentError` and name the component, its plugin and its distribution.

**The trainer base class.** The trainer base class and :class:`Rollout`: what ``flexkit run`` drives each step.

A trainer backend is registered through ``flexkit_register_trainers`` and named by a pipeline's ``[trainer]``
table. Each step (:func:`flexkit.run._step.train_step`) reads a batch, calls :meth:`Trainer.rollout`, snapshots the
experiences, runs the sample stage at ``post_reward``, calls :meth:`Trainer.compute_advantages`, runs the sample
stage at ``post_advantage``, then calls :meth:`Trainer.update` while the feedback (on the snapshot) updates the
selectors in a background thread; every ``[run] eval_every`` steps (and before the first and after the last)
:meth:`Trainer.evaluate` (the **test** split: recorded, what runs are judged on, never shown to the selectors) and,
for a trainer with :attr:`Trainer.supports_validation`, :meth:`Trainer.validate` (the **validation** split: recorded
too, and the only evaluation the selectors get, :meth:`flexkit.Pipeline.evaluation`). The full order,
``[sample.refill]`` included, and the contract: docs/plugins/trainer.md.

Because the feedback reads the snapshot (:func:`flexkit.scheduler.feedback.snapshot_experiences`),
``compute_advantages``
may rewrite rewards in place, even in an array the experiences share, without feeding the selectors advantages.
Metrics (``Rollout.metrics``, ``update``'s and ``evaluate``'s) must be numbers and must not use the names the
runner writes itself (:func:`flexkit.run._trainer_output.trainer_metrics` checks them). Third-party trainers follow
the same protocol, so the runner has no special case for flexkit's own.

Long phases (a warm start, loading a model) can show progress: before :meth:`Trainer.setup` the runner calls
``trainer.set_progress(callback)`` (:func:`set_progress`: every :class:`Trainer` has the method; a duck-typed
trainer without it is left alone), and the trainer calls ``self.report_progress(phase, done, total)`` as it goes
(``"warm start"``, 120, 500); the runner shows it on its progress display. A trainer without the method works as
before, silently.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeGuard, runtime_checkable

import attrs
import numpy as np

from flexkit.errors import ComponentError, FeedbackError, FlexkitError

__all__ = ["REQUIRED", "WHAT", "ActuatorLike", "Configurable", "FeedbackOperator", "FeedbackSource",
           "GroupFilterLike", "OutOfRange", "RefillAction", "Rollout", "ScorerLike", "SelectorLike", "Stateful",
           "TasksetLike", "Trainer", "TrainerLike", "ValidationRows", "call_declared", "check_built", "check_selection",
           "check_trainer_setup", "component_bugs", "default_config", "describe_component", "display_name",
           "group_size_of", "is_group_filter", "optional_member", "origin", "registered_name_of", "set_name_resolver",
           "set_progress"]


#: How :func:`registered_name_of` names a class built outside the plugin host: set once by the plugin manager
#: (:func:`set_name_resolver`; the registry imports components, never the other way round). ``None``: unnamed.
_name_resolver: Callable[[type], str | None] | None = None


def set_name_resolver(resolver: Callable[[type], str | None]) -> None:
    """Name classes built outside the plugin host with ``resolver`` (the default registry's ``name_of``)."""
    global _name_resolver
    _name_resolver = resolver


def call_declared(obj: Any, base: type, name: str, *args: Any) -> None:
    """Call the optional member ``name`` of ``obj`` with ``args``: directly on an object of ``base`` (which declares
    it, a documented no-op by default), else where a duck-typed object has it (:func:`optional_member`); one
    without it is left alone."""
    if isinstance(obj, base):
        getattr(obj, name)(*args)
        return
    found = optional_member(obj, name)
    if callable(found):
        found(*args)


def optional_member(obj: Any, name: str, default: Any = None) -> Any:
    """The member ``name`` of ``obj`` (a component, or its class) that its kind declares optional, ``default``
    where it lacks it: the one place flexkit reads a member a duck-typed component may not have (each kind's
    reader calls it for objects that do not derive from the base class, which declares every such member). What
    a property raises besides ``AttributeError`` (a plugin's own bug) surfaces as it is."""
    return getattr(obj, name, default)


class Configurable:
    """Base of components: ``Config`` gives the default config, ``registered_name`` the name (see the module)."""

    #: The component's attrs config class; ``None``: a missing config stays ``None``.
    Config: ClassVar[type[Any] | None] = None
    #: The name this component was built under; set by the plugin host (``None``: not built through it).
    registered_name: str | None = None
    #: The plugin that registered it, and that plugin's distribution (``None``: unknown or a local plugin); set
    #: by the plugin host with :attr:`registered_name`, for messages about the component's output.
    registered_plugin: str | None = None
    registered_distribution: str | None = None

    def __init__(self, config: Any = None) -> None:
        self.config = default_config(type(self), config)


def default_config(cls: type, config: Any) -> Any:
    """``config``, or ``cls.Config()`` (the config class's defaults) when ``config`` is ``None``."""
    if config is None:
        config_cls = optional_member(cls, "Config")  # declared on Configurable; any class will do
        if config_cls is not None:
            return config_cls()
    return config


def registered_name_of(obj: Any) -> str | None:
    """The name ``obj`` (a component or its class) is registered under.

    ``obj.registered_name`` when set (the plugin host sets it on what it builds), else the one name the default
    plugin host registers the class under; ``None`` when it is not registered, or under several names.
    """
    name = optional_member(obj, "registered_name")  # declared on Configurable; a duck-typed component may lack it
    if isinstance(name, str):
        return name
    if _name_resolver is None:
        return None
    try:
        return _name_resolver(obj if isinstance(obj, type) else type(obj))
    except Exception:  # a broken plugin (strict mode) must not replace the message being written
        return None


def display_name(obj: Any) -> str:
    """``'name' (ClassName)`` for messages about ``obj`` (a component or its class); ``ClassName`` when unnamed."""
    cls = obj if isinstance(obj, type) else type(obj)
    name = registered_name_of(obj)
    return f"{name!r} ({cls.__name__})" if name else cls.__name__


#: What to do with a feedback value outside [0, 1]: clip it into range, or reject the payload.
OutOfRange = Literal["clip", "error"]


class Stateful(Protocol):
    """A component whose state a checkpoint holds: plain data (JSON values and numpy arrays)."""

    def state_dict(self) -> dict[str, Any]:
        """The state to continue exactly."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        ...


class SelectorLike(Stateful, Protocol):
    """A selector: picks task indices inside one taskset and learns from feedback (``stage = "selector"``)."""

    def get_indices(
        self, batch_size: int, return_extra_info: bool = False
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """The indices of the next ``batch_size`` tasks (with ``return_extra_info``: ``(indices, info)``)."""
        ...

    def feedback(
        self,
        indices: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        *,
        out_of_range: OutOfRange = "clip",
    ) -> None:
        """Learn from observed values (e.g. each task's mean reward) for ``indices``."""
        ...


class TasksetLike(Protocol):
    """A taskset, as a storage's factory builds it (``stage = "storage"``): a table of tasks read by index."""

    def __len__(self) -> int:
        """The number of tasks (rows)."""
        ...

    def read(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows at ``indices`` as fresh dicts, in the order asked."""
        ...

    def column(self, key: str) -> np.ndarray:
        """The feature ``key`` of every row as a float64 array (read only for selectors that use features)."""
        ...


class ScorerLike(Stateful, Protocol):
    """A scorer (``stage = "scorer"``): turns a rollout batch into scores of its ``granularity``."""

    @property
    def timing(self) -> str:
        """Where the runner calls the stage (one of :data:`flexkit.sample._scorer.TIMINGS`)."""
        ...

    @property
    def granularity(self) -> str:
        """What one score describes (one of :data:`flexkit.sample._scorer.GRANULARITIES`)."""
        ...

    def __call__(self, batch: Any, *, step: int) -> Any:
        """The scores of ``batch`` (a :class:`~flexkit.sample.RolloutBatch`) at training step ``step``."""
        ...


class ActuatorLike(Stateful, Protocol):
    """An actuator (``stage = "actuator"``): turns scores into one action of its ``mechanism``."""

    @property
    def mechanism(self) -> str:
        """One of :data:`flexkit.sample._scorer.MECHANISMS`."""
        ...

    @property
    def accepts(self) -> Sequence[str]:
        """The score granularities it understands."""
        ...

    def __call__(self, scores: Any, batch: Any, *, step: int) -> Any:
        """The action (``Keep``, ``Weights`` or ``Mix``) for ``scores`` of ``batch`` at ``step``."""
        ...


class GroupFilterLike(ActuatorLike, Protocol):
    """A select actuator that keeps or drops whole groups and reports the groups a step still needs, so that
    ``[sample.refill]`` (dynamic sampling) can drive it: its actions carry ``target_groups`` and ``refill``
    (:class:`~flexkit.sample.actuators.group_filter.GroupKeep`)."""

    @property
    def refills(self) -> bool:
        """True: it reports the groups a step still needs."""
        ...


def is_group_filter(actuator: ActuatorLike) -> TypeGuard[GroupFilterLike]:
    """Whether ``actuator`` is a group filter that can drive a refill loop (its ``refills`` is true)."""
    return bool(optional_member(actuator, "refills", False))


@runtime_checkable
class RefillAction(Protocol):
    """What a group filter's action carries for a refill loop (:class:`GroupFilterLike`;
    :class:`~flexkit.sample.actuators.group_filter.GroupKeep` is flexkit's): the kept rows, the groups the step
    targets, and whether it needs another round."""

    indices: Any
    target_groups: int
    refill: bool


@runtime_checkable
class FeedbackSource(Protocol):
    """A batch that gives the feedback its own columns (:class:`~flexkit.sample.RolloutBatch`, which lives above
    this layer): ``taskset_id``, ``index`` and each response's reward."""

    def feedback_columns(self) -> Mapping[str, Any]:
        """The feedback columns, copied (equal-length arrays ``taskset_id``, ``index``, ``reward``)."""
        ...


class TrainerLike(Stateful, Protocol):
    """A trainer backend (``stage = "trainer"``): what ``flexkit run`` drives each step
    (:mod:`flexkit.plugins._contract`)."""

    def setup(self, pipeline: Any) -> None:
        """Called once before the first step (and before a checkpoint is loaded)."""
        ...

    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Generate responses for ``tasks`` and score them."""
        ...

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """Add ``advantages`` to ``batch``."""
        ...

    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One policy update from ``batch`` with per-token loss ``weights``; returns metrics."""
        ...

    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Held-out evaluation: at least ``eval_accuracy``."""
        ...


@runtime_checkable
class FeedbackOperator(Protocol):
    """What a ``[feedback]`` operator is: built by its registered factory as ``factory(config)``.

    It keeps no state a run depends on: a checkpoint does not hold it, and a resumed run rebuilds it from the
    config. Subclass :class:`~flexkit.Configurable` too for the default config and the name.
    """

    def process(self, experiences: Iterable[Any] | Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(experiences, {SELECTOR_METRIC: {taskset_id: {"indices": ..., "values": ...}}})``: the
        experiences (passed on to the trainer) and the feedback for the selectors (lists or 1-D arrays; the
        built-in operator gives int64 and float64 arrays)."""
        ...


#: What the pipeline uses of each stage's components: (methods, attributes). ``__call__``: the object is callable.
REQUIRED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "selector": (("get_indices", "feedback", "state_dict", "load_state_dict"), ()),
    "scorer": (("__call__", "state_dict", "load_state_dict"), ("timing", "granularity")),
    "actuator": (("__call__", "state_dict", "load_state_dict"), ("mechanism", "accepts")),
    "feedback": (("process",), ()),
    "storage": (("__len__", "read"), ()),
    "trainer": (("setup", "rollout", "compute_advantages", "update", "evaluate", "state_dict", "load_state_dict"),
                ()),
}

#: What each stage's factory should build, for messages.
WHAT: dict[str, str] = {
    "selector": "a selector (flexkit.selectors.Selector)",
    "scorer": "a scorer (flexkit.sample.Scorer)",
    "actuator": "an actuator (flexkit.sample.Actuator)",
    "feedback": "a feedback operator (flexkit.scheduler.feedback.FeedbackOperator)",
    "storage": "a taskset (flexkit.tasksets.Taskset)",
    "trainer": "a trainer (flexkit.Trainer)",
}


def origin(plugin: str | None, distribution: str | None) -> str:
    """``plugin 'p', distribution 'd'`` (or ``local plugin 'p'``; ``""`` when both are unknown)."""
    if plugin is None and distribution is None:
        return ""
    if distribution is None:
        return f"local plugin {plugin!r}"
    return f"plugin {plugin!r}, distribution {distribution!r}" if plugin else f"distribution {distribution!r}"


def describe_component(obj: Any, stage: str | None = None) -> str:
    """``selector 'name' (Class, plugin 'p', distribution 'd')``: what ``obj`` is and where it came from.

    The plugin host records the name, plugin and distribution on what it builds
    (:meth:`flexkit.plugins._manager.Component.build`); for other objects the name comes from the default registry when
    the class is registered there, and the origin is left out.
    """
    cls = type(obj)
    name = registered_name_of(obj)
    where = origin(optional_member(obj, "registered_plugin"), optional_member(obj, "registered_distribution"))
    inside = ", ".join(part for part in (cls.__name__, where) if part)
    head = f"{stage} " if stage else ""
    return f"{head}{name!r} ({inside})" if name else f"{head}{inside}"


def _missing(stage: str, built: Any) -> list[str]:
    methods, attributes = REQUIRED[stage]
    out = [m if m != "__call__" else "__call__ (it is not callable)" for m in methods
           if not (callable(built) if m == "__call__" else callable(getattr(built, m, None)))]
    return out + [a for a in attributes if not hasattr(built, a)]


def check_built(
    stage: str, built: Any, *, name: str, plugin: str | None, distribution: str | None, factory: Callable[..., Any]
) -> None:
    """Raise :class:`~flexkit.errors.ComponentError` unless ``built`` (what ``factory`` returned for the
    ``stage`` component ``name``) is an instance with every method and attribute of :data:`REQUIRED`."""
    if stage not in REQUIRED:
        return
    where = origin(plugin, distribution)
    who = f"{stage} {name!r}" + (f" ({where})" if where else "")
    factory_name = getattr(factory, "__qualname__", None) or type(factory).__name__
    if isinstance(built, type):
        raise ComponentError(f"{who}: its factory {factory_name} returned the class {built.__qualname__}, not an "
                             f"instance; it must return {WHAT[stage]}")
    missing = _missing(stage, built)
    if missing:
        raise ComponentError(f"{who}: its factory {factory_name} returned {type(built).__qualname__}, which is not "
                             f"{WHAT[stage]}: it lacks {', '.join(missing)}")


def check_selection(
    picked: Any, n: int, size: int, *, allows_repeats: bool, who: Callable[[], str], twice: bool = False
) -> np.ndarray:
    """``picked`` (a selector's answer to ``get_indices(n)``) as a fresh int64 array, or
    :class:`~flexkit.errors.ComponentError` naming ``who()`` (called only then): not a flat array of integers
    (float indices would be truncated), not ``n`` of them, one outside ``0 .. size-1``, or a repeat from a
    selector that does not ``allows_repeats`` (with ``twice``, for ``repeats_across_epochs``: an index more than
    twice)."""
    try:
        arr = np.asarray(picked)
    except Exception as exc:  # ragged lists, a (indices, info) tuple, ...
        raise ComponentError(f"{who()} returned {type(picked).__name__}, not an array of indices ({exc})") from None
    if arr.ndim != 1:
        raise ComponentError(f"{who()} returned indices of shape {arr.shape} for a request of {n}; expected ({n},)")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise ComponentError(f"{who()} returned {arr.dtype} indices (such as {arr[0]!r}); indices must be integers "
                             "(a float index would be truncated)")
    if arr.shape[0] != n:
        raise ComponentError(f"{who()} returned {arr.shape[0]} indices for a request of {n}")
    bad = (arr < 0) | (arr >= size)  # before any cast: a uint64 index past 2^63 would wrap to a negative one
    if bad.any():
        raise ComponentError(f"{who()} returned index {int(arr[bad][0])}, outside 0 .. {size - 1} (the taskset has "
                             f"{size} tasks)")
    out = arr.astype(np.int64, copy=True)  # a copy: the selector may reuse its buffer
    gap = 2 if twice else 1  # ordered[k] == ordered[k + gap]: an index more than ``gap`` times
    if not allows_repeats and n > gap:
        ordered = np.sort(out)
        repeated = ordered[gap:][ordered[gap:] == ordered[:-gap]]
        if repeated.size:
            times = "three times" if twice else "twice"
            raise ComponentError(f"{who()} returned index {int(repeated[0])} {times} in one batch, but it does not "
                                 "allow repeats (allows_repeats is False)")
    return out


@contextlib.contextmanager
def component_bugs(component: Any, where: str) -> Iterator[None]:
    """Report what ``component`` raises while it is built at ``where`` (``tasksets[0]``): flexkit's own errors
    (a bad taskset, a bad config) pass through; a broken contract, or any other exception (the plugin's bug, not
    the pipeline's config), is a :class:`~flexkit.errors.ComponentError` naming the component, its plugin and
    its distribution. ``component`` is a registered :class:`~flexkit.plugins._manager.Component` (``stage``, ``name``,
    ``plugin``, ``distribution``)."""
    try:
        yield
    except ComponentError as exc:
        raise ComponentError(f"{where}: {exc}") from exc
    except FlexkitError:
        raise
    except Exception as exc:
        who = f"{component.stage} {component.name!r}"
        where_from = origin(component.plugin, component.distribution)
        who += f" ({where_from})" if where_from else ""
        raise ComponentError(f"{where}: {who} raised {type(exc).__name__} while it was built: {exc}") from exc


@attrs.frozen(kw_only=True)
class Rollout:
    """What one step's generation produced.

    ``batch`` is a :class:`~flexkit.sample.RolloutBatch` (one row per response: rewards, ``response_mask``,
    ``uid`` group ids, ``taskset_id``, ``index``); ``experiences`` feed the feedback operator: one per response
    (``reward``, ``taskset_id``, ``index``), or the same as columns (a mapping of three equal-length arrays), or
    ``None`` (the default): the feedback reads the batch itself (:meth:`feedback_experiences`), so a trainer
    whose batch holds ``taskset_id``, ``index`` and its rewards builds nothing twice; ``metrics`` are logged as
    they are. ``payload`` is free for a host trainer's own batch object (e.g. verl's
    ``DataProto``), so that :func:`flexkit.fill_batch` hands it back with the rows kept.
    """

    batch: Any
    experiences: Sequence[Any] | Mapping[str, Any] | None = None
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    payload: Any = None

    def feedback_experiences(self) -> Sequence[Any] | Mapping[str, Any]:
        """What the feedback operator reads: ``experiences`` when given, else the batch's own columns
        (:meth:`~flexkit.sample.RolloutBatch.feedback_columns`: ``taskset_id``, ``index`` and each response's
        reward, copied). Raises :class:`~flexkit.errors.FeedbackError` when there are no experiences and the
        batch is not a ``RolloutBatch``."""
        if self.experiences is not None:
            return self.experiences
        if not isinstance(self.batch, FeedbackSource):
            raise FeedbackError(f"a Rollout without experiences needs a RolloutBatch to feed back from, got "
                                f"{type(self.batch).__name__}")
        return self.batch.feedback_columns()


def _plain_columns(columns: Mapping[str, Sequence[Any]]) -> dict[str, Sequence[Any]]:
    """``columns`` as a fresh dict of sized sequences (the caller's mapping may change later)."""
    if not isinstance(columns, Mapping):
        raise FeedbackError(f"validation rows: columns must map a column name to its values, got "
                            f"{type(columns).__name__}")
    odd = [f"{name!r} ({type(values).__name__})" for name, values in columns.items()
           if isinstance(values, (str, bytes)) or not (isinstance(values, (Sequence, np.ndarray)))]
    if odd:
        raise FeedbackError("validation rows: each column must be a list, tuple or array of one value per row; "
                            f"not {', '.join(odd)}")
    return dict(columns)


def _score_array(values: Any) -> np.ndarray:
    """``values`` as a fresh read-only 1-D float64 array (numbers only: no text)."""
    raw = np.asarray(values)
    if raw.ndim != 1 or raw.dtype.kind not in "biuf":
        what = f"{raw.ndim}-D" if raw.ndim != 1 else f"of {raw.dtype}"
        raise FeedbackError(f"validation rows: scores must be a 1-D sequence of numbers, one per row; got an array "
                            f"{what}")
    scores = raw.astype(np.float64, copy=True)
    scores.setflags(write=False)
    return scores


@attrs.frozen
class ValidationRows:
    """The rows a validation split scored, each with its score: what a selector that predicts pass rates from a
    row's columns (``frontier``'s ``text_key`` model) holds its predictions against, out of sample
    (:meth:`Trainer.validation_rows`, :meth:`flexkit.Pipeline.validation_calibration`).

    ``columns`` maps a column name (``"prompt"``, ``"level"``, ...) to one value per row, in the columns the
    training pool's rows have (the same text format: a model over the prompts reads them as it reads the pool's);
    ``scores`` holds each row's score in [0, 1] (its reward, or whether the answer was right). Checked when built:
    every column has one value per score, and every score is a finite number in [0, 1]
    (:class:`~flexkit.errors.FeedbackError` otherwise).
    """

    columns: Mapping[str, Sequence[Any]] = attrs.field(converter=_plain_columns)
    scores: np.ndarray = attrs.field(converter=_score_array)

    def __attrs_post_init__(self) -> None:
        count = len(self.scores)
        uneven = [f"{name!r} ({len(values)})" for name, values in self.columns.items() if len(values) != count]
        if uneven:
            raise FeedbackError(f"validation rows: {count} score(s), but the column(s) {', '.join(uneven)} hold "
                                "another number of values")
        bad = ~(np.isfinite(self.scores) & (self.scores >= 0.0) & (self.scores <= 1.0))
        if bad.any():
            where = int(np.flatnonzero(bad)[0])
            raise FeedbackError(f"validation rows: every score must be a number in [0, 1]; row {where} has "
                                f"{float(self.scores[where])!r}")

    def __len__(self) -> int:
        return len(self.scores)


#: ``callback(phase, done, total)``: progress of a trainer's long phase, e.g. ``("warm start", 120, 500)``.
ProgressCallback = Callable[[str, int, int], None]


class Trainer(Configurable, abc.ABC):
    """Base class of trainer backends (see the module docstring for the step they take part in).

    Built by its registered factory as ``factory(config, seed=...)``; a subclass sets :attr:`Config` and calls
    ``super().__init__(config)`` (``None``: ``Config()``, its defaults) before reading ``self.config``.
    """

    #: Whether :meth:`update` honours ``[replay]``: rows whose ``replay_age`` field is above 0 were generated
    #: by an earlier policy, and the loss must use their ``old_log_probs`` (the generating policy's) in the
    #: importance ratio (:class:`flexkit.host.ReplayBuffer`). ``flexkit run`` refuses ``[replay]`` for a trainer
    #: without it.
    supports_replay: ClassVar[bool] = False

    #: Whether :meth:`validate` evaluates a validation split of the trainer's own, apart from :meth:`evaluate`'s
    #: test split. ``False`` (the default): the trainer has none, ``flexkit run`` never calls :meth:`validate`, the
    #: selectors get no evaluation, and a selector that steers by one (``frontier``'s ``guard_metric``) is refused.
    supports_validation: ClassVar[bool] = False

    #: Where :meth:`report_progress` goes (set by :meth:`set_progress`); ``None``: nowhere.
    progress_callback: ProgressCallback | None = None

    def set_progress(self, callback: ProgressCallback | None) -> None:
        """Called by the runner before :meth:`setup` with its progress display (``None``: no display)."""
        self.progress_callback = callback

    def report_progress(self, phase: str, done: int, total: int) -> None:
        """Report ``done`` of ``total`` units of a long ``phase`` (e.g. warm-start steps); cheap, call it freely."""
        if self.progress_callback is not None:
            self.progress_callback(phase, done, total)

    def check_setup(self, pipeline: Any) -> None:
        """Check what :meth:`setup` will read (data files and their columns, the rows of ``pipeline``'s tasksets)
        without building anything heavy (no model), raising :class:`~flexkit.ConfigError` naming the key to fix.
        ``flexkit validate`` calls it, so that a pipeline it passes does not fail at the start of ``flexkit run``;
        :meth:`setup` may call it too. The default: nothing to check."""

    def setup(self, pipeline: Any) -> None:
        """Called once before the first step (and before a checkpoint is loaded): build models, warm up."""

    @abc.abstractmethod
    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Generate responses for ``tasks`` (a list of :class:`~flexkit.Task`) and score them."""

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """Add ``advantages`` to ``batch`` (e.g. GRPO's group-relative ones). Called after the rollout's
        experiences were snapshotted for the feedback, so rewriting rewards in place here is safe."""

    @abc.abstractmethod
    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One policy update from ``batch`` with per-token loss ``weights`` (``None``: all ones); returns metrics
        (numbers; not the names the runner writes, :data:`flexkit.run._trainer_output.RESERVED_KEYS`). Runs while
        the step's feedback updates the selectors in a background thread."""

    @abc.abstractmethod
    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Held-out **test** evaluation, what runs are judged on: at least ``eval_accuracy``, and
        ``eval_accuracy/<level>`` per difficulty level. The selectors never see it (:meth:`validate` is theirs);
        no name starts with ``val_``."""

    def validate(self, *, step: int) -> Mapping[str, float]:
        """Held-out **validation** evaluation, on problems disjoint from :meth:`evaluate`'s: ``val_accuracy`` and
        ``val_accuracy/<level>`` per difficulty level (every name starts with ``val_``). ``flexkit run`` calls it
        beside :meth:`evaluate` when :attr:`supports_validation` is set, records it, and hands it (and only it) to
        the selectors. The default: no validation split, an empty mapping."""
        return {}

    def validation_rows(self) -> ValidationRows | None:
        """The rows the latest :meth:`validate` scored, each with its score (:class:`ValidationRows`), in the
        columns of the training pool's rows. ``flexkit run`` hands them to the selectors after each validation
        (:meth:`flexkit.Pipeline.validation_calibration`), which hold their predicted pass rates against them and
        record how well they agree (``frontier`` with ``text_key``: ``val_predicted/<group>`` beside
        ``val_observed/<group>``). The default: ``None``, no rows to give."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state (JSON values and numpy arrays) to continue exactly."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


def set_progress(trainer: Any, callback: ProgressCallback | None) -> None:
    """Hand ``trainer`` the runner's progress display (:meth:`Trainer.set_progress`); a duck-typed trainer without
    the method (written before it existed) gets none."""
    call_declared(trainer, Trainer, "set_progress", callback)


def check_trainer_setup(trainer: Any, pipeline: Any) -> None:
    """:meth:`Trainer.check_setup` of ``trainer`` against ``pipeline``; a duck-typed trainer without it (written
    before it existed) checks nothing."""
    call_declared(trainer, Trainer, "check_setup", pipeline)


def group_size_of(config: Any) -> Any:
    """The responses per task a trainer's ``config`` sets in its ``group_size`` field, as ``flexkit compare`` and
    ``flexkit preview`` read it (docs/plugins/trainer.md); ``None`` where the config has no such field. The config
    is the trainer plugin's own class, so the field is read by name; unchecked (callers convert it)."""
    return getattr(config, "group_size", None)
