"""Shared test support, loaded for every test (``tests/`` and ``plugins/*/tests/``) by the root ``conftest.py``.

A pytest plugin module: the hypothesis profile, an autouse fixture giving each test a clean plugin cache,
``fake_dist`` (fake installed distributions with flexkit entry points), and helpers tests import
(:data:`ROOT`, :data:`EXAMPLES`, :class:`Crash`, :class:`CrashAt`, :func:`crash_run`, :func:`read_metrics`,
:func:`jsonl_pipeline`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import settings

from flexkit.hookspecs import hookimpl
from flexkit.pipeline import Pipeline, pipeline_from_dict
from flexkit.plugins import clear_plugin_cache
from flexkit.runner import run_pipeline

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


class Crash(Exception):
    """Injected failure (see :class:`CrashAt`)."""


class CrashAt:
    """A plugin that crashes the run when the scheduler hands out the batch of ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def flexkit_on_select(self, step, tasks):
        if step == self.step:
            raise Crash(f"injected crash at step {step}")


def crash_run(pipeline: Pipeline, run_dir: Path, step: int) -> None:
    """Run ``pipeline`` into ``run_dir`` until the scheduler hands out the batch of ``step``, where it must crash
    (:class:`CrashAt`, unregistered afterwards: the plugin host is process-wide)."""
    crasher = CrashAt(step)
    pipeline.plugins.pm.register(crasher)
    try:
        with pytest.raises(Crash):
            run_pipeline(pipeline, run_dir=run_dir, progress=None)
    finally:
        pipeline.plugins.pm.unregister(crasher)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl``, in order (the first, ``"step": -1``, is the evaluation before
    training)."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def jsonl_pipeline(tmp_path: Path, sizes: Sequence[int], run: dict[str, Any], *, selector: str = "difficulty_based",
                   sample: dict[str, Any] | None = None) -> Pipeline:
    """A pipeline over JSONL tasksets ``t0``, ``t1``, ... of ``sizes`` rows with features ``f0`` and ``f1``
    (written into ``tmp_path`` unless there), each with a ``shuffle`` or a ``difficulty_based`` selector; ``run``
    is its ``[run]`` table and ``sample``, if given, its ``[sample]`` table."""
    from tests.scheduler.test_scheduler import write_taskset  # a test module: imported only when needed

    for i, n in enumerate(sizes):
        path = tmp_path / f"t{i}.jsonl"
        if not path.exists():
            write_taskset(path, n, seed=i)
    sel = {"type": "shuffle"} if selector == "shuffle" else {
        "type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5}
    data: dict[str, Any] = {
        "run": run, "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": sel} for i in range(len(sizes))]}
    if sample is not None:
        data["sample"] = sample
    return pipeline_from_dict(data, base_dir=tmp_path)
