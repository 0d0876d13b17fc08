"""The API line: the first-party plugins (plugins/*/, their tests included) and the plugin and integration guides
use only the names ``flexkit`` exports (``flexkit.__all__``) and the public subpackages (:data:`PUBLIC`); and
``import flexkit`` stays light (no torch, no built-in component module)."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexkit

ROOT = Path(__file__).resolve().parent.parent
#: Subpackages a plugin may import from, besides ``flexkit`` itself (each lists its names in ``__all__``).
PUBLIC: tuple[str, ...] = ("flexkit.distributed", "flexkit.errors", "flexkit.host", "flexkit.testing",
                          "flexkit.testing.distributed")
#: Plugin files that may import this repository's ``tests`` package, and why.
USES_REPOSITORY_TESTS: dict[str, str] = {
    "flexkit-rft-trinity/tests/test_trinity_docs.py": "runs this repository's docs page docs/integrations/trinity.md "
    "with the docs harness of tests/docs (in the Trinity-RFT environment, which the main one cannot host)",
}
#: Guides whose code and prose name flexkit's objects.
GUIDES = sorted([*(ROOT / "docs" / "plugins").glob("*.md"), *(ROOT / "docs" / "integrations").glob("*.md"),
                 ROOT / "docs" / "plugins.md"])


def exported(module: str) -> set[str]:
    """The public names of ``module`` (``flexkit`` or one of :data:`PUBLIC`)."""
    return set(importlib.import_module(module).__all__)


def outside_the_line(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for each use of a flexkit name that is not on the API line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "flexkit" or node.module.startswith("flexkit.")):
            if node.module not in ("flexkit", *PUBLIC):
                yield node.lineno, f"from {node.module} import ..."
                continue
            for alias in node.names:
                if alias.name not in exported(node.module):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("flexkit.") and alias.name not in PUBLIC:
                    yield node.lineno, f"import {alias.name}"
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "flexkit"
              and node.attr not in exported("flexkit") and f"flexkit.{node.attr}" not in PUBLIC):
            yield node.lineno, f"flexkit.{node.attr}"


def plugin_files() -> list[Path]:
    return sorted(p for p in (ROOT / "plugins").glob("*/**/*.py") if "build" not in p.parts)


def test_the_line_is_whole_and_each_name_resolves() -> None:
    assert sorted(set(flexkit.__all__)) == sorted(flexkit.__all__), "a name is listed twice"
    for module in ("flexkit", *PUBLIC):
        package = importlib.import_module(module)
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{module}.{name}"
    for name in ("Trainer", "Rollout", "Scorer", "Actuator", "field", "Register", "InMemoryTaskset", "ComponentError",
                 "StateError", "pipeline_metrics", "load_pipeline", "split_arrays", "join_arrays", "policy_loss"):
        assert name in flexkit.__all__, name


@pytest.mark.parametrize("path", plugin_files(), ids=lambda p: str(p.relative_to(ROOT / "plugins")))
def test_first_party_plugins_use_only_the_api_line(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [f"line {line}: {what}" for line, what in outside_the_line(tree)]
    assert not found, f"{path.relative_to(ROOT)} reaches past flexkit's API line: {found}"


@pytest.mark.parametrize("path", plugin_files(), ids=lambda p: str(p.relative_to(ROOT / "plugins")))
def test_plugin_tests_do_not_import_this_repositorys_tests(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    if str(path.relative_to(ROOT / "plugins")) in USES_REPOSITORY_TESTS:
        return
    assert not [m for m in modules if m == "tests" or m.startswith("tests.")], "use flexkit.testing instead"


def python_blocks(text: str) -> Iterator[str]:
    yield from re.findall(r"^```python[^\n]*\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_guides_use_only_the_api_line(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = []
    for block in python_blocks(text):
        try:
            tree = ast.parse(block)
        except SyntaxError:  # a fragment; its import lines still count
            tree = ast.parse("\n".join(line for line in block.splitlines() if line.startswith(("from ", "import "))))
        found += [what for _, what in outside_the_line(tree)]
    for dotted in re.findall(r"`(flexkit(?:\.[A-Za-z_]+)+)", text):  # prose: `flexkit.x.y(...)`
        head = dotted.split(".")[1]
        if not head.startswith("__") and head not in exported("flexkit") and f"flexkit.{head}" not in PUBLIC:
            found.append(dotted)
    assert not found, f"{path.relative_to(ROOT)} names flexkit objects past the API line: {found}"


def test_import_flexkit_loads_neither_torch_nor_a_component_module() -> None:
    code = "import json, sys, flexkit; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    loaded = json.loads(out.stdout)
    assert "torch" not in loaded
    assert not [m for m in loaded if m.startswith(("flexkit.sample.actuators.", "flexkit.sample.scorers.",
                                                   "flexkit.integrations", "flexkit.testing", "flexkit.run._runner"))]
    code = "import json, sys, flexkit.testing; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    assert not {"torch", "pytest"} & set(json.loads(out.stdout))


#: Dotted names in the plugins' text that are not flexkit modules: verl's Hydra keys (``+flexkit.pipeline=...``)
#: and the entry-point group ``flexkit.hosts``.
NOT_MODULES = ("flexkit.pipeline=", "flexkit.plugins=", "flexkit.base_dir", "flexkit.hosts", "flexkit.set")


def past_the_line_in_text(text: str) -> list[str]:
    """Dotted ``flexkit.x...`` names in ``text`` (docstrings, comments, messages) that reach past the API line:
    ``flexkit.<name>`` must be exported by ``flexkit`` or be a public module (:data:`PUBLIC`), whose next name must
    be one it exports."""
    found = []
    for match in re.finditer(r"(?<![\w.])flexkit(?:\.[A-Za-z_]\w*)+=?", text):
        dotted = match.group(0)
        if dotted.startswith(NOT_MODULES) or dotted.endswith(("=", ".py", ".toml", ".yaml", ".json")):
            continue
        parts = dotted.split(".")
        if parts[1].startswith("__") or parts[1] in exported("flexkit"):
            continue
        module = next((m for m in sorted(PUBLIC, key=len, reverse=True) if dotted == m or
                       dotted.startswith(m + ".")), None)
        if module is None:
            found.append(dotted)
            continue
        rest = dotted[len(module) + 1:].split(".")[0] if dotted != module else ""
        if rest and rest not in exported(module) and f"{module}.{rest}" not in PUBLIC:
            found.append(dotted)
    return found


@pytest.mark.parametrize("path", [p for p in plugin_files() if "tests" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT / "plugins")))
def test_the_plugins_text_sends_users_only_to_the_api_line(path: Path) -> None:
    """Docstrings, comments and error messages of the first-party plugins name only what users can import."""
    found = past_the_line_in_text(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} names flexkit objects past the API line: {found}"


def test_the_text_check_finds_an_internal_module() -> None:
    found = past_the_line_in_text("see flexkit.run._dynamic_sampling.fill_batch")
    assert found == ["flexkit.run._dynamic_sampling.fill_batch"]
    assert past_the_line_in_text("flexkit.fill_batch, flexkit.host.check_support, +flexkit.pipeline=x.toml") == []
