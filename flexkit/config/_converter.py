"""The one strict converter: plain TOML data -> frozen attrs config classes, with every error's key path.

Built on cattrs for type dispatch, with flexkit's own hooks so that

- nothing is coerced: ``"false"`` is not a bool, ``1.9`` is not an int, ``1`` is not a string (an int is
  accepted where a float is expected);
- unknown keys are rejected with a did-you-mean;
- every problem in a file is collected and reported at once, each with its path
  (``tasksets[0].selector.tau: must be >= 0, got -1``), as one :class:`~flexkit.errors.ConfigError`;
- component tables (``type = "..."``) are looked up in the plugin registry and validated with the
  component's own config class.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

import attrs
import cattrs

from flexkit.config._components import ComponentLookup, ComponentSpec, component_meta, default_table_of
from flexkit.errors import ConfigError, ConfigIssue

_T = TypeVar("_T")

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}

#: TOML integers are 64-bit: "if an integer cannot be represented losslessly, an error must be thrown" (TOML 1.0).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def describe(value: Any) -> str:
    """A short description of a value for error messages: ``string 'false'``, ``float 1.9``."""
    kind = {
        bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table",
    }.get(type(value), type(value).__name__)
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past Python's 4300-digit limit, nesting past the stack
        text = "(too large to show)"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}" if kind not in ("array", "table") or len(text) < 40 else kind


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def path_key(key: object) -> str:
    """A key as a segment of a key path: bare when TOML allows it (``tau``), else quoted as TOML quotes it
    (``"my key"``, ``""``, ``"a.b"``), so every key, even an empty one, is visible and unambiguous in the path."""
    key = str(key)
    if _BARE_KEY.match(key):
        return key
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else json.dumps(c)[1:-1] for c in key) + '"'


def did_you_mean(word: str, options: typing.Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when an option is close to ``word``, else ``""``."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _issue(message: str, path: str = "") -> ConfigError:
    return ConfigError([ConfigIssue(path, message)])


def make_converter(components: ComponentLookup | None = None) -> cattrs.Converter:
    """Build the strict converter; ``components`` resolves component tables (needed for pipelines)."""
    conv = cattrs.Converter(forbid_extra_keys=True)

    def strict(expected: type) -> Callable[[Any, Any], Any]:
        def hook(value: Any, _type: Any) -> Any:
            ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
            number = isinstance(value, int) and not isinstance(value, bool)
            if number and expected in (int, float) and not INT64_MIN <= value <= INT64_MAX:
                raise _issue(f"integer out of range (TOML integers are 64-bit: -2^63 to 2^63-1), got {describe(value)}")
            if expected is float and number:
                return float(value)
            if not ok:
                raise _issue(f"expected {_TYPE_NAMES[expected]}, got {describe(value)}")
            return value

        return hook

    for prim in (bool, int, float, str):
        conv.register_structure_hook(prim, strict(prim))
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _t: v)
    conv.register_structure_hook_func(_is_literal, _structure_literal)
    conv.register_structure_hook_func(_is_optional, functools.partial(_structure_optional, conv))
    conv.register_structure_hook_func(_is_sequence, functools.partial(_structure_sequence, conv))
    conv.register_structure_hook_func(_is_mapping, functools.partial(_structure_mapping, conv))
    conv.register_structure_hook_factory(
        attrs.has, lambda cls: functools.partial(_structure_attrs, conv, components, cls)
    )
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, ComponentSpec),
        lambda cls: functools.partial(_structure_component, conv, components, cls),
    )
    return conv


def structure(conv: cattrs.Converter, data: Any, cls: type[_T]) -> _T:
    """Structure ``data`` as ``cls``; any failure becomes a :class:`ConfigError` with key paths."""
    try:
        return conv.structure(data, cls)
    except ConfigError:
        raise
    except (TypeError, ValueError, cattrs.BaseValidationError) as exc:  # from a plugin's own hooks
        raise _issue(str(exc)) from None


# -- type predicates ---------------------------------------------------------------------------------------


def _origin(t: Any) -> Any:
    return typing.get_origin(t)


def _is_literal(t: Any) -> bool:
    return _origin(t) is Literal


def _is_optional(t: Any) -> bool:
    return _origin(t) in (Union, types.UnionType) and type(None) in typing.get_args(t)


def _is_sequence(t: Any) -> bool:
    return _origin(t) in (list, tuple) or t in (list, tuple)


def _is_mapping(t: Any) -> bool:
    return _origin(t) in (dict, Mapping) or t is dict


# -- hooks -------------------------------------------------------------------------------------------------


def _structure_literal(value: Any, t: Any) -> Any:
    options = typing.get_args(t)
    for option in options:
        if value == option and type(value) is type(option):
            return option
    shown = ", ".join(repr(o) for o in options)
    hint = did_you_mean(value, [str(o) for o in options]) if isinstance(value, str) else ""
    raise _issue(f"must be one of {shown}, got {describe(value)}{hint}")


def _structure_optional(conv: cattrs.Converter, value: Any, t: Any) -> Any:
    if value is None:
        return None
    args = [a for a in typing.get_args(t) if a is not type(None)]
    inner: Any = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 - runtime construction
    return conv.structure(value, inner)


def _structure_sequence(conv: cattrs.Converter, value: Any, t: Any) -> Any:
    if not isinstance(value, (list, tuple)):
        raise _issue(f"expected an array, got {describe(value)}")
    args = typing.get_args(t)
    origin = _origin(t) or t
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise _issue(f"expected an array of {len(args)} items, got {len(value)}")
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    out, errors = [], []
    for i, (item, item_type) in enumerate(zip(value, item_types, strict=False)):
        try:
            out.append(conv.structure(item, item_type))
        except ConfigError as exc:
            errors.append(exc.with_prefix(f"[{i}]"))
    if errors:
        raise ConfigError.merge(errors)
    return tuple(out) if origin is tuple else out


def _structure_mapping(conv: cattrs.Converter, value: Any, t: Any) -> Any:
    if not isinstance(value, Mapping):
        raise _issue(f"expected a table, got {describe(value)}")
    args = typing.get_args(t)
    value_type = args[1] if len(args) == 2 else Any
    out, errors = {}, []
    for key, item in value.items():
        try:
            out[key] = conv.structure(item, value_type)
        except ConfigError as exc:
            errors.append(exc.with_prefix(path_key(key)))
    if errors:
        raise ConfigError.merge(errors)
    return out


def _structure_attrs(
    conv: cattrs.Converter, components: ComponentLookup | None, cls: type, value: Any, _t: Any = None
) -> Any:
    """Structure a table into an attrs class, collecting every problem (keys, types, bounds)."""
    if not isinstance(value, Mapping):
        raise _issue(f"expected a table, got {describe(value)}")
    fields = attrs.fields(attrs.resolve_types(cls))
    inline: Any = next((f for f in fields if (component_meta(f) or {}).get("inline")), None)
    own = {f.alias for f in fields if f is not inline}
    errors: list[ConfigError] = []
    if inline is None:
        for key in value:
            if key not in own:
                message = f"unknown key{did_you_mean(key, own)}; allowed: {', '.join(sorted(own))}"
                errors.append(_issue(message, path_key(key)))
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f is inline:
            rest = {k: v for k, v in value.items() if k not in own}
            try:
                kwargs[f.alias] = _structure_component(
                    conv, components, f.type, rest, parent_keys=own, meta=component_meta(f)
                )
            except ConfigError as exc:
                errors.append(exc)
            continue
        if f.alias not in value:
            default_table = default_table_of(f)
            if default_table is not None:
                try:
                    kwargs[f.alias] = conv.structure(default_table, f.type)
                except ConfigError as exc:
                    errors.append(exc.with_prefix(f.alias))
            elif f.default is attrs.NOTHING:
                errors.append(_issue("missing required key", f.alias))
            continue
        try:
            item = conv.structure(value[f.alias], f.type)
        except ConfigError as exc:
            errors.append(exc.with_prefix(f.alias))
            continue
        if f.validator is not None:
            raw = value[f.alias]
            # validate the value as written (an int stays an int in messages: "got -1", not "got -1.0")
            shown = raw if isinstance(raw, int) and not isinstance(raw, bool) and isinstance(item, float) else item
            try:
                f.validator(None, f, shown)
            except ConfigError as exc:
                errors.append(exc.with_prefix(f.alias))
                continue
            except (ValueError, TypeError, ArithmeticError) as exc:  # a validator's arithmetic may overflow
                errors.append(_issue(_message(exc), f.alias))
                continue
        kwargs[f.alias] = item
    if errors:
        raise ConfigError.merge(errors)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise _issue(_message(exc)) from None


def _message(exc: BaseException) -> str:
    """The text of a validator's exception; attrs' own validators pass (message, attribute, ...) args."""
    if exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


def _structure_component(
    conv: cattrs.Converter,
    components: ComponentLookup | None,
    cls: type[ComponentSpec],
    value: Any,
    _t: Any = None,
    *,
    parent_keys: typing.Collection[str] = (),
    meta: dict[str, Any] | None = None,
) -> ComponentSpec:
    """Structure a component table: find ``type`` in the registry, validate the rest with its config."""
    lookup = components
    if not isinstance(value, Mapping):
        raise _issue(f"expected a table, got {describe(value)}")
    key = cls.DISCRIMINATOR
    name = value.get(key, (meta or {}).get("default_type"))
    if name is None:
        raise _issue(f"missing required key (the {cls.STAGE} to use)", key)
    if not isinstance(name, str):
        raise _issue(f"expected a string, got {describe(name)}", key)
    if lookup is None:
        raise _issue(f"no plugin registry available to resolve {cls.STAGE} {name!r}", key)
    try:
        component = lookup.component(cls.STAGE, name)
    except ConfigError as exc:
        raise exc.with_prefix(key) from None
    params = {k: v for k, v in value.items() if k != key}
    config_cls = component.config_cls
    own_fields = {f.alias for f in attrs.fields(config_cls)}
    errors: list[ConfigError] = []
    for extra in params:
        if extra not in own_fields:
            allowed = sorted(own_fields | set(parent_keys) | {key})
            hint = did_you_mean(extra, allowed)
            message = f"unknown key for {cls.STAGE} {name!r}{hint}; allowed: {', '.join(allowed)}"
            errors.append(_issue(message, path_key(extra)))
    known = {k: v for k, v in params.items() if k in own_fields}
    try:
        config = conv.structure(known, config_cls)
    except ConfigError as exc:
        errors.append(exc)
        config = None
    if errors:
        raise ConfigError.merge(errors)
    return cls(type=name, config=config)
