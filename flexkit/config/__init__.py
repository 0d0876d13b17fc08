"""Config: attrs models, the strict cattrs converter, TOML loading and JSON Schema generation."""

from flexkit.config._fields import field, field_meta

__all__ = ["field", "field_meta"]
