"""Reading a Trinity-RFT ``data_selector`` block as a flexkit selector, and checking it with Trinity's config.

Trinity-RFT's ``DataSelectorConfig`` has four fields: ``selector_type``, ``seed``, ``feature_keys`` and a free
``kwargs`` dict (Trinity's own ``difficulty_based`` reads ``m``, ``lamb``, ``tau``, ... from it). flexkit's
adapter uses them the same way::

    data_selector:
      selector_type: flexkit_trinity.FlexkitSelector   # Trinity imports the class from this dotted path
      seed: 42                                         # the flexkit selector's seed
      feature_keys: [weak_pass_rate, strong_pass_rate] # its feature_keys (for selectors that read features)
      kwargs:
        selector: difficulty_based                     # any registered flexkit selector, plugins' included
        tau: 0.0                                       # the rest: that selector's parameters
        target_reward: 0.5

Bad parameters raise :class:`flexkit.errors.ConfigError` with key paths. :class:`FlexkitConfigValidator` runs
the same checks inside Trinity-RFT's ``Config.check_and_update`` (see :func:`install_validator`).
"""

from __future__ import annotations

from typing import Any

import attrs

from flexkit import FEATURE_KEYS, ConfigError, ConfigIssue, PluginHost, get_plugins, make_converter, structure

__all__ = [
    "SELECTOR_KEY",
    "SELECTOR_TYPE",
    "FlexkitConfigValidator",
    "SelectorSpec",
    "check_config",
    "install_validator",
    "selector_spec",
]

#: What ``data_selector.selector_type`` says: the dotted path Trinity-RFT's registry imports.
SELECTOR_TYPE = "flexkit_trinity.FlexkitSelector"
#: The ``kwargs`` key naming the flexkit selector; every other key is one of its parameters.
SELECTOR_KEY = "selector"


@attrs.frozen
class SelectorSpec:
    """A checked flexkit selector choice: its registered name, component, validated config and seed."""

    name: str
    component: Any
    config: Any
    seed: int


