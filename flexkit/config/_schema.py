"""JSON Schema (draft-07) generated from the config classes and every registered component.

One source of truth: the attrs classes (types, defaults, ``flexkit.config.field`` bounds and docs) drive
both validation and the schema. Component tables become ``oneOf`` branches discriminated by ``type``.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, cast

import attrs

from flexkit.config._components import ComponentSpec, component_meta
from flexkit.config._fields import FACTORY_CLASS, field_meta
from flexkit.config._models import PipelineConfig

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
#: The command that regenerates the committed schema (printed when it is out of date).
REGENERATE_COMMAND = "flexkit schema --output schemas/pipeline.schema.json"


def pipeline_schema(host: Any, include: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    """The pipeline file's schema, with the components of ``host`` that ``include`` accepts (default all)."""
    generator = _Generator(host, include or (lambda _c: True))
    schema = {"$schema": DRAFT_07, "title": "flexkit pipeline"}
    schema.update(generator.object_schema(PipelineConfig))
    return schema


def dumps(schema: Mapping[str, Any]) -> str:
    """Serialise a schema the way the committed file is written (stable, 2-space indent, final newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")


@attrs.define
class _Generator:
    host: Any
    include: Callable[[Any], bool]

    def object_schema(self, cls: type, extra_props: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Schema of an attrs class as a TOML table (inline component fields are expanded by the caller)."""
        props: dict[str, Any] = dict(extra_props or {})
        required: list[str] = []
        for f in attrs.fields(attrs.resolve_types(cls)):
            meta = component_meta(f)
            if meta and meta.get("inline"):
                continue
            props[f.alias] = self.field_schema(f)
            if f.default is attrs.NOTHING and not (meta and meta.get("default_type")):
                required.append(f.alias)
        out: dict[str, Any] = {"type": "object"}
        doc = _doc(cls)
        if doc:
            out["description"] = doc
        out["properties"] = props
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        inline = next((f for f in attrs.fields(cls) if (component_meta(f) or {}).get("inline")), None)
        if inline is not None:
            return self.inline_schema(out, inline)
        return out

    def inline_schema(self, parent: dict[str, Any], f: attrs.Attribute[Any]) -> dict[str, Any]:
        """A table that holds its own keys plus one inline component's keys: one branch per component."""
        spec_cls = cast(type[ComponentSpec], f.type)  # the inline component field's spec class (resolved)
        meta = component_meta(f) or {}
        branches = []
        for component in self._components(spec_cls.STAGE):
            branch = self.object_schema(component.config_cls)
            props = {spec_cls.DISCRIMINATOR: {"const": component.name, "description": component.description}}
            props.update(parent["properties"])
            props.update(branch["properties"])
            required = list(parent.get("required", [])) + list(branch.get("required", []))
            if component.name != meta.get("default_type"):
                required.insert(0, spec_cls.DISCRIMINATOR)
            item: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
            if required:
                item["required"] = required
            branches.append(item)
        out = {k: v for k, v in parent.items() if k not in ("properties", "required", "additionalProperties")}
        out["oneOf"] = branches
        return out

    def field_schema(self, f: attrs.Attribute[Any]) -> dict[str, Any]:
        meta = field_meta(f)
        out = self.type_schema(f.type)
        doc = meta.get("doc") or (component_meta(f) or {}).get("doc")
        if doc:
            out = {"description": doc, **out}
        for key, word in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum"), ("lt", "exclusiveMaximum")):
            if meta.get(key) is not None:
                out[word] = meta[key]
        if meta.get("choices") is not None:
            out["enum"] = list(meta["choices"])
        if meta.get("min_items") is not None:
            out["minItems"] = meta["min_items"]
        if f.default is not attrs.NOTHING and not isinstance(f.default, FACTORY_CLASS):
            default = f.default
            if isinstance(default, tuple):
                default = list(default)
            if default is not None and isinstance(default, (bool, int, float, str, list)):
                out["default"] = default
        return out

    def type_schema(self, t: Any) -> dict[str, Any]:
        origin = typing.get_origin(t)
        args = typing.get_args(t)
        if t is bool:
            return {"type": "boolean"}
        if t is int:
            return {"type": "integer"}
        if t is float:
            return {"type": "number"}
        if t is str:
            return {"type": "string"}
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (Union, types.UnionType):
            inner = [a for a in args if a is not type(None)]
            if len(inner) == 1:
                return self.type_schema(inner[0])
            return {"anyOf": [self.type_schema(a) for a in inner]}
        if origin in (list, tuple) or t in (list, tuple):
            if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
                return {"type": "array", "items": [self.type_schema(a) for a in args],
                        "minItems": len(args), "maxItems": len(args)}
            return {"type": "array", "items": self.type_schema(args[0]) if args else {}}
        if origin in (dict, Mapping) or t is dict:
            return {"type": "object", "additionalProperties": self.type_schema(args[1]) if len(args) == 2 else {}}
        if isinstance(t, type) and issubclass(t, ComponentSpec):
            return self.component_schema(t)
        if isinstance(t, type) and attrs.has(t):
            return self.object_schema(t)
        return {}

    def component_schema(self, spec_cls: type[ComponentSpec]) -> dict[str, Any]:
        branches = []
        for component in self._components(spec_cls.STAGE):
            branch = self.object_schema(component.config_cls)
            props = {spec_cls.DISCRIMINATOR: {"const": component.name, "description": component.description}}
            props.update(branch["properties"])
            item = {"type": "object", "properties": props,
                    "required": [spec_cls.DISCRIMINATOR, *branch.get("required", [])],
                    "additionalProperties": False}
            if branch.get("description"):
                item = {"description": branch["description"], **item}
            branches.append(item)
        return {"oneOf": branches}

    def _components(self, stage: str) -> list[Any]:
        return [self.host.component(stage, name) for name in self.host.names(stage)
                if self.include(self.host.component(stage, name))]
