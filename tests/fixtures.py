"""Shared test support, loaded for every test (``tests/`` and ``plugins/*/tests/``) by the root ``conftest.py``.

A pytest plugin module: the hypothesis profile, an autouse fixture giving each test a clean plugin cache,
``fake_dist`` (fake installed distributions with flexkit entry points), and helpers tests import
(:data:`ROOT`, :data:`EXAMPLES`; :class:`Crash`, :class:`CrashAt`, :func:`crash_run`, :func:`read_metrics`,
:func:`without_clock`, :func:`without_clock_text` and :func:`jsonl_pipeline` come from :mod:`flexkit.testing`,
where a plugin's own tests find them too).
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from hypothesis import settings

from flexkit.plugins._manager import clear_plugin_cache
from flexkit.testing import Crash, CrashAt, crash_run, jsonl_pipeline, read_metrics, without_clock, without_clock_text

__all__ = ["EXAMPLES", "ROOT", "Crash", "CrashAt", "crash_run", "fake_dist", "jsonl_pipeline", "plain_feedback",
           "read_metrics", "without_clock", "without_clock_text"]

# CI (CI=true) runs the property tests derandomized, so a submission's result does not depend on the draw;
# local runs keep exploring new examples.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees the plugin environment it sets up (env vars, fake distributions)."""
    monkeypatch.delenv("FLEXKIT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("FLEXKIT_STRICT_PLUGINS", raising=False)
    clear_plugin_cache()
    yield
    clear_plugin_cache()
    structlog.reset_defaults()  # the CLI configures logging onto a captured stream; undo it


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Create an installed-looking distribution (dist-info + module) on ``sys.path``.

    ``fake_dist("my-dist", {"my_mod": "source"}, entry_points={"name": "my_mod"})`` makes
    ``importlib.metadata`` discover entry point ``name`` in group ``flexkit`` of distribution ``my-dist``.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def make(dist: str, modules: dict[str, str], entry_points: dict[str, str], version: str = "1.0") -> Path:
        for name, source in modules.items():
            (site / f"{name}.py").write_text(textwrap.dedent(source))
            created.append(name)
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[flexkit]\n{lines}\n")
        importlib.invalidate_caches()
        clear_plugin_cache()
        return site

    yield make
    for name in created:
        sys.modules.pop(name, None)


def plain_feedback(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A feedback payload with each taskset's ``indices`` and ``values`` as lists (the built-in operator gives
    arrays), for comparing payloads with ``==``."""
    return {key: {tid: {name: np.asarray(v).tolist() for name, v in part.items()} for tid, part in parts.items()}
            for key, parts in metrics.items()}


def within_rounding(got: Any, expected: Any) -> bool:
    """``got == expected`` for JSON-like data (dicts, lists, tuples), floats within 1e-12 of each other: for
    records stored by a run on another CPU, whose vector instructions round ``exp`` differently in the last bit."""
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(within_rounding(got[k], expected[k]) for k in got)
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(within_rounding(a, b) for a, b in zip(got, expected, strict=True))
    if isinstance(got, float) and isinstance(expected, float):
        return bool(got == pytest.approx(expected, rel=1e-12, abs=1e-15))
    return bool(got == expected)