def selector_spec(data_selector: Any, *, path: str = "data_selector",
                  plugins: PluginHost | None = None) -> SelectorSpec:
    """Check a Trinity-RFT ``DataSelectorConfig`` naming a flexkit selector; every problem is reported at once as
    a :class:`~flexkit.errors.ConfigError` whose key paths start with ``path``.

    Checks what can be checked without the taskset: the selector name, its parameters (validated by its attrs
    config exactly as a flexkit TOML table would be), ``feature_keys`` and ``seed``. The feature columns
    themselves are read, and checked, when Trinity-RFT builds the selector.
    """
    kwargs = dict(getattr(data_selector, "kwargs", None) or {})
    name = kwargs.pop(SELECTOR_KEY, None)
    issues: list[ConfigIssue] = []
    seed = getattr(data_selector, "seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        issues.append(ConfigIssue(f"{path}.seed", f"must be an integer >= 0, got {seed!r}"))
    if not isinstance(name, str) or not name:
        issues.append(ConfigIssue(f"{path}.kwargs.{SELECTOR_KEY}", "names the flexkit selector to run (e.g. "
                                  f"difficulty_based); got {name!r}"))
        raise ConfigError(issues)
    host = plugins or get_plugins()
    try:
        component = host.component("selector", name)
    except ConfigError as exc:
        raise ConfigError.merge([ConfigError(issues), exc.with_prefix(f"{path}.kwargs.{SELECTOR_KEY}")]) from None
    reads_features = any(f.alias == FEATURE_KEYS for f in attrs.fields(component.config_cls))
    from_trinity = list(getattr(data_selector, "feature_keys", None) or [])
    if from_trinity:
        if not reads_features:
            issues.append(ConfigIssue(f"{path}.feature_keys", f"flexkit selector {name!r} reads no feature "
                                      "columns; leave feature_keys empty"))
        elif FEATURE_KEYS in kwargs:
            issues.append(ConfigIssue(f"{path}.feature_keys", "set feature_keys once, here or in kwargs, not both"))
        else:
            kwargs[FEATURE_KEYS] = from_trinity
    config = None
    try:
        config = structure(make_converter(host), kwargs, component.config_cls)
    except ConfigError as exc:
        for issue in exc.issues:
            if from_trinity and (issue.path == FEATURE_KEYS or issue.path.startswith((f"{FEATURE_KEYS}.",
                                                                                     f"{FEATURE_KEYS}["))):
                issues.append(ConfigIssue(f"{path}.{issue.path}", issue.message))  # the key Trinity's YAML set
            else:
                issues.append(ConfigIssue(f"{path}.kwargs" + (f".{issue.path}" if issue.path and not
                                                              issue.path.startswith("[") else issue.path),
                                          issue.message))
    if issues:
        raise ConfigError(issues)
    return SelectorSpec(name=name, component=component, config=config, seed=int(seed))


def is_flexkit_selector_type(selector_type: Any) -> bool:
    """Whether Trinity-RFT's selector registry resolves ``selector_type`` to :class:`FlexkitSelector` (or a
    subclass). The class is recognised by its dotted name (:data:`SELECTOR_TYPE`) in the resolved class's MRO, so
    this module need not import :mod:`flexkit_trinity.selector`, which imports it."""
    from trinity.buffer.selector import SELECTORS

    if selector_type == SELECTOR_TYPE:
        return True
    try:
        cls = SELECTORS.get(selector_type)
    except Exception:  # Trinity-RFT's own validator reports unknown types
        return False
    return isinstance(cls, type) and any(f"{c.__module__.rpartition('.')[0] or c.__module__}.{c.__qualname__}"
                                         == SELECTOR_TYPE for c in cls.__mro__)


def check_config(config: Any) -> None:
    """Check every training taskset of a Trinity-RFT ``Config`` whose ``data_selector`` is flexkit's.

    Raises one :class:`~flexkit.errors.ConfigError` listing every problem, with key paths such as
    ``buffer.explorer_input.tasksets[0].data_selector.kwargs.tau``.
    """
    explorer_input = config.buffer.explorer_input
    tasksets = list(explorer_input.tasksets or [])
    if not tasksets and getattr(explorer_input, "taskset", None) is not None:  # before Trinity moves it
        tasksets = [explorer_input.taskset]
        prefix = "buffer.explorer_input.taskset"
    else:
        prefix = "buffer.explorer_input.tasksets[{}]"
    errors = []
    for i, taskset in enumerate(tasksets):
        selector = getattr(taskset, "task_selector", None) or taskset.data_selector
        if selector is None or not is_flexkit_selector_type(selector.selector_type):
            continue
        try:
            selector_spec(selector, path=f"{prefix.format(i)}.data_selector")
        except ConfigError as exc:
            errors.append(exc)
    if errors:
        raise ConfigError.merge(errors)


def _validator_base() -> type:
    from trinity.common.config_validator import ConfigValidator

    base: type = ConfigValidator
    return base


class FlexkitConfigValidator(_validator_base()):  # type: ignore[misc]
    """A Trinity-RFT config validator running :func:`check_config` inside ``Config.check_and_update``."""

    def validate(self, config: Any) -> None:
        """Raise :class:`~flexkit.errors.ConfigError` for bad flexkit selector parameters."""
        check_config(config)


def install_validator() -> None:
    """Append :class:`FlexkitConfigValidator` to Trinity-RFT's validator list (once).

    ``Config.check_and_update`` loops over ``trinity.common.config_validator.validators``; Trinity imports this
    package from that loop (resolving ``selector_type`` or ``monitor_type``), and a Python list loop also visits
    items appended while it runs, so the check happens in the same ``check_and_update`` call, after Trinity's own
    validators. Importing the package earlier installs it the same way.
    """
    from trinity.common import config_validator

    if not any(isinstance(v, FlexkitConfigValidator) for v in config_validator.validators):
        config_validator.validators.append(FlexkitConfigValidator())
