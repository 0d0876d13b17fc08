"""Overrides of a pipeline's TOML data, one parser for ``flexkit run --set KEY=VALUE,...`` and ``flexkit compare
--set NAME:KEY=VALUE,...``: parsing them (and ``--seeds``), applying them, and writing the command line back.

Replacing a component's ``type`` (``tasksets.0.selector.type=random``) drops the parameters the old component's
table held, except those the same setting sets; an inline table (``tasksets.0.selector={type="random"}``)
replaces the whole table.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import structlog

from flexkit.errors import ConfigError, ConfigIssue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "MAX_SEEDS",
    "MAX_VALUE_DEPTH",
    "Override",
    "Setting",
    "apply_overrides",
    "command_line",
    "folder_name",
    "parse_overrides",
    "parse_seeds",
    "parse_setting",
    "parse_value",
    "run_setting",
]

log = structlog.get_logger("flexkit.overrides")

#: The key that names a component in its table; replacing it drops the old component's parameters.
COMPONENT_KEY = "type"
#: The most seeds ``--seeds`` accepts (a count or a list); more is refused before anything is allocated.
MAX_SEEDS = 1000
#: The largest seed value (``[run] seed`` feeds 32-bit generators).
MAX_SEED = 2**32 - 1
#: How deeply arrays and inline tables may nest in one ``--set`` value.
MAX_VALUE_DEPTH = 32
#: The longest folder name a setting gets; a longer name is cut and made unique with a short hash.
MAX_FOLDER_NAME = 64

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


def _outside_strings(text: str) -> Iterator[tuple[int, str, int]]:
    """``(position, character, depth)`` of every character of ``text`` outside TOML strings; ``depth`` counts the
    arrays and inline tables open after the character."""
    depth, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        else:
            depth += (ch in "[{") - (ch in "]}")
            yield i, ch, depth
        i += 1


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside strings, arrays and inline tables."""
    cuts = [i for i, ch, depth in _outside_strings(text) if ch == "," and depth == 0]
    return [text[a + 1:b] for a, b in zip([-1, *cuts], [*cuts, len(text)], strict=True)]


def _parse_key(key: str) -> tuple[str, ...]:
    """``tasksets.0.selector`` or ``tasksets[0].selector`` -> ``("tasksets", "0", "selector")``."""
    normalised = re.sub(r"\[(\d+)\]", r".\1", key.strip())
    parts = tuple(normalised.split("."))
    if not parts or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise ConfigError(f"bad key {key.strip()!r}: expected a dotted path such as tasksets.0.selector.type")
    return parts


def _nesting(text: str) -> int:
    """How deeply arrays and inline tables nest in ``text`` (brackets inside strings do not count)."""
    return max((depth for _, _, depth in _outside_strings(text)), default=0)


def parse_value(text: str) -> Any:
    """A TOML value (a bare word that is not valid TOML is a string); raises :class:`~flexkit.errors.ConfigError`
    (a ``ValueError``), also for a value nested deeper than :data:`MAX_VALUE_DEPTH`."""
    text = text.strip()
    if not text:
        raise ConfigError("empty value (write \"\" for an empty string)")
    if (depth := _nesting(text)) > MAX_VALUE_DEPTH:
        raise ConfigError(f"value nested {depth} levels deep; at most {MAX_VALUE_DEPTH} levels of arrays and inline "
                          "tables are accepted")
    try:
        document = tomllib.loads(f"v = {text}")
        if set(document) != {"v"}:  # a newline let more keys in: they would be dropped without a word
            raise ConfigError(f"{text!r} is not one TOML value: it holds a line break and further keys "
                              f"({', '.join(sorted(set(document) - {'v'}))}); give each override its own KEY=VALUE")
        return document["v"]
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ConfigError(f"value nested too deeply (at most {MAX_VALUE_DEPTH} levels)") from None
    except tomllib.TOMLDecodeError as exc:
        if _BARE_WORD.fullmatch(text):
            return text
        raise ConfigError(f"{text!r} is not a TOML value ({exc})") from None


def parse_overrides(text: str, label: str) -> tuple[Override, ...]:
    """Parse ``KEY=VALUE[,KEY=VALUE...]`` (empty: none); raises :class:`~flexkit.ConfigError` naming ``label``."""
    overrides: list[Override] = []
    if not text.strip():
        return ()
    for item in _split_top_level(text):
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError([ConfigIssue(label, f"{item.strip()!r}: expected KEY=VALUE")])
        try:
            parts = _parse_key(key)
        except ConfigError as exc:
            raise ConfigError([ConfigIssue(label, str(exc))]) from None
        try:
            overrides.append(Override(key.strip(), parts, parse_value(value)))
        except ConfigError as exc:
            raise ConfigError([ConfigIssue(label, f"{key.strip()}: {exc}")]) from None
    return tuple(overrides)


def parse_setting(spec: str) -> Setting:
    """Parse ``NAME:KEY=VALUE[,KEY=VALUE...]``; raises :class:`~flexkit.ConfigError` naming the ``--set``."""
    label = f"--set {spec}"
    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep:
        raise ConfigError([ConfigIssue(label, "expected NAME:KEY=VALUE[,KEY=VALUE...] (or NAME: for no overrides)")])
    if not _NAME.fullmatch(name):
        raise ConfigError([ConfigIssue(label, f"bad setting name {name!r}: use letters, digits, '_', '-', '.' (it "
                                              "names a folder)")])
    return Setting(name, parse_overrides(rest, label), spec)


