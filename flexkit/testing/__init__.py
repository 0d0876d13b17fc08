"""``flexkit.testing``: the component contract checks, for a plugin's own tests (a public subpackage).

One call per component runs every check that applies to its stage (build from defaults, state round trip
through a real checkpoint, exact resume, schema entry, refusal of a bad table, documentation, the component
pattern); a failure is an ``AssertionError`` naming the component and the clause it broke::

    import flexkit.testing

    def test_contract():
        flexkit.testing.check_selector("my_selector")       # or check_component("selector", "my_selector")

The clauses one by one (:func:`check_builds`, :func:`check_state_round_trip`, ...), the generic builds and
drivers they use (:func:`build`, :func:`drive`, :data:`REQUIRED_FILLERS`, ...), :func:`check_state` (whether a
state can be checkpointed, checked in memory) and helpers for tests that run pipelines (:func:`crash_run`,
:func:`read_metrics`, ...) are all importable from here; the modules that hold them are internal. Importing this
package imports neither pytest nor torch.
"""

from __future__ import annotations

from pathlib import Path

from flexkit.pipeline._checkpoint import check_state
from flexkit.plugins._manager import PluginHost
from flexkit.testing._contract import (
    CHECKPOINTED,
    DRIVEN,
    check_builds,
    check_component,
    check_component_pattern,
    check_documented,
    check_exact_resume,
    check_refuses_bad_table,
    check_schema_entry,
    check_state_round_trip,
    find_component,
)
from flexkit.testing._registry import (
    REQUIRED_FILLERS,
    build,
    checkpoint_round_trip,
    default_config,
    default_table,
    drive,
    host,
    plain,
    registered,
    synthetic_batch,
    synthetic_features,
)
from flexkit.testing._runs import (
    Crash,
    CrashAt,
    crash_run,
    jsonl_pipeline,
    read_metrics,
    without_clock,
    without_clock_text,
    write_jsonl_taskset,
)

__all__ = [
    "CHECKPOINTED",
    "DRIVEN",
    "REQUIRED_FILLERS",
    "Crash",
    "CrashAt",
    "build",
    "check_actuator",
    "check_builds",
    "check_component",
    "check_component_pattern",
    "check_documented",
    "check_exact_resume",
    "check_feedback",
    "check_refuses_bad_table",
    "check_schema_entry",
    "check_scorer",
    "check_selector",
    "check_state",
    "check_state_round_trip",
    "check_storage",
    "check_trainer",
    "checkpoint_round_trip",
    "crash_run",
    "default_config",
    "default_table",
    "drive",
    "find_component",
    "host",
    "jsonl_pipeline",
    "plain",
    "read_metrics",
    "registered",
    "synthetic_batch",
    "synthetic_features",
    "without_clock",
    "without_clock_text",
    "write_jsonl_taskset",
]



def check_selector(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the selector ``name``."""
    return check_component("selector", name, plugins=plugins, workdir=workdir)


def check_scorer(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the scorer ``name``."""
    return check_component("scorer", name, plugins=plugins, workdir=workdir)


def check_actuator(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the actuator ``name``."""
    return check_component("actuator", name, plugins=plugins, workdir=workdir)


def check_trainer(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the trainer ``name``."""
    return check_component("trainer", name, plugins=plugins, workdir=workdir)


def check_storage(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the storage ``name``."""
    return check_component("storage", name, plugins=plugins, workdir=workdir)


def check_feedback(name: str, *, plugins: PluginHost | None = None, workdir: str | Path | None = None) -> list[str]:
    """:func:`check_component` for the feedback operator ``name``."""
    return check_component("feedback", name, plugins=plugins, workdir=workdir)
