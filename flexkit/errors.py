"""Exceptions raised by flexkit: this module is their one home (``flexkit`` re-exports them).

Every error a user can cause (a config file, a command-line argument, an argument to flexkit's API, a taskset, a
feedback payload, a checkpoint) or a plugin can cause (a component breaking its contract, a hook misbehaving) is
a subclass of :class:`FlexkitError`, so callers can catch flexkit's errors without catching programming errors.
A state or checkpoint that does not fit is a :class:`CheckpointError`. The classes that subclass ``ValueError``
or ``TypeError`` as well do so because flexkit raised those builtins there before: code catching them still
works. What flexkit raises as a builtin is a bug of flexkit itself (``tests/test_errors_policy.py`` lists those
sites).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = ["CheckpointError", "ComponentError", "ComponentTypeError", "ConfigError", "ConfigIssue", "ConfigTypeError",
           "DistributedStateError", "FeedbackError", "FlexkitError", "PluginError", "SampleError", "SampleTypeError",
           "StateError", "StateMismatchError", "TasksetError"]

#: Where a value sits inside a nested state: the keys and list positions leading to it.
KeyPath = tuple[Any, ...]


class FlexkitError(Exception):
    """Base class of every error flexkit raises on purpose."""


@attrs.frozen
class ConfigIssue:
    """One problem found in a config: where it is (a key path such as ``tasksets[0].selector.tau``)
    and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(FlexkitError, ValueError):
    """A pipeline config, a component's parameters, a command-line argument or an argument given to flexkit's
    API is invalid.

    ``issues`` holds every problem found, each with its key path; ``source`` names the file when the config
    came from one. ``str(error)`` is the full report, one problem a line.
    """

    def __init__(self, issues: Iterable[ConfigIssue] | str, source: str | None = None) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue("", issues)]
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        super().__init__(self.report())

    def report(self) -> str:
        """The whole report: one line per issue, each prefixed with the source file when known."""
        prefix = f"{self.source}: " if self.source else ""
        return "\n".join(f"{prefix}{issue}" for issue in self.issues)

    def with_prefix(self, path: str) -> ConfigError:
        """The same issues, with ``path`` prepended to each key path."""
        return ConfigError([ConfigIssue(join_path(path, i.path), i.message) for i in self.issues], self.source)

    def with_source(self, source: str) -> ConfigError:
        """The same issues, attributed to the file ``source``."""
        return ConfigError(self.issues, source)

    @staticmethod
    def merge(errors: Sequence[ConfigError], source: str | None = None) -> ConfigError:
        """One error holding the issues of all ``errors``."""
        return ConfigError([i for e in errors for i in e.issues], source)


class ConfigTypeError(ConfigError, TypeError):
    """An argument given to flexkit's API has the wrong type (a ``TypeError`` too)."""


def join_path(prefix: str, path: str) -> str:
    """Join two key paths: ``join_path("a", "b") == "a.b"``, ``join_path("a", "[0].b") == "a[0].b"``."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


class FeedbackError(FlexkitError, ValueError):
    """A feedback payload is invalid (NaN, unknown taskset, index out of range, ...).

    When this is raised, no selector state has changed.
    """


class PluginError(FlexkitError):
    """A plugin failed to import or register, or two plugins claim the same component name."""


class ComponentError(FlexkitError, ValueError):
    """A component broke its contract: a factory built something that is not a component of its stage, or a
    selector returned indices that do not fit the request. The message names the component, its plugin and its
    distribution (see :func:`flexkit.plugins._contract.describe_component`). A plugin's invalid registration (a bad
    component name, one registered twice) is one as well."""


class ComponentTypeError(ComponentError, TypeError):
    """A component class declares an invalid class attribute (a scorer's ``timing``, an actuator's
    ``mechanism``, ...), raised when the class is defined, or a registration names a factory that is not
    callable or a config that is not an attrs class (a ``TypeError`` too)."""


class SampleError(FlexkitError, ValueError):
    """A rollout batch is unusable for the sample stage: a missing field, inconsistent shapes, bad scores."""


class SampleTypeError(SampleError, TypeError):
    """A rollout batch is neither a :class:`~flexkit.RolloutBatch` nor a mapping of fields (a ``TypeError``
    too)."""


class CheckpointError(FlexkitError):
    """A checkpoint cannot be written, read, or does not fit the pipeline loading it."""


class StateMismatchError(CheckpointError, ValueError):
    """A saved state does not fit what loads it: a component's ``load_state_dict`` refusing arrays of another
    shape, values out of range or another number of tasksets; a scheduler, sampler or ledger state of another
    version or other tasksets. Raised before any of it is applied (a ``ValueError`` too)."""


class DistributedStateError(CheckpointError):
    """Ranks' scheduler states differ (or a collective step failed on some rank)."""


class StateError(CheckpointError):
    """A state cannot be checkpointed: the value at ``key_path`` is not plain data, or would not load back equal.

    Raised before anything is written. ``reason`` is the message without the key path.
    """

    def __init__(self, reason: str, key_path: KeyPath = ()) -> None:
        self.reason = reason
        self.key_path = tuple(key_path)
        where = format_key_path(self.key_path)
        super().__init__(f"at {where}: {reason}" if where else reason)


def format_key_path(path: KeyPath) -> str:
    """A key path as Python-like text: ``selectors[1].table[(1, (2, 3))]``."""
    out = ""
    for key in path:
        if isinstance(key, str) and key.isidentifier():
            out += f".{key}" if out else key
        else:
            out += f"[{key!r}]"
    return out


class TasksetError(FlexkitError, ValueError):
    """A taskset cannot be opened or read: missing file, bad row, missing or non-numeric feature, ...

    The message starts with the taskset's name and path (``taskset 'math' (data/math.jsonl): no such
    file``); ``taskset`` and ``path`` hold them (``None`` when unknown).
    """

    def __init__(self, message: str, *, taskset: str | None = None, path: str | None = None) -> None:
        self.taskset = taskset
        self.path = path
        if taskset is not None:
            where = f"taskset {taskset!r}" + (f" ({path})" if path else "")
            message = f"{where}: {message}"
        super().__init__(message)
