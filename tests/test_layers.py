"""The layers of docs/architecture.md, enforced: every import between flexkit's own modules (module level and
inside functions, type-checking imports included) goes from a layer to one it may use.

The table below is the written layering in data form: each file or folder of ``flexkit/`` belongs to one layer
(the longest matching entry wins), a layer may import its own modules, the base, and the layers in
:data:`MAY_IMPORT`. A new module must be placed in :data:`LAYERS` (and named in docs/architecture.md).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flexkit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: Each layer's files and folders (relative to flexkit/; a folder ends with "/").
LAYERS: dict[str, tuple[str, ...]] = {
    "face": ("__init__.py", "__main__.py", "cli/", "plot/", "testing/", "config/reference.py"),
    "study": ("compare/",),
    "run": ("run/", "annotate/"),
    "scale": ("distributed/", "integrations/", "host.py"),
    "pipeline": ("pipeline/",),
    "scheduler": ("scheduler/", "tasksets/"),
    "selectors": ("selectors/",),
    "sample": ("sample/",),
    "plugins": ("plugins/",),
    "config": ("config/",),
    "base": ("errors.py", "_log.py", "_files.py", "_lazy.py", "_version.py", "_estimators.py", "_state_problems.py",
             "_metric_names.py"),
}

#: The layers each layer may import besides its own and the base. Not transitive: each allowed pair is written.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "face": frozenset({"study", "run", "scale", "pipeline", "scheduler", "selectors", "sample", "plugins",
                       "config"}),
    "study": frozenset({"run", "pipeline", "scheduler", "sample", "plugins", "config"}),
    "run": frozenset({"pipeline", "scheduler", "selectors", "sample", "plugins", "config"}),
    "scale": frozenset({"pipeline", "scheduler", "selectors", "sample", "plugins", "config"}),
    "pipeline": frozenset({"scheduler", "selectors", "sample", "plugins", "config"}),
    "scheduler": frozenset({"selectors", "plugins", "config"}),
    "selectors": frozenset({"plugins", "config"}),
    "sample": frozenset({"plugins", "config"}),
    "plugins": frozenset({"config"}),
    "config": frozenset(),
    "base": frozenset(),
}

#: Imports against the table that are known and kept, each with its reason (importer file, imported module).
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("compare/_run.py", "flexkit.plot._figures"): "compare draws each run's plots with flexkit plot's own code",
    ("integrations/_host_metrics.py", "flexkit.run._estimates"):
        "host adapters report the selectors' estimates as flexkit run does",
}

#: Pairs that must never appear, whatever the tables above say (a guard against loosening them by mistake).
NEVER: tuple[tuple[str, str, str], ...] = (
    ("selectors", "run", "a selector knows nothing of the run"),
    ("selectors", "pipeline", "a selector knows nothing of the pipeline"),
    ("selectors", "face", "no command line in the selection math"),
    ("sample", "scheduler", "the mix reaches the scheduler through the pipeline"),
    ("scheduler", "sample", "the task level does not know the sample level"),
    ("config", "face", "the config knows no command line"),
    ("pipeline", "run", "the pipeline does not know the step loop"),
    ("base", "pipeline", "the base knows nothing above it"),
    ("base", "run", "the base knows nothing above it"),
)

#: Top-level packages of the first-party plugin distributions (plugins/*): the core never imports them.
FIRST_PARTY = tuple(sorted(p.name for d in (ROOT / "plugins").glob("*/") for p in d.glob("flexkit_*/")))


def _files() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def layer_of(rel: str) -> str | None:
    """The layer of a file path relative to flexkit/ (the longest matching entry of :data:`LAYERS`)."""
    best: tuple[int, str] | None = None
    for layer, entries in LAYERS.items():
        for entry in entries:
            matches = rel == entry or (entry.endswith("/") and rel.startswith(entry))
            if matches and (best is None or len(entry) > best[0]):
                best = (len(entry), layer)
    return None if best is None else best[1]


def module_file(module: str) -> str:
    """The file (relative to flexkit/) that an imported ``flexkit...`` module name resolves to."""
    rel = Path(*module.split(".")[1:])
    if (PACKAGE / rel).is_dir():
        return str(rel / "__init__.py")
    if (PACKAGE / rel.with_suffix(".py")).is_file():
        return str(rel.with_suffix(".py"))
    return module_file(module.rpartition(".")[0])  # a name imported from a module: its module


@cache
def imports_of(rel: str) -> tuple[str, ...]:
    """Every ``flexkit...`` module ``flexkit/<rel>`` imports, anywhere in the file (relative imports resolved)."""
    tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
    here = ["flexkit", *Path(rel).with_suffix("").parts]
    package = here[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                found.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                found.append(node.module)
    return tuple(sorted({m for m in found if m == "flexkit" or m.startswith(("flexkit.", *FIRST_PARTY))}))


def test_every_module_is_placed_in_one_layer() -> None:
    unplaced = [rel for rel in _files() if layer_of(rel) is None]
    assert not unplaced, f"place these modules in a layer of LAYERS (and docs/architecture.md): {unplaced}"


def test_the_tables_agree_with_the_never_rules() -> None:
    assert set(MAY_IMPORT) == set(LAYERS)
    for importer, imported, why in NEVER:
        assert imported not in MAY_IMPORT[importer], f"{importer} -> {imported} is allowed, but {why}"


def _violations() -> list[str]:
    problems = []
    for rel in _files():
        mine = layer_of(rel)
        assert mine is not None
        for module in imports_of(rel):
            if module.startswith(FIRST_PARTY):
                problems.append(f"flexkit/{rel} imports {module}: the core never imports a plugin distribution")
                continue
            theirs = layer_of(module_file(module))
            if theirs in (mine, "base") or theirs in MAY_IMPORT[mine] or (rel, module) in EXCEPTIONS:
                continue
            problems.append(f"flexkit/{rel} ({mine}) imports {module} ({theirs})")
    return problems


def test_every_import_follows_the_layers() -> None:
    problems = _violations()
    assert not problems, "imports across the layers of docs/architecture.md:\n" + "\n".join(problems)


def test_every_exception_is_still_needed() -> None:
    stale = [pair for pair in EXCEPTIONS if pair[1] not in imports_of(pair[0])]
    assert not stale, f"these exceptions no longer happen; remove them: {stale}"


@pytest.mark.parametrize(("importer", "module"), [("pipeline/_pipeline.py", "flexkit.run._dynamic_sampling"),
                                                  ("pipeline/_pipeline.py", "flexkit.run._runner")])
def test_the_pipeline_does_not_import_the_step_loop(importer: str, module: str) -> None:
    assert module not in imports_of(importer)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The scanner itself: an import inside a function, and a relative one, are found and placed."""
    assert "flexkit.config._overrides" in imports_of("pipeline/_pipeline.py")  # imported inside pipeline_from_dict
    assert layer_of(module_file("flexkit.config._overrides")) == "config"
    assert layer_of(module_file("flexkit.selectors._base.Selector")) == "selectors"
    assert layer_of("config/reference.py") == "face" and layer_of("config/_models.py") == "config"


