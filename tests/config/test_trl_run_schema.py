"""``schemas/trl.schema.json``, the schema ``examples/trl_run/pipeline.toml`` points at: core components, the
arithmetic storage's (flexkit-rft-toyrl) and the ``trl`` trainer's, in sync with their config classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.config._schema import dumps, pipeline_schema
from flexkit.plugins._manager import PluginHost

pytest.importorskip("flexkit_toyrl")
pytest.importorskip("flexkit_trl")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schemas" / "trl.schema.json"
REGENERATE = ("flexkit schema --distribution flexkit-rft-toyrl --distribution flexkit-rft-trl --output "
              "schemas/trl.schema.json")
#: The distributions whose components the schema holds, and the plugin module when loaded by name (an install that
#: predates the plugin's `flexkit` entry point).
DISTRIBUTIONS = {"flexkit-rft", "flexkit-rft-toyrl", "flexkit-rft-trl"}
PLUGIN = "flexkit_trl.plugin"


def test_the_committed_trl_schema_is_up_to_date() -> None:
    host = PluginHost.load()
    host.add_local([PLUGIN])  # no-op when the entry point already registered it
    schema = pipeline_schema(host, lambda c: c.distribution in DISTRIBUTIONS or c.plugin == PLUGIN)
    assert '"const": "trl"' in dumps(schema)
    assert SCHEMA.read_text(encoding="utf-8") == dumps(schema), f"{SCHEMA.name} is out of date: {REGENERATE}"
