"""Reading pipeline files: TOML syntax errors with line and column, then strict structuring."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from flexkit.config._converter import make_converter, structure
from flexkit.config._models import PipelineConfig
from flexkit.errors import ConfigError, ConfigIssue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_LINE_COL = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END = re.compile(r"\s*\(at end of document\)\s*$")


def parse_toml(text: str | bytes, source: str | None = None) -> dict[str, Any]:
    """Parse TOML text; a syntax error becomes a :class:`ConfigError` that gives line and column."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError([ConfigIssue("", f"not valid UTF-8 text (byte {exc.start})")], source) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write: not TOML, and no content either
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        lineno, colno = getattr(exc, "lineno", None), getattr(exc, "colno", None)  # Python 3.14+ sets them
        match = _LINE_COL.search(message)
        if match:
            lineno, colno = int(match.group(1)), int(match.group(2))
            message = message[: match.start()]
        end = _END.search(message)
        if end:
            message = message[: end.start()] + " (at the end of the file)"
            if not lineno:
                lineno, colno = _line_col(text, len(text))
        problem = message
    except RecursionError:  # tomllib recurses once per nesting level of arrays and inline tables
        lineno, colno = _line_col(text, _first_failing_prefix(text, RecursionError))
        problem = "arrays or inline tables are nested too deeply"
    except ValueError as exc:  # not a TOMLDecodeError: int() refusing an integer of more than 4300 digits
        lineno, colno = _line_col(text, _first_failing_prefix(text, ValueError))
        problem = "integer has too many digits" if "integer string conversion" in str(exc) else f"invalid value: {exc}"
    where = f"line {lineno}, column {colno}: " if lineno else ""
    raise ConfigError([ConfigIssue("", f"{where}TOML syntax error: {problem}")], source) from None


def _line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of the character at ``offset`` (``len(text)``: just past the end)."""
    offset = max(0, min(offset, len(text)))
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _first_failing_prefix(text: str, kind: type[BaseException]) -> int:
    """The offset of the character at which parsing starts failing with ``kind`` (a bisection over prefixes:
    tomllib parses left to right, so every prefix reaching the problem fails the same way)."""

    def fails(n: int) -> bool:
        try:
            tomllib.loads(text[:n])
        except tomllib.TOMLDecodeError:
            return False
        except kind:
            return True
        except Exception:
            return False
        return False

    lo, hi = 0, len(text)  # text[:lo] does not fail with kind, text[:hi] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi - 1


def read_toml_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and parse a TOML file; a missing or unreadable file, or an empty path, is a :class:`ConfigError`."""
    if not os.fspath(path):  # Path("") is ".", a directory: say what was given
        raise ConfigError([ConfigIssue("FILE", 'the pipeline file argument is empty (""): give the path of a '
                                               "pipeline TOML file")])
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", str(path)) from None
    return parse_toml(raw, str(path))


def structure_pipeline(data: dict[str, Any], components: Any, source: str | None = None) -> PipelineConfig:
    """Structure parsed TOML data into a :class:`PipelineConfig`, resolving components with ``components``."""
    try:
        return structure(make_converter(components), data, PipelineConfig)
    except ConfigError as exc:
        raise exc.with_source(source) if source else exc from None


#: Set (``1``, ``true``, ``yes``, ``on``) to refuse a pipeline's own ``plugins = [...]`` instead of importing them.
ENV_NO_PIPELINE_PLUGINS = "FLEXKIT_NO_PIPELINE_PLUGINS"


def pipeline_plugins_refused() -> bool:
    """Whether :data:`ENV_NO_PIPELINE_PLUGINS` (the CLI's ``--no-pipeline-plugins``) is set."""
    return os.environ.get(ENV_NO_PIPELINE_PLUGINS, "").strip().lower() in ("1", "true", "yes", "on")


def local_plugin_specs(data: dict[str, Any], source: str | None = None) -> tuple[str, ...]:
    """The ``plugins`` list of a parsed pipeline, checked (it is needed before the rest can be read).

    Under :data:`ENV_NO_PIPELINE_PLUGINS` a non-empty list is refused before anything is imported, so an
    untrusted pipeline file can be validated or previewed without running code it names.
    """
    plugins = data.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) and p for p in plugins):
        raise ConfigError([ConfigIssue("plugins", "expected an array of module names or .py paths")], source)
    if plugins and pipeline_plugins_refused():
        named = ", ".join(repr(p) for p in plugins)
        raise ConfigError([ConfigIssue("plugins", (
            f"not imported: {ENV_NO_PIPELINE_PLUGINS} is set (--no-pipeline-plugins), and this pipeline names "
            f"its own plugins ({named}), which would run their code; read that code, then load the pipeline "
            "without the switch, or pass the plugins you trust with --plugin"))], source)
    return tuple(plugins)