def run_setting(specs: Sequence[str]) -> Setting:
    """``flexkit run``'s repeated ``--set KEY=VALUE[,KEY=VALUE...]`` as one setting (named ``run``), applied in
    order; a parse error names its own ``--set``."""
    overrides = tuple(ov for spec in specs for ov in parse_overrides(spec, f"--set {spec}"))
    if specs and not overrides:
        raise ConfigError([ConfigIssue(f"--set {specs[0]}", "expected KEY=VALUE[,KEY=VALUE...]")])
    return Setting("run", overrides, " --set ".join(specs))


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``N`` (seeds 0..N-1) or a comma-separated list (``0,3,7``; one seed: ``7,``); raises
    :class:`~flexkit.errors.ConfigError` (a ``ValueError``), also for more than :data:`MAX_SEEDS` seeds (checked
    before any list is built) or a seed above :data:`MAX_SEED`."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    if "," in text and text.count(",") + 1 > MAX_SEEDS:
        raise ConfigError(f"--seeds {shown}: at most {MAX_SEEDS} seeds, got {text.count(',') + 1}")
    try:
        numbers = [int(s) for s in text.split(",") if s.strip()] if "," in text else [int(text)]
    except ValueError:  # int() refusing the text
        raise ConfigError(f"--seeds {shown}: expected a count N or a list such as 0,3,7") from None
    if "," in text:
        seeds = numbers
    else:
        if numbers[0] > MAX_SEEDS:
            raise ConfigError(f"--seeds {shown}: at most {MAX_SEEDS} seeds, got {numbers[0]:,}")
        if numbers[0] == 0:
            raise ConfigError(f"--seeds {shown}: a number alone is a count (N: seeds 0..N-1), and 0 seeds run "
                              "nothing; for one seed give it with a comma (--seeds 0, or --seeds 7,)")
        seeds = list(range(numbers[0]))
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {shown}: give at least one seed, each >= 0 and distinct")
    if any(s > MAX_SEED for s in seeds):
        raise ConfigError(f"--seeds {shown}: each seed must be <= {MAX_SEED}")
    return seeds


def folder_name(name: str) -> str:
    """The folder a setting's runs go in: its name, or for a name longer than :data:`MAX_FOLDER_NAME` its start
    and a hash of the whole name (distinct names keep distinct folders)."""
    if len(name) <= MAX_FOLDER_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:10]
    return f"{name[:MAX_FOLDER_NAME - 11]}-{digest}"


def apply_overrides(data: dict[str, Any], setting: Setting) -> dict[str, Any]:
    """A deep copy of ``data`` with ``setting``'s overrides applied, in order; a bad path is a ConfigError.

    Setting a table's ``type`` to another component drops the keys the table held for the old one (the old
    component's parameters), except keys that ``setting`` itself sets in that table, before or after.
    """
    out = copy.deepcopy(data)
    own_keys: dict[tuple[str, ...], set[str]] = {}
    for ov in setting.overrides:
        own_keys.setdefault(ov.parts[:-1], set()).add(ov.parts[-1])
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
                    if part == COMPONENT_KEY:
                        _drop_old_parameters(node, ov, own_keys.get(ov.parts[:-1], set()))
                    node[part] = copy.deepcopy(ov.value)
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: {here} is a {type(node).__name__} "
                                               f"value ({node!r}), not a table or array")])
            where.append(part)
    return out


def _drop_old_parameters(table: dict[str, Any], ov: Override, keep: set[str]) -> None:
    """Before ``table``'s ``type`` changes: remove the keys the old component's table held, but ``keep``."""
    old = table.get(COMPONENT_KEY)
    if not isinstance(old, str) or old == ov.value:
        return
    dropped = [key for key in table if key != COMPONENT_KEY and key not in keep]
    for key in dropped:
        del table[key]
    if dropped:
        log.info("override_dropped_parameters", key=ov.key, old_type=old, new_type=ov.value, dropped=dropped)


def command_line(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target: float | Sequence[float] | None = None,
    plugins: Sequence[str] = (),
    budget: int | Sequence[int] | None = None,
) -> str:
    """The ``flexkit compare`` command that reproduces a comparison (several targets or budgets: one
    comma-separated option each)."""
    args = ["flexkit", "compare", str(path)]
    for s in settings:
        args += ["--set", s.spec or f"{s.name}:"]
    args += ["--seeds", str(len(seeds)) if list(seeds) == list(range(len(seeds))) else ",".join(map(str, seeds))]
    if target is not None:
        targets = [target] if isinstance(target, (int, float)) else list(target)
        args += ["--target", ",".join(repr(t) for t in targets)]
    if budget is not None:
        budgets = [budget] if isinstance(budget, int) else list(budget)
        args += ["--budget", ",".join(str(b) for b in budgets)]
    for p in plugins:
        args += ["--plugin", p]
    args += ["--out", str(out_dir)]
    return shlex.join(args)
