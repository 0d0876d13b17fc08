"""``flexkit.config.field``: an attrs field whose bounds drive both validation and the JSON Schema.

Plugin authors write config classes with it::

    @attrs.frozen(kw_only=True)
    class MyConfig:
        tau: float = field(default=1.0, ge=0, doc="Softmax temperature; 0 means greedy.")

Plain attrs fields work too; they just carry no bounds or description into the schema.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from flexkit.errors import ConfigError

#: Key under which flexkit keeps its metadata in ``attrs.Attribute.metadata``.
METADATA_KEY = "flexkit"

_NOTHING: Any = attrs.NOTHING

#: ``attrs.Factory``, the class, for ``isinstance`` checks of a field's default: attrs' stubs declare it a function
#: that returns the default (so that ``x: list[int] = attrs.Factory(list)`` type-checks).
FACTORY_CLASS: type[Any] = attrs.Factory  # type: ignore[assignment]  # a class at run time, a function in the stubs


def field(
    *,
    default: Any = _NOTHING,
    factory: Any = None,
    doc: str = "",
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[Any] | None = None,
    min_items: int | None = None,
    finite: bool = True,
    speed_only: bool = False,
    earlier_default: Any = _NOTHING,
) -> Any:
    """An attrs field for a flexkit config class.

    ``ge``/``gt``/``le``/``lt`` bound a number, ``choices`` restricts a value to a set, ``min_items`` bounds
    a sequence's length, ``finite`` (default on) rejects NaN and infinities in numbers. Every bound becomes a
    validator with a readable message (``must be >= 0, got -1``) and a JSON Schema keyword; ``doc`` becomes
    the schema's description. ``speed_only`` marks a parameter that changes only how fast a run goes (a thread
    count), not what it computes: a checkpoint's fingerprint does not compare it, so a resume may change it.
    ``earlier_default`` is the field's default in the release before its current one, where it changed: a
    checkpoint that does not record the field ran with it, and a resume refused for it says so.
    """
    meta = {
        "doc": doc,
        "ge": ge,
        "gt": gt,
        "le": le,
        "lt": lt,
        "choices": tuple(choices) if choices is not None else None,
        "min_items": min_items,
        "finite": finite,
        "speed_only": speed_only,
        "earlier_default": earlier_default,
    }
    validator = _BoundsValidator(meta)
    if factory is not None:
        return attrs.field(factory=factory, validator=validator, metadata={METADATA_KEY: meta})
    return attrs.field(default=default, validator=validator, metadata={METADATA_KEY: meta})


def field_meta(attribute: attrs.Attribute[Any]) -> dict[str, Any]:
    """flexkit's metadata of an attrs attribute (empty for plain attrs fields)."""
    return dict(attribute.metadata.get(METADATA_KEY, {}))


@attrs.frozen
class _BoundsValidator:
    meta: dict[str, Any]

    def __call__(self, _instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
        check_bounds(value, self.meta)


def check_bounds(value: Any, meta: dict[str, Any]) -> None:
    """Raise :class:`~flexkit.errors.ConfigError` (a ``ValueError``) with a readable message if ``value`` breaks a
    bound in ``meta``."""
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"must be one of {options}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if meta.get("finite", True) and isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"must be a finite number, got {value!r}")
        comparisons: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
            ("ge", lambda a, b: a >= b, ">="),
            ("gt", lambda a, b: a > b, ">"),
            ("le", lambda a, b: a <= b, "<="),
            ("lt", lambda a, b: a < b, "<"),
        )
        for key, op, text in comparisons:
            bound = meta.get(key)
            if bound is not None and not op(value, bound):
                raise ConfigError(f"must be {text} {bound}, got {value!r}")
    min_items = meta.get("min_items")
    if min_items is not None and isinstance(value, (list, tuple)) and len(value) < min_items:
        raise ConfigError(f"must have at least {min_items} item(s), got {len(value)}")
