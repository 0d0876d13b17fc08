"""Lazy re-exports for packages of components (importing the package loads none of its component modules), and
:func:`is_tensor`, the torch type test that does not import torch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import torch


def is_tensor(value: object) -> TypeGuard[torch.Tensor]:
    """Whether ``value`` is a ``torch.Tensor``; torch is not imported for it (no tensor exists before it is)."""
    module = sys.modules.get("torch")
    return module is not None and isinstance(value, module.Tensor)


def lazy_exports(namespace: dict[str, Any], table: Mapping[str, str]) -> tuple[Callable[[str], Any],
                                                                             Callable[[], list[str]]]:
    """A module's ``(__getattr__, __dir__)`` re-exporting ``table`` (name -> module) on first use.

    ``namespace`` is the package's ``globals()``: a name, once imported, is cached there.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
