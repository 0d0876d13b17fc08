"""``flexkit plugins`` and ``flexkit schema``: the commands that show the registry, its components and their
plugins, and the pipeline JSON Schema generated from it; where each distribution came from (``flexkit plugins``,
``flexkit --version``)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from flexkit._log import say
from flexkit._version import DISTRIBUTION, __version__
from flexkit.errors import ConfigError

if TYPE_CHECKING:
    from flexkit.plugins._manager import PluginHost

__all__ = ["DEFAULT_SCHEMA_PATH", "Origin", "cmd_plugins", "cmd_schema", "distribution_origin", "flexkit_distributions",
           "version_report"]

DEFAULT_SCHEMA_PATH = Path("schemas") / "pipeline.schema.json"


@dataclass(frozen=True)
class Origin:
    """Where an installed distribution came from, read from its PEP 610 ``direct_url.json``.

    ``kind``: ``editable`` (``pip install -e`` of a source folder), ``folder`` (a source folder, not editable),
    ``archive`` (a wheel or sdist file or URL), ``vcs`` (a ``git+`` URL), ``index`` (by name, from a package index
    or ``--find-links``: no ``direct_url.json``), ``missing`` (no metadata: not installed), ``unknown`` (a
    ``direct_url.json`` that does not parse).
    """

    distribution: str
    version: str | None
    kind: str
    location: str | None = None

    def describe(self) -> str:
        """One line: the version and where it came from."""
        where = {
            "editable": f"editable checkout {self.location}",
            "folder": f"installed from the source folder {self.location}",
            "archive": f"installed from {'the wheel ' if str(self.location).endswith('.whl') else ''}"
                       f"{self.location}",
            "vcs": f"installed from {self.location}",
            "index": "installed by name (a package index or --find-links)",
            "missing": "not installed (no distribution metadata)",
        }.get(self.kind, f"installed ({self.location or 'origin unknown'})")
        return f"{self.distribution} {self.version or ''}".strip() + f": {where}"

    def as_json(self) -> dict[str, Any]:
        """``{"kind": ..., "location": ...}``."""
        return {"kind": self.kind, "location": self.location}


def _location(url: str) -> str:
    """A ``file://`` URL as a local path; any other URL as it is."""
    parts = urlsplit(url)
    return url2pathname(parts.path) if parts.scheme == "file" else url


def origin_of(dist: importlib.metadata.Distribution) -> Origin:
    """Where ``dist`` came from (PEP 610); kind ``unknown`` for a ``direct_url.json`` that does not parse."""
    name, version = dist.metadata["Name"], dist.version
    text = dist.read_text("direct_url.json")
    if text is None:
        return Origin(name, version, "index")
    try:
        direct = json.loads(text)
        url = str(direct["url"])
        if "dir_info" in direct:
            kind = "editable" if direct["dir_info"].get("editable", False) is True else "folder"
            return Origin(name, version, kind, _location(url))
        if "vcs_info" in direct:
            vcs, commit = direct["vcs_info"].get("vcs", "vcs"), direct["vcs_info"].get("commit_id")
            return Origin(name, version, "vcs", f"{vcs}+{url}" + (f"@{commit}" if commit else ""))
    except (AttributeError, KeyError, TypeError, ValueError):
        return Origin(name, version, "unknown", "unreadable direct_url.json")
    return Origin(name, version, "archive", _location(url))


def distribution_origin(name: str) -> Origin:
    """Where the installed distribution ``name`` came from; kind ``missing`` when it is not installed."""
    try:
        return origin_of(importlib.metadata.distribution(name))
    except importlib.metadata.PackageNotFoundError:
        return Origin(name, None, "missing")


def _requires_core(dist: importlib.metadata.Distribution) -> bool:
    """Whether ``dist`` declares a requirement on the core distribution (extras included)."""
    for line in dist.requires or ():
        name = re.split(r"[\s\[<>=!~;(@]", line.strip(), maxsplit=1)[0]
        if _normalise(name) == DISTRIBUTION:
            return True
    return False


def _normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it (``Flexkit_RFT`` is ``flexkit-rft``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def flexkit_distributions() -> dict[str, Origin]:
    """Where the core and every installed flexkit distribution came from, by name: those that require the core
    (a plugin with no component, such as ``flexkit-rft-ray``, included) and those with ``flexkit`` or
    ``flexkit.hosts`` entry points."""
    from flexkit.plugins._manager import ENTRY_POINT_GROUP

    origins = {DISTRIBUTION: distribution_origin(DISTRIBUTION)}
    found = [ep.dist for group in (ENTRY_POINT_GROUP, f"{ENTRY_POINT_GROUP}.hosts")
             for ep in importlib.metadata.entry_points(group=group)]
    found += [dist for dist in importlib.metadata.distributions() if _requires_core(dist)]
    for dist in found:
        if dist is not None and dist.metadata["Name"] and _normalise(dist.metadata["Name"]) not in origins:
            origins[_normalise(dist.metadata["Name"])] = origin_of(dist)
    return dict(sorted(origins.items()))


def version_report() -> str:
    """``flexkit --version``: the version, where the core and every flexkit distribution came from
    (:func:`flexkit_distributions`), and where this process imports flexkit from."""
    import flexkit

    lines = [f"flexkit {__version__}"]
    lines += [f"  {origin.describe()}" for origin in flexkit_distributions().values()]
    lines.append(f"  imports flexkit from {Path(flexkit.__file__).parent}")
    return "\n".join(lines)


def _plugin_host(specs: Sequence[str]) -> PluginHost:
    """The plugin host with ``--plugin`` specs (paths relative to the current directory) added; a plugin that
    does not load is a :class:`ConfigError` naming its ``--plugin``."""
    import attrs

    from flexkit.plugins._manager import plugin_host_for

    try:
        return plugin_host_for(specs)
    except ConfigError as exc:
        raise ConfigError([attrs.evolve(i, path=i.path.replace("plugins", "--plugin", 1)) for i in exc.issues],
                          exc.source) from None


def cmd_plugins(args: argparse.Namespace) -> int:
    """``flexkit plugins``: components per stage with their plugin, distribution and version; exit status 1
    when a plugin failed to load."""
    host = _plugin_host(args.plugin)
    components = host.all_components()
    origins = {c.distribution: distribution_origin(c.distribution) for c in components if c.distribution}
    rows = [
        {"name": c.name, "stage": c.stage, "plugin": c.plugin, "distribution": c.distribution,
         "version": c.version, "origin": origins[c.distribution].as_json() if c.distribution else None,
         "description": c.description}
        for c in components
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
        listed = flexkit_distributions()
        for name, found in origins.items():
            listed.setdefault(_normalise(name), found)
        print("distributions:")
        for name in sorted(listed):
            print(f"  {listed[name].describe()}")
    for failure in host.failures:
        say("plugin_problem", f"problem: {failure}", level="warning", plugin=failure.plugin,
            distribution=failure.distribution, phase=failure.phase, error=failure.error)
    return 1 if host.failures else 0


def cmd_schema(args: argparse.Namespace) -> int:
    """``flexkit schema``: print, write or check the JSON Schema."""
    from flexkit.config._schema import REGENERATE_COMMAND, dumps, pipeline_schema

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
