"""The one component pattern: a component class names its config class, and learns its name from the registry.

Selectors, scorers, actuators, feedback operators and trainers share it through :class:`Configurable`:

- ``Config``: the component's attrs config class. ``__init__(config=None)`` builds ``Config()`` (its
  defaults) when no config is given, so a subclass never repeats ``config if config is not None else ...``;
- ``registered_name``: the ``type`` name the component was built under. The plugin host sets it on what it
  builds (:meth:`flexkit.plugins.manager.Component.build`), so a class never repeats the name it is registered under;
  :func:`registered_name_of` also finds it for an object built directly, from the default registry. The host
  sets ``registered_plugin`` and ``registered_distribution`` the same way, so an error about a component's
  output can say where it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

#: How :func:`registered_name_of` names a class built outside the plugin host: set once by the plugin manager
#: (:func:`set_name_resolver`; the registry imports components, never the other way round). ``None``: unnamed.
_name_resolver: Callable[[type], str | None] | None = None


def set_name_resolver(resolver: Callable[[type], str | None]) -> None:
    """Name classes built outside the plugin host with ``resolver`` (the default registry's ``name_of``)."""
    global _name_resolver
    _name_resolver = resolver


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
        config_cls = getattr(cls, "Config", None)
        if config_cls is not None:
            return config_cls()
    return config


def registered_name_of(obj: Any) -> str | None:
    """The name ``obj`` (a component or its class) is registered under.

    ``obj.registered_name`` when set (the plugin host sets it on what it builds), else the one name the default
    plugin host registers the class under; ``None`` when it is not registered, or under several names.
    """
    name = getattr(obj, "registered_name", None)
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
