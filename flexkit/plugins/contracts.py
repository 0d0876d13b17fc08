"""Component contracts, checked where flexkit receives a component or its output.

- :func:`check_built`: what a factory built is a component of its stage (it has the methods and attributes the
  pipeline uses), so a wrong factory fails when it is built, not with an ``AttributeError`` at the first read;
- :func:`check_selection`: what a selector returned for a request of ``n`` indices is ``n`` integers in
  ``0 .. size-1``, without repeats unless the selector ``allows_repeats`` (numpy checks on the batch only);
- :func:`describe_component`: ``selector 'name' (Class, plugin 'p', distribution 'd')`` for messages.

Errors are :class:`~flexkit.errors.ComponentError` and name the component, its plugin and its distribution.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from flexkit.errors import ComponentError, FlexkitError
from flexkit.plugins.configurable import registered_name_of

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
    "trainer": "a trainer (flexkit.plugins.trainer.Trainer)",
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
    (:meth:`flexkit.plugins.manager.Component.build`); for other objects the name comes from the default registry when
    the class is registered there, and the origin is left out.
    """
    cls = type(obj)
    name = registered_name_of(obj)
    where = origin(getattr(obj, "registered_plugin", None), getattr(obj, "registered_distribution", None))
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
    its distribution. ``component`` is a registered :class:`~flexkit.plugins.manager.Component` (``stage``, ``name``,
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
