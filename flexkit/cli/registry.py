"""``flexkit plugins`` and ``flexkit schema``: the commands that show the registry, its components and their
plugins, and the pipeline JSON Schema generated from it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flexkit._version import DISTRIBUTION
from flexkit.errors import ConfigError
from flexkit.log import say

if TYPE_CHECKING:
    from flexkit.plugins.manager import PluginHost

__all__ = ["DEFAULT_SCHEMA_PATH", "cmd_plugins", "cmd_schema"]

DEFAULT_SCHEMA_PATH = Path("schemas") / "pipeline.schema.json"


def _plugin_host(specs: Sequence[str]) -> PluginHost:
    """The plugin host with ``--plugin`` specs (paths relative to the current directory) added; a plugin that
    does not load is a :class:`ConfigError` naming its ``--plugin``."""
    import attrs

    from flexkit.plugins.manager import plugin_host_for

    try:
        return plugin_host_for(specs)
    except ConfigError as exc:
        raise ConfigError([attrs.evolve(i, path=i.path.replace("plugins", "--plugin", 1)) for i in exc.issues],
                          exc.source) from None


def cmd_plugins(args: argparse.Namespace) -> int:
    """``flexkit plugins``: components per stage with their plugin, distribution and version; exit status 1
    when a plugin failed to load."""
    host = _plugin_host(args.plugin)
    rows = [
        {"name": c.name, "stage": c.stage, "plugin": c.plugin, "distribution": c.distribution,
         "version": c.version, "description": c.description}
        for c in host.all_components()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        current = None
        for row in rows:
            if row["stage"] != current:
                current = row["stage"]
                print(f"{current}:")
            origin = f"{row['distribution'] or 'local'} {row['version'] or ''}".strip()
            print(f"  {row['name']:<22} {origin:<22} {row['description']}")
    for failure in host.failures:
        say("plugin_problem", f"problem: {failure}", level="warning", plugin=failure.plugin,
            distribution=failure.distribution, phase=failure.phase, error=failure.error)
    return 1 if host.failures else 0


def cmd_schema(args: argparse.Namespace) -> int:
    """``flexkit schema``: print, write or check the JSON Schema."""
    from flexkit.config.schema import REGENERATE_COMMAND, dumps, pipeline_schema

    host = _plugin_host(args.plugin)
    wanted, local = {DISTRIBUTION, *args.distribution}, set(args.plugin)
    missing = sorted(set(args.distribution) - {c.distribution for c in host.all_components()})
    if missing:
        say("error", f"error: no installed distribution registers components: {', '.join(missing)}", level="error")
        return 2
    include = None if args.all_plugins else (lambda c: c.distribution in wanted or c.plugin in local)
    text = dumps(pipeline_schema(host, include))
    if args.check:
        path = Path(args.output) if args.output else DEFAULT_SCHEMA_PATH
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            say("schema_check_failed", f"{path}: missing; regenerate with: {REGENERATE_COMMAND}", level="error")
            return 1
        if current != text:
            say("schema_check_failed", f"{path}: out of date; regenerate with: {REGENERATE_COMMAND}", level="error")
            return 1
        print(f"{path}: up to date")
        return 0
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0
