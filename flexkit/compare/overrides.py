"""``flexkit compare`` settings: parsing ``--set NAME:KEY=VALUE,...`` and ``--seeds``, applying a setting's
overrides to the pipeline's TOML data, and writing the command line back."""

from __future__ import annotations

import copy
import os
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from flexkit.errors import ConfigError, ConfigIssue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "Override",
    "Setting",
    "apply_overrides",
    "command_line",
    "parse_seeds",
    "parse_setting",
    "parse_value",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@attrs.frozen
class Override:
    """One ``KEY=VALUE`` of a setting: the key as typed, its path segments and the parsed value."""

    key: str
    parts: tuple[str, ...]
    value: Any


@attrs.frozen
class Setting:
    """A named set of overrides; ``spec`` is the ``--set`` text it came from."""

    name: str
    overrides: tuple[Override, ...] = ()
    spec: str = ""

    @property
    def label(self) -> str:
        """``--set SPEC``, for error reports."""
        return f"--set {self.spec or self.name + ':'}"


# --------------------------------------------------------------------------------------------- parsing


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside strings, arrays and inline tables."""
    parts, depth, start, quote, i = [], 0, 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _parse_key(key: str) -> tuple[str, ...]:
    """``tasksets.0.selector`` or ``tasksets[0].selector`` -> ``("tasksets", "0", "selector")``."""
    normalised = re.sub(r"\[(\d+)\]", r".\1", key.strip())
    parts = tuple(normalised.split("."))
    if not parts or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise ValueError(f"bad key {key.strip()!r}: expected a dotted path such as tasksets.0.selector.type")
    return parts


def parse_value(text: str) -> Any:
    """A TOML value (a bare word that is not valid TOML is a string); raises ``ValueError``."""
    text = text.strip()
    if not text:
        raise ValueError("empty value (write \"\" for an empty string)")
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if _BARE_WORD.fullmatch(text):
            return text
        raise ValueError(f"{text!r} is not a TOML value ({exc})") from None


def parse_setting(spec: str) -> Setting:
    """Parse ``NAME:KEY=VALUE[,KEY=VALUE...]``; raises :class:`~flexkit.ConfigError` naming the ``--set``."""
    label = f"--set {spec}"

    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigIssue(label, message)])

    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep:
        raise fail("expected NAME:KEY=VALUE[,KEY=VALUE...] (or NAME: for no overrides)")
    if not _NAME.fullmatch(name):
        raise fail(f"bad setting name {name!r}: use letters, digits, '_', '-', '.' (it names a folder)")
    overrides: list[Override] = []
    if rest.strip():
        for item in _split_top_level(rest):
            key, eq, value = item.partition("=")
            if not eq:
                raise fail(f"{item.strip()!r}: expected KEY=VALUE")
            try:
                overrides.append(Override(key.strip(), _parse_key(key), parse_value(value)))
            except ValueError as exc:
                raise fail(str(exc)) from None
    return Setting(name, tuple(overrides), spec)


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``N`` (seeds 0..N-1) or a comma-separated list (``0,3,7``); raises ``ValueError``."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text}: expected a count N or a list such as 0,3,7") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text}: give at least one seed, each >= 0 and distinct")
    return seeds


def apply_overrides(data: dict[str, Any], setting: Setting) -> dict[str, Any]:
    """A deep copy of ``data`` with ``setting``'s overrides applied; a bad path is a ConfigError."""
    out = copy.deepcopy(data)
    for ov in setting.overrides:
        node: Any = out
        where: list[str] = []
        for i, part in enumerate(ov.parts):
            last = i == len(ov.parts) - 1
            here = ".".join(where) or "the top level"
            if isinstance(node, list):
                if not part.isdigit():
                    raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: {here} is an array; "
                                                   f"expected an index, got {part!r}")])
                index = int(part)
                if index > len(node) or (index == len(node) and not last):
                    raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: index {index} out of range "
                                                   f"({here} has {len(node)} entries)")])
                if last:
                    value = copy.deepcopy(ov.value)
                    node[index:index + 1] = [value]
                else:
                    node = node[index]
            elif isinstance(node, dict):
                if last:
                    node[part] = copy.deepcopy(ov.value)
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: {here} is a {type(node).__name__} "
                                               f"value ({node!r}), not a table or array")])
            where.append(part)
    return out


def command_line(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target: float | None = None,
    plugins: Sequence[str] = (),
    budget: int | None = None,
) -> str:
    """The ``flexkit compare`` command that reproduces a comparison."""
    args = ["flexkit", "compare", str(path)]
    for s in settings:
        args += ["--set", s.spec or f"{s.name}:"]
    args += ["--seeds", str(len(seeds)) if list(seeds) == list(range(len(seeds))) else ",".join(map(str, seeds))]
    if target is not None:
        args += ["--target", repr(target)]
    if budget is not None:
        args += ["--budget", str(budget)]
    for p in plugins:
        args += ["--plugin", p]
    args += ["--out", str(out_dir)]
    return shlex.join(args)
