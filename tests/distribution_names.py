"""The distribution names this repository publishes, and a check that a requirement naming a ``flexkit*``
distribution names one of them (the package index's bare ``flexkit`` is an unrelated project)."""

from __future__ import annotations

import functools
import re
import sys

from tests.fixtures import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: ``name`` of a requirement: what precedes extras, a version specifier, a marker or a URL.
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """PEP 503 normalisation: ``Flexkit_RFT`` and ``flexkit.rft`` are ``flexkit-rft``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def our_distributions() -> frozenset[str]:
    """The ``[project] name`` of the root ``pyproject.toml`` and of every ``plugins/*/pyproject.toml``."""
    files = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]
    return frozenset(normalize(tomllib.loads(f.read_text(encoding="utf-8"))["project"]["name"]) for f in files)


def requirement_name(requirement: str) -> str | None:
    """The normalised distribution name of a requirement string (``None`` when it names none)."""
    match = _NAME.match(requirement.strip("\"'"))
    return normalize(match.group(1)) if match else None


def check_requirement(requirement: str, where: str) -> None:
    """Fail when ``requirement`` names a ``flexkit*`` distribution that is not one of :func:`our_distributions`."""
    name = requirement_name(requirement)
    if name is not None and name.startswith("flexkit") and name not in our_distributions():
        raise AssertionError(
            f"{where}: {requirement!r} names the distribution {name!r}, which is not one of this repository's "
            f"({', '.join(sorted(our_distributions()))}); the index's 'flexkit' is an unrelated project")
