"""Component references in a pipeline: a table's ``type`` (a registered name) plus its validated config."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import attrs

#: The pipeline stages a component can belong to, in the order ``flexkit plugins`` lists them.
STAGES: tuple[str, ...] = ("selector", "scorer", "actuator", "feedback", "storage", "trainer")


class ComponentLookup(Protocol):
    """Finds a registered component by stage and name (the plugin registry implements this)."""

    def component(self, stage: str, name: str) -> Any:
        """The component, or raise :class:`~flexkit.errors.ConfigError` naming the registered ones."""
        ...


@attrs.frozen
class ComponentSpec:
    """A component chosen in a pipeline file: its registered name (``type``) and its validated config.

    Subclasses fix the stage; the converter looks the name up in the plugin registry and structures the
    table's other keys with the component's own attrs config class.
    """

    STAGE: ClassVar[str] = ""
    #: The key that names the component in its table.
    DISCRIMINATOR: ClassVar[str] = "type"

    type: str
    config: Any = None


@attrs.frozen
class SelectorSpec(ComponentSpec):
    """A ``[tasksets.selector]`` table."""

    STAGE: ClassVar[str] = "selector"


@attrs.frozen
class FeedbackSpec(ComponentSpec):
    """The feedback operator of a ``[feedback]`` table."""

    STAGE: ClassVar[str] = "feedback"


@attrs.frozen
class StorageSpec(ComponentSpec):
    """The storage part of a ``[[tasksets]]`` table, named by its ``storage_type`` key."""

    STAGE: ClassVar[str] = "storage"
    DISCRIMINATOR: ClassVar[str] = "storage_type"


@attrs.frozen
class ScorerSpec(ComponentSpec):
    """A ``[sample.scorer]`` table."""

    STAGE: ClassVar[str] = "scorer"


@attrs.frozen
class ActuatorSpec(ComponentSpec):
    """A ``[sample.actuator]`` table."""

    STAGE: ClassVar[str] = "actuator"


@attrs.frozen
class TrainerSpec(ComponentSpec):
    """A ``[trainer]`` table: the backend ``flexkit run`` drives."""

    STAGE: ClassVar[str] = "trainer"


def component_field(*, default_type: str | None = None, inline: bool = False, doc: str = "") -> Any:
    """An attrs field holding a :class:`ComponentSpec`.

    ``default_type`` is used when the table (or, for ``inline`` fields, its discriminator key) is absent.
    An ``inline`` component shares its parent's table: the parent's own keys are taken out and every other
    key, with the discriminator, configures the component (``[[tasksets]]`` holds ``storage_type`` and
    ``path`` beside ``name``).
    """
    meta = {"component": {"default_type": default_type, "inline": inline, "doc": doc}}
    if default_type is None and not inline:
        return attrs.field(metadata=meta)
    return attrs.field(default=None, metadata=meta)


def component_meta(attribute: attrs.Attribute[Any]) -> dict[str, Any] | None:
    """The component metadata of an attrs attribute, or None for ordinary fields."""
    return attribute.metadata.get("component")


def default_table(table: dict[str, Any] | None = None, *, doc: str = "") -> Any:
    """An attrs field for a sub-table that, when absent, is structured from ``table`` (default ``{}``),
    so its own defaults (and component lookups) apply exactly as if the user had written it."""
    return attrs.field(default=None, metadata={"default_table": dict(table or {}), "flexkit": {"doc": doc}})


def default_table_of(attribute: attrs.Attribute[Any]) -> dict[str, Any] | None:
    """The table to structure when ``attribute``'s key is absent, or None when it has no such default."""
    if "default_table" in attribute.metadata:
        return dict(attribute.metadata["default_table"])
    meta = component_meta(attribute)
    if meta and meta.get("default_type") and not meta.get("inline"):
        return {ComponentSpec.DISCRIMINATOR: meta["default_type"]}
    return None
