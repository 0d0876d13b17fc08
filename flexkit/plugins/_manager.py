"""The plugin manager: built-in and third-party components, registered through one path.

Plugins come from three places, loaded in this order:

1. flexkit's built-ins (:data:`BUILTIN_PLUGINS`: the one module :mod:`flexkit.plugins.builtins`), registered exactly
like
   third-party ones;
2. the ``flexkit`` entry-point group of installed distributions (``FLEXKIT_LOAD_PLUGINS`` restricts them:
   a comma-separated allow-list of entry-point or distribution names; an empty string loads none);
3. a pipeline's own ``plugins = [...]`` (module names, or ``.py`` paths relative to the pipeline file) and
   the CLI's ``--plugin`` option, as pytest loads ``conftest.py``: no packaging needed.

A plugin that fails to import or register is reported (plugin, distribution, error) and the others keep
working; ``FLEXKIT_STRICT_PLUGINS=1`` makes any such failure fatal. Two plugins registering the same component
name is an error naming both; a pipeline naming that component is refused until one is removed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import pluggy
import structlog

from flexkit._version import DISTRIBUTION, __version__
from flexkit.config._components import STAGES
from flexkit.config._converter import did_you_mean
from flexkit.errors import ConfigError, ConfigIssue, PluginError
from flexkit.plugins import _hookspecs as hookspecs
from flexkit.plugins._contract import set_name_resolver
from flexkit.plugins._local_import import exit_is_import_error, load_local_module
from flexkit.plugins._registrar import Component, NoParams, PluginFailure, PluginInfo, Registrar, describe_origin

__all__ = ["BUILTIN_PLUGINS", "ENTRY_POINT_GROUP", "ENV_ALLOW", "ENV_STRICT", "FIRST_PARTY", "REGISTER_HOOKS",
           "Component", "NoParams", "PluginFailure", "PluginHost", "PluginInfo", "clear_plugin_cache",
           "get_plugins", "load_local_module", "plugin_host_for"]

log = structlog.get_logger("flexkit.plugins")

#: The module registering flexkit's built-in components, loaded as a plugin through :meth:`PluginHost.add`.
BUILTIN_PLUGINS: tuple[str, ...] = ("flexkit.plugins.builtins",)

#: The registration hook of each stage.
REGISTER_HOOKS: dict[str, str] = {
    "selector": "flexkit_register_selectors",
    "scorer": "flexkit_register_scorers",
    "actuator": "flexkit_register_actuators",
    "feedback": "flexkit_register_feedback",
    "storage": "flexkit_register_storages",
    "trainer": "flexkit_register_trainers",
}

#: Entry-point group scanned for third-party plugins.
ENTRY_POINT_GROUP = "flexkit"
ENV_ALLOW = "FLEXKIT_LOAD_PLUGINS"
ENV_STRICT = "FLEXKIT_STRICT_PLUGINS"

#: Components of flexkit's first-party plugin distributions (``plugins/`` in the repository), so that a pipeline
#: naming one without the distribution is told which to install: (stage, name) -> distribution.
FIRST_PARTY: dict[tuple[str, str], str] = {
    ("storage", "arithmetic"): "flexkit-rft-toyrl",
    ("trainer", "toyrl"): "flexkit-rft-toyrl",
    ("selector", "reverse"): "flexkit-rft-example",
}


def _env_allow_list() -> frozenset[str] | None:
    raw = os.environ.get(ENV_ALLOW)
    if raw is None:
        return None
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def _env_strict() -> bool:
    return os.environ.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes", "on")


class PluginHost:
    """One set of loaded plugins and the components they registered.

    Build it with :meth:`load` (or get the process-wide default with :func:`get_plugins`).
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.components: dict[str, dict[str, Component]] = {stage: {} for stage in STAGES}
        self.conflicts: dict[tuple[str, str], list[Component]] = {}
        self.failures: list[PluginFailure] = []
        self.plugins: list[PluginInfo] = []

    # -- loading ----------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        extra: Iterable[str] = (),
        *,
        base_dir: str | os.PathLike[str] | None = None,
        entry_points: bool = True,
        allow: Iterable[str] | None = None,
        strict: bool | None = None,
    ) -> PluginHost:
        """Load built-ins, then entry points (``allow`` or ``FLEXKIT_LOAD_PLUGINS`` filter them), then
        ``extra`` local plugins (module names or ``.py`` paths relative to ``base_dir``).

        ``strict`` (default: ``FLEXKIT_STRICT_PLUGINS``) turns any plugin failure into a :class:`PluginError`.
        A local plugin that fails raises :class:`~flexkit.errors.ConfigError` (the pipeline asked for it).
        """
        host = cls(strict=_env_strict() if strict is None else strict)
        for module_name in BUILTIN_PLUGINS:
            host.add(importlib.import_module(module_name), name=module_name, distribution=DISTRIBUTION,
                     version=__version__)
        if entry_points:
            host._load_entry_points(frozenset(allow) if allow is not None else _env_allow_list())
        host.add_local(extra, base_dir=base_dir)
        return host

    def _load_entry_points(self, allow: frozenset[str] | None) -> None:
        for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            if allow is not None and ep.name not in allow and dist_name not in allow:
                continue
            if self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                with exit_is_import_error():
                    plugin = ep.load()
            except Exception as exc:
                self._fail(PluginFailure(plugin=ep.name, distribution=dist_name, phase="import",
                                         error=f"{type(exc).__name__}: {exc}"))
                continue
            self.add(plugin, name=ep.name, distribution=dist_name, version=version)

    def add_local(self, specs: Iterable[str], *, base_dir: str | os.PathLike[str] | None = None) -> None:
        """Load plugins named by module or by ``.py`` path (relative to ``base_dir``); failures raise
        :class:`~flexkit.errors.ConfigError` with the position in ``plugins``."""
        errors: list[ConfigIssue] = []
        for i, spec in enumerate(specs):
            try:
                module = load_local_module(spec, base_dir)
            except Exception as exc:
                errors.append(ConfigIssue(f"plugins[{i}]", f"cannot load plugin {spec!r}: {type(exc).__name__}: {exc}"))
                continue
            if self.pm.is_registered(module):
                continue
            failures_before = len(self.failures)
            self.add(module, name=spec, distribution=None, version=None, strict=False)
            for failure in self.failures[failures_before:]:
                errors.append(ConfigIssue(f"plugins[{i}]", str(failure)))
        if errors:
            raise ConfigError(errors)

    def add(
        self,
        plugin: Any,
        *,
        name: str,
        distribution: str | None = None,
        version: str | None = None,
        strict: bool | None = None,
    ) -> bool:
        """Register one plugin object and collect its components; returns whether it was accepted.

        On failure the plugin is unregistered and the failure recorded (raised when strict).
        """
        strict = self.strict if strict is None else strict
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self._fail(PluginFailure(plugin=name, distribution=distribution, phase="register",
                                     error=f"{type(exc).__name__}: {exc}"), strict)
            return False
        staged: list[Component] = []
        hooks: list[str] = []
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        for stage, hook_name in REGISTER_HOOKS.items():
            if not any(impl.plugin is plugin for impl in getattr(self.pm.hook, hook_name).get_hookimpls()):
                continue
            hooks.append(hook_name)
            register = Registrar(stage, name, distribution, version, staged)
            try:  # pluggy's own call path, restricted to this plugin (its arguments matched by name, as for any hook)
                with exit_is_import_error(), warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # a hookspec argument this call does not pass
                    self.pm.subset_hook_caller(hook_name, remove_plugins=others)(register=register)
            except Exception as exc:
                self.pm.unregister(plugin)
                self._fail(PluginFailure(plugin=name, distribution=distribution, phase="register",
                                         error=f"{hook_name}: {type(exc).__name__}: {exc}"), strict)
                return False
        for impl_hook in self.pm.get_hookcallers(plugin) or []:
            if impl_hook.name not in hooks:
                hooks.append(impl_hook.name)
        for component in staged:
            self._commit(component, strict)
        self.plugins.append(PluginInfo(name=name, distribution=distribution, version=version, hooks=tuple(hooks)))
        return True

    def _commit(self, component: Component, strict: bool) -> None:
        table = self.components[component.stage]
        key = (component.stage, component.name)
        if key in self.conflicts:
            self.conflicts[key].append(component)
        elif component.name in table:
            first = table.pop(component.name)
            self.conflicts[key] = [first, component]
        else:
            table[component.name] = component
            return
        claimants = " and ".join(describe_origin(c) for c in self.conflicts[key])
        self._fail(PluginFailure(plugin=component.plugin, distribution=component.distribution, phase="conflict",
                                 error=f"{component.stage} {component.name!r} is registered by {claimants}"), strict)

    def _fail(self, failure: PluginFailure, strict: bool | None = None) -> None:
        self.failures.append(failure)
        if self.strict if strict is None else strict:
            raise PluginError(f"{failure} ({ENV_STRICT} is set)")
        log.warning("plugin_failed", plugin=failure.plugin, distribution=failure.distribution,
                    phase=failure.phase, error=failure.error)

    # -- lookup -----------------------------------------------------------------------------------------

    def component(self, stage: str, name: str) -> Component:
        """The component registered as ``name`` for ``stage``; a :class:`ConfigError` lists the
        registered ones (with the closest match) when there is none, and names both plugins on a conflict."""
        if stage not in self.components:
            raise ConfigError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        found = self.components[stage].get(name)
        if found is not None:
            return found
        if (stage, name) in self.conflicts:
            claimants = " and ".join(describe_origin(c) for c in self.conflicts[(stage, name)])
            raise ConfigError(f"{stage} {name!r} is registered by {claimants}; uninstall one of them or "
                              f"restrict {ENV_ALLOW}")
        names = sorted(self.components[stage])
        raise ConfigError(f"unknown {stage} {name!r}{did_you_mean(name, names)}; registered: "
                          f"{', '.join(names) or '(none)'}{self._first_party_hint(stage, name)}")

    def _first_party_hint(self, stage: str, name: str) -> str:
        """Where a first-party plugin distribution provides ``name``: which one, and why it is not loaded."""
        dist = FIRST_PARTY.get((stage, name))
        if dist is None:
            return ""
        failed = [f for f in self.failures if f.distribution == dist]
        if failed:
            return f" ({name!r} comes with {dist}, which is installed but failed to load: {failed[0].error})"
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            return (f" ({name!r} comes with the plugin distribution {dist}, which is not installed: from a flexkit "
                    f"checkout, pip install -e plugins/{dist}; after the 0.1.0 release, pip install {dist})")
        allow = _env_allow_list()
        if allow is not None:
            return f" ({name!r} comes with {dist}, which {ENV_ALLOW}={','.join(sorted(allow))!r} does not load)"
        return f" ({name!r} comes with {dist}, installed but not loaded by this plugin host)"

    def name_of(self, factory: Any) -> str | None:
        """The name ``factory`` (e.g. a component class) is registered under; ``None``: none, or several."""
        names = {c.name for table in self.components.values() for c in table.values() if c.factory is factory}
        return names.pop() if len(names) == 1 else None

    def names(self, stage: str) -> list[str]:
        """Registered component names of one stage, sorted."""
        return sorted(self.components[stage])

    def all_components(self) -> list[Component]:
        """Every registered component, by stage then name."""
        return [self.components[s][n] for s in STAGES for n in sorted(self.components[s])]

    @property
    def hook(self) -> Any:
        """pluggy's hook relay, for calling lifecycle hooks (always with keyword arguments)."""
        return self.pm.hook


@functools.lru_cache(maxsize=8)
def _cached_host(allow: frozenset[str] | None, strict: bool) -> PluginHost:
    return PluginHost.load(allow=allow, strict=strict)


def get_plugins() -> PluginHost:
    """The process-wide plugin host for the current ``FLEXKIT_LOAD_PLUGINS`` / ``FLEXKIT_STRICT_PLUGINS``."""
    return _cached_host(_env_allow_list(), _env_strict())


def _default_name_of(cls: type) -> str | None:
    """The name the default host registers ``cls`` under (``None``: none, or several)."""
    return get_plugins().name_of(cls)


set_name_resolver(_default_name_of)  # components built directly are named from the default registry


def clear_plugin_cache() -> None:
    """Forget cached plugin hosts (after installing a plugin in a running process, or in tests)."""
    _cached_host.cache_clear()


def plugin_host_for(extra: Sequence[str] = (), base_dir: str | os.PathLike[str] | None = None) -> PluginHost:
    """The default host when ``extra`` is empty, else a fresh host with those local plugins added."""
    if not extra:
        return get_plugins()
    return PluginHost.load(extra, base_dir=base_dir, allow=_env_allow_list())