def test_docs_architecture_names_every_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    entries = sorted({entry for entries in LAYERS.values() for entry in entries} - {"__main__.py"})
    missing = [entry for entry in entries if entry not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def _module_graph(package_dir: Path) -> dict[str, set[str]]:
    """Each module file of the package at ``package_dir`` → the module files of that package it imports (anywhere
    in the file, type-only imports included; a package's ``__init__`` counts as the package)."""
    name = package_dir.name

    def resolve(module: str) -> str | None:
        rel = Path(*module.split(".")[1:])
        if (package_dir / rel).is_dir():
            return str(rel / "__init__.py")
        if (package_dir / rel.with_suffix(".py")).is_file():
            return str(rel.with_suffix(".py"))
        return None if "." not in module else resolve(module.rpartition(".")[0])

    graph: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = str(path.relative_to(package_dir))
        here = [name, *Path(rel).with_suffix("").parts]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level]) if node.level else ""
                module = ".".join(p for p in (base, node.module or "") if p)
                names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for module in names:
                if module == name or module.startswith(name + "."):
                    target = resolve(module)
                    if target is not None and target != rel and not target.endswith("__init__.py"):
                        found.add(target)
        graph[rel] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (one path per strongly connected component of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


PACKAGES = [PACKAGE, *sorted(p for d in (ROOT / "plugins").glob("*/") for p in d.glob("flexkit_*/"))]


@pytest.mark.parametrize("package_dir", PACKAGES, ids=lambda p: p.name)
def test_no_import_circles(package_dir: Path) -> None:
    """No module of flexkit or of a first-party plugin reaches itself through imports (type-only ones included;
    package ``__init__`` re-exports aside)."""
    assert not _cycles(_module_graph(package_dir))


def test_the_circle_finder_finds_a_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "flexkit_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flexkit_demo.b import B\n")
    (pkg / "b.py").write_text("from flexkit_demo import a\n")
    (pkg / "c.py").write_text("from .a import x\n")
    assert _cycles(_module_graph(pkg)) == [["a.py", "b.py"]]
