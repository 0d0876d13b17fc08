"""What the plugin host records: a registered :class:`Component`, a :class:`PluginFailure` and a loaded plugin's
:class:`PluginInfo`, and the :class:`Registrar`, the ``register`` callback of the registration hooks that
declares components."""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import attrs

from flexkit.errors import ComponentError, ComponentTypeError
from flexkit.plugins._contract import check_built, optional_member

__all__ = ["Component", "NoParams", "PluginFailure", "PluginInfo", "Registrar", "describe_origin"]

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")

#: What :func:`~flexkit.plugins._contract.optional_member` returns for a member the object lacks.
_ABSENT = object()


@attrs.frozen
class NoParams:
    """Config of a component that takes no parameters."""


@attrs.frozen(kw_only=True)
class Component:
    """A registered component: what a pipeline's ``type = "name"`` resolves to."""

    name: str
    stage: str
    factory: Callable[..., Any]
    config_cls: type[Any]
    plugin: str
    distribution: str | None
    version: str | None
    description: str

    def build(self, config: Any = None, **context: Any) -> Any:
        """Call the factory with a validated config (default: the config class's defaults) and context.

        The built object's ``registered_name``, ``registered_plugin`` and ``registered_distribution``, when it has
        those attributes (see :mod:`flexkit.plugins._contract`), are set to this component's, for messages. What the
        factory returned must be a component of this stage (:func:`flexkit.plugins._contract.check_built`), else a
        :class:`~flexkit.errors.ComponentError` names the component, its plugin and its distribution.
        """
        if config is None:
            config = self.config_cls()
        built = self.factory(config, **context)
        check_built(self.stage, built, name=self.name, plugin=self.plugin, distribution=self.distribution,
                    factory=self.factory)
        for attr, value in (("registered_name", self.name), ("registered_plugin", self.plugin),
                            ("registered_distribution", self.distribution)):
            if optional_member(built, attr, _ABSENT) is not _ABSENT:  # declared on Configurable
                with contextlib.suppress(AttributeError, TypeError):  # frozen or slotted: keeps its class's value
                    setattr(built, attr, value)
        return built


@attrs.frozen(kw_only=True)
class PluginFailure:
    """A plugin that could not be used, and why."""

    plugin: str
    distribution: str | None
    phase: str  # "import" | "register" | "conflict"
    error: str

    def __str__(self) -> str:
        dist = f" (distribution {self.distribution})" if self.distribution else ""
        return f"plugin {self.plugin!r}{dist} failed at {self.phase}: {self.error}"


@attrs.frozen(kw_only=True)
class PluginInfo:
    """A loaded plugin: its name, where it came from and the hooks it implements."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]


def describe_origin(component: Component) -> str:
    """A component's plugin with its distribution and version, for messages."""
    dist = component.distribution or "no distribution"
    version = f" {component.version}" if component.version else ""
    return f"plugin {component.plugin!r} ({dist}{version})"


@attrs.define
class Registrar:
    """The ``register`` callback handed to one plugin's registration hook for one stage
    (a :class:`~flexkit.Register`)."""

    stage: str
    plugin: str
    distribution: str | None
    version: str | None
    staged: list[Component]

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any],
        config: type | None = None,
        *,
        description: str | None = None,
    ) -> None:
        """Declare a component: its ``type`` name, its factory and its attrs config class."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ComponentError(f"component name {name!r} must be lowercase letters, digits, '_' or '-', "
                                 "starting with a letter")
        if not callable(factory):
            raise ComponentTypeError(f"factory for {self.stage} {name!r} is not callable: {factory!r}")
        config_cls = NoParams if config is None else config
        if not (isinstance(config_cls, type) and attrs.has(config_cls)):
            raise ComponentTypeError(f"config for {self.stage} {name!r} must be an attrs class, got {config!r}")
        if any(c.name == name and c.stage == self.stage for c in self.staged):
            raise ComponentError(f"{self.stage} {name!r} registered twice by the same plugin")
        if description is None:
            doc = inspect.getdoc(factory) or ""
            description = doc.strip().splitlines()[0] if doc.strip() else ""
        self.staged.append(Component(name=name, stage=self.stage, factory=factory, config_cls=config_cls,
                                     plugin=self.plugin, distribution=self.distribution, version=self.version,
                                     description=description))
