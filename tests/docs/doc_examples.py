"""Running the code blocks of the Markdown docs, with Sybil (https://sybil.readthedocs.io).

Each page is one Sybil document; its blocks run in order, in a temporary folder that holds a copy of
``examples/``, sharing one Python namespace:

- ``python`` blocks run (Sybil's Python evaluator). A block importing an optional package that is not installed
  (verl, TRL, Ray, torchdata, ...) is skipped;
- ``toml`` blocks are parsed; pipeline tables are validated by flexkit's loader (:func:`check_toml`);
- ``yaml`` blocks are parsed (host configs such as Trinity-RFT's; a page's python blocks may load them further);
- ``bash`` / ``sh`` blocks run in ``bash`` when every command is a quick one (:data:`RUNNABLE`: ``flexkit
  validate``, ``preview``, a short ``flexkit run``, ...). A block of ``pip install`` commands only is checked
  instead of run (:func:`check_install`: every local path exists, every ``git+`` URL is this repository's and
  names the project in its ``#subdirectory``, every pinned version is the installed one).
  Anything else (comparisons, long runs) must be marked ``<!-- skip: next "why" -->`` on the line before the
  block;
- ``text`` and unlabelled blocks are output and diagrams: not run.

A block whose first line is a comment naming a file (``# my_selector.py``, ``# pipeline.toml``,
``# flexkit-countdown/pyproject.toml``) is also written to that path, so later blocks of the page can use it.
Python files that define ``@hookimpl`` hooks are the page's plugins: whole pipelines without a ``plugins`` key
are validated with them loaded, as if their distribution were installed.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example, Region
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

#: Block languages that are run or checked, and those that are shown only (output, diagrams).
CHECKED_LANGUAGES = ("python", "toml", "yaml", "bash", "sh")
SHOWN_LANGUAGES = ("text", "")

#: Programs a bash block may run, and the quick ``flexkit`` subcommands (a short ``flexkit run`` on the simulator
#: too); ``python`` only as ``python -m flexkit...`` or on a script the page wrote. A block calling anything else
#: (installs, comparisons, long runs) must be marked as not run.
RUNNABLE = ("flexkit", "python", "python3", "cat", "ls", "head")
FLEXKIT_RUNNABLE = ("validate", "plugins", "schema", "preview", "run", "--version", "--help")

#: Packages some examples need that a minimal install lacks: their blocks are skipped without them.
OPTIONAL_MODULES = frozenset({
    "datasets", "flexkit_ray", "flexkit_toyrl", "flexkit_trinity", "flexkit_trl", "flexkit_verl", "hydra",
    "matplotlib", "omegaconf",
    "pyarrow", "ray", "torchdata", "transformers", "trinity", "trl", "verl",
})

#: Seconds a bash block may take.
BASH_TIMEOUT = 60

_FILE_HEADER = re.compile(r"\A#\s*(?:file:\s*)?([\w.-]+(?:/[\w.-]+)*\.(?:py|toml|yaml|jsonl|json|txt))\s*$", re.M)

#: Keys of a minimal pipeline, added around a TOML fragment so the loader can check it.
MINIMAL_RUN = {"batch_size": 4}
MINIMAL_TASKSET = {"name": "t", "storage_type": "simulated", "size": 64}
PIPELINE_KEYS = frozenset({"plugins", "run", "tasksets", "feedback", "sample", "replay", "trainer"})


def file_header(source: str) -> str | None:
    """The path a block's first line names (``# name.py``; after a ``#:schema`` line in a TOML file), or
    ``None``."""
    lines = source.lstrip("\n").split("\n", 2)
    first = lines[1] if lines[0].startswith("#:schema ") and len(lines) > 1 else lines[0]
    match = _FILE_HEADER.match(first)
    return match.group(1) if match else None


def write_block(source: str) -> Path | None:
    """Write ``source`` to the file its first line names (relative to the current folder); returns the path."""
    name = file_header(source)
    if name is None:
        return None
    path = Path(name)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"a doc block may only write inside its folder, not {name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source.lstrip("\n"), encoding="utf-8")
    return path


def page_plugins(namespace: dict[str, Any]) -> list[str]:
    """The plugin modules (``.py`` files with ``@hookimpl``) the page wrote so far, as absolute paths."""
    return list(namespace.setdefault("__doc_plugins__", []))


def _top_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def run_python(example: Example) -> None:
    """Write the block if it names a file, skip it when an optional package is missing (and every later Python
    block of the page, which may use its names), then run it."""
    source = str(example.parsed)
    missing = example.namespace.get("__doc_missing__")
    if missing:  # a later block of the page builds on the names an earlier, skipped one defines
        pytest.skip(f"an earlier block of the page needs {missing}")
    for module in sorted(_top_modules(source) & OPTIONAL_MODULES):
        try:
            pytest.importorskip(module, reason=f"the example needs {module}")
        except pytest.skip.Exception:
            example.namespace["__doc_missing__"] = module
            raise
    path = write_block(source)
    if path is not None and path.suffix == ".py" and "@hookimpl" in source:
        example.namespace.setdefault("__doc_plugins__", []).append(str(path.resolve()))
    PythonEvaluator()(example)


def as_pipeline(data: dict[str, Any]) -> dict[str, Any]:
    """A whole pipeline from a TOML fragment: a minimal ``[run]`` and taskset around what the fragment sets
    (``[tasksets.selector]`` alone configures the minimal taskset's selector)."""
    out = dict(data)
    out["run"] = {**MINIMAL_RUN, **data.get("run", {})}
    tasksets = data.get("tasksets")
    if tasksets is None:
        out["tasksets"] = [dict(MINIMAL_TASKSET)]
    elif isinstance(tasksets, dict):
        out["tasksets"] = [{**MINIMAL_TASKSET, **tasksets}]
    return out


def check_toml(example: Example) -> None:
    """Parse a TOML block; validate pipeline tables with flexkit's loader (a fragment inside a minimal pipeline).

    A ``pyproject.toml`` is only parsed. A whole pipeline written to a file is loaded from it (its
    ``plugins = [...]`` resolve against it); without a ``plugins`` key, the page's plugin modules are loaded.
    """
    from flexkit.config._loader import parse_toml
    from flexkit.pipeline._pipeline import load_pipeline, pipeline_from_dict

    source = str(example.parsed)
    data = parse_toml(source, source=f"{example.path}:{example.line}")
    path = write_block(source)
    if "build-system" in data or "project" in data or "tool" in data:
        return  # a distribution's pyproject.toml
    unknown = set(data) - PIPELINE_KEYS
    if unknown:
        raise AssertionError(f"{example.path}:{example.line}: a TOML block with keys {sorted(unknown)} is neither "
                             "a pipeline (fragment) nor a pyproject.toml")
    tasksets = data.get("tasksets")
    entries = tasksets if isinstance(tasksets, list) else [tasksets] if isinstance(tasksets, dict) else []
    if any(str(entry.get("path", "")).endswith(".parquet") for entry in entries if isinstance(entry, dict)):
        pytest.importorskip("pyarrow", reason="a Parquet taskset needs pyarrow")
    plugins = [] if "plugins" in data else page_plugins(example.namespace)
    whole = "run" in data and isinstance(data.get("tasksets"), list)
    if whole and path is not None:
        load_pipeline(path, plugins=plugins)
    else:
        pipeline_from_dict(data if whole else as_pipeline(data), base_dir=Path.cwd(), plugins=plugins)


def check_yaml(example: Example) -> None:
    """Parse a YAML block (write it when its first line names a file); skipped without PyYAML."""
    yaml = pytest.importorskip("yaml", reason="YAML blocks need PyYAML")
    source = str(example.parsed)
    yaml.safe_load(source)
    write_block(source)


def _commands(source: str) -> Iterable[list[str]]:
    """The words of each command of a bash block (continuation lines joined, comments and ``VAR=value``
    prefixes dropped)."""
    joined = re.sub(r"\\\n", " ", source)
    for line in joined.splitlines():
        command: list[str] = []
        for word in [*shlex.split(line, comments=True), ";"]:
            if word in ("&&", "||", "|", ";"):
                if command:
                    yield command
                command = []
            elif command or not re.match(r"^\w+=", word):
                command.append(word)


def _not_run(command: list[str]) -> str | None:
    """Why the docs tests refuse to run ``command`` (``None``: they run it)."""
    program = command[0]
    if program not in RUNNABLE:
        return f"{program!r}"
    if program in ("python", "python3"):  # a flexkit module, or a script the page wrote
        args = command[1:]
        if args[:1] == ["-m"] and len(args) > 1 and args[1].split(".")[0] == "flexkit":
            return None
        if args and args[0].endswith(".py") and Path(args[0]).is_file() and not Path(args[0]).is_absolute():
            return None
        return f"{' '.join(command[:3])!r}"
    if program == "flexkit":
        words = iter(command[1:])
        sub = ""
        for word in words:
            if word == "--log-format":
                next(words, None)
            elif word not in ("-v", "-vv") and not word.startswith("--log-format="):
                sub = word
                break
        if sub not in FLEXKIT_RUNNABLE:
            return f"'flexkit {sub}'"
    return None


def _is_install(command: list[str]) -> bool:
    """``pip install ...``, also through a venv's own pip (``.venv/bin/pip install ...``)."""
    return len(command) > 1 and (command[0] == "pip" or command[0].endswith("/bin/pip")) and command[1] == "install"


#: ``pip install`` options whose value is the next word (an index, a links folder, a file), not a requirement.
PIP_OPTIONS_WITH_VALUE = frozenset({"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c",
                                    "--constraint", "-r", "--requirement"})


def _check_url_requirement(word: str, where: str) -> None:
    """``NAME @ git+URL[#subdirectory=FOLDER]``: URL is the core's ``[project.urls] Source`` and FOLDER (default: the
    top) is the distribution of this repository named NAME."""
    from tests.distribution_names import normalize, our_distributions, requirement_name
    from tests.fixtures import ROOT

    name = requirement_name(word)
    assert name in our_distributions(), f"{where}: {word!r} does not name a distribution of this repository"
    source = re.search(r'^Source = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert source and f"@ git+{source.group(1)}" in word, f"{where}: {word!r} is not this repository's Source URL"
    subdirectory = re.search(r"#subdirectory=([^&\s]+)", word)
    pyproject = ROOT / (subdirectory.group(1) if subdirectory else "") / "pyproject.toml"
    assert pyproject.is_file(), f"{where}: {word!r}: no distribution of this repository in that folder"
    declared = re.search(r'^name = "([^"]+)"', pyproject.read_text(encoding="utf-8"), re.M)
    assert declared and normalize(declared.group(1)) == name, f"{where}: {word!r}: that folder's project is another"


def check_install(example: Example, commands: list[list[str]]) -> None:
    """Check a block of ``pip install`` commands without running it: each ``-e PATH`` (or local path) is a
    folder of this repository with a ``pyproject.toml``, each ``NAME @ git+URL#subdirectory=FOLDER`` names the
    project in that folder, and each ``name==version`` pin is the version installed here (pins of packages not
    installed are skipped). Option values (``--index-url URL``) are no requirements."""
    from importlib import metadata

    from tests.distribution_names import check_requirement
    from tests.fixtures import ROOT

    where = f"{example.path}:{example.line}"
    for command in commands:
        editable = option_value = False
        for word in command[2:]:
            if option_value:
                option_value = False
                continue
            if word.startswith("-"):
                editable = word in ("-e", "--editable")
                option_value = word in PIP_OPTIONS_WITH_VALUE
                continue
            target = re.sub(r"\[.*\]$", "", word)
            if not editable:
                check_requirement(word, where)
            editable = False
            if "://" in word:
                _check_url_requirement(word, where)
            elif target.startswith((".", "plugins/")) or "/" in target:
                folder = ROOT / target
                assert (folder / "pyproject.toml").is_file(), (
                    f"{where}: 'pip install' names {word!r}, not a distribution of this repository")
            elif "==" in target:
                name, version = target.split("==", 1)
                try:
                    installed = metadata.version(name)
                except metadata.PackageNotFoundError:
                    continue
                if "+" not in version:  # ==2.13.0 matches 2.13.0+cpu (PEP 440: the local label is ignored)
                    installed = installed.split("+", 1)[0]
                assert installed == version, f"{where}: the page pins {name}=={version}, tested here with {installed}"


def run_bash(example: Example) -> None:
    """Run a bash block in ``bash -e`` with this Python's scripts first on ``PATH``; only :data:`RUNNABLE`
    programs are allowed (mark other blocks as not run, with the reason). A block of ``pip install`` commands
    only (``python3 -m venv`` and a venv's ``.venv/bin/pip`` included) is checked by :func:`check_install`
    instead."""
    source = str(example.parsed)
    commands = list(_commands(source))
    if commands and all(_is_install(c) or c[:3] == ["python3", "-m", "venv"] for c in commands) and any(
            _is_install(c) for c in commands):
        check_install(example, [c for c in commands if _is_install(c)])
        return
    for command in commands:
        refused = _not_run(command)
        if refused:
            raise AssertionError(
                f"{example.path}:{example.line}: the docs tests do not run {refused}; run only {', '.join(RUNNABLE)} "
                f"commands (flexkit: {', '.join(FLEXKIT_RUNNABLE)}) in a block, or mark it "
                "<!-- skip: next \"why it is not run\" -->")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    try:
        done = subprocess.run(["bash", "-e", "-c", source], env=env, capture_output=True, text=True,
                              timeout=BASH_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{example.path}:{example.line}: the block ran longer than {BASH_TIMEOUT} s; shorten it "
                             "or mark it <!-- skip: next \"why it is not run\" -->") from None
    if done.returncode != 0:
        raise AssertionError(f"{example.path}:{example.line}: bash block failed (exit {done.returncode})\n"
                             f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")


class ReasonedSkipParser(SkipParser):
    """Sybil's ``<!-- skip: next "reason" -->``, refusing a skip without a reason (say why a block is not run)."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            action, reason = region.parsed
            if action in ("next", "start") and not (reason or "").strip():
                raise ValueError(f"{document.path}, {document.line_column(region.start)}: 'skip: {action}' needs a "
                                 "reason, e.g. <!-- skip: next \"a full training run (minutes)\" -->")
            yield region


def parsers() -> list[Any]:
    """The Sybil parsers of the docs."""
    return [
        CodeBlockParser("python", run_python),
        CodeBlockParser("toml", check_toml),
        CodeBlockParser("yaml", check_yaml),
        CodeBlockParser("bash", run_bash),
        CodeBlockParser("sh", run_bash),
        ReasonedSkipParser(),
    ]


def block_languages(path: Path) -> list[tuple[int, str]]:
    """``(line, language)`` of every fenced block of a Markdown file."""
    document = Document(path.read_text(encoding="utf-8"), str(path))
    lexer = FencedCodeBlockLexer(language=r"[\w+-]*")
    return [(document.text.count("\n", 0, region.start) + 1, region.lexemes["language"]) for region in lexer(document)]
