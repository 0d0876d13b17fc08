"""Loading a script of ``benchmarks/`` as a module, for the benchmarks' smoke tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from tests.fixtures import ROOT


@contextmanager
def benchmark_module(filename: str) -> Iterator[ModuleType]:
    """``benchmarks/<filename>`` loaded as a module (registered in ``sys.modules`` while in use, so classes it
    defines can be pickled), removed again on exit."""
    spec = importlib.util.spec_from_file_location(f"flexkit_benchmarks_{filename.removesuffix('.py')}",
                                                  ROOT / "benchmarks" / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
