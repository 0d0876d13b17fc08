"""Internal modules say so by name, as pytest's (``_pytest``) and pluggy's (``_hooks.py``, ``_manager.py``) do.

Every module of ``flexkit/`` is a package (its ``__init__``), a public module (:data:`PUBLIC_MODULES`, the table
"The API line" of docs/architecture.md), a built-in component's module (docs/components.md names each, from the
tables of ``plugins/_builtin_table.py``), or private by name: a part of its dotted name starts with an underscore
(``flexkit.run._runner``). A new module is therefore internal unless it is added to that list and that table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.plugins import _builtin_table as table

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flexkit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: The public modules besides the packages and the built-in components' modules, each with what it is for.
PUBLIC_MODULES: dict[str, str] = {
    "flexkit.host": "what host adapters need (the second tier of the API line)",
    "flexkit.errors": "every error class, its one home",
    "flexkit.testing.distributed": "the contract kit's distributed helpers, imported by plugins' tests",
    "flexkit.plugins.builtins": "the plugin that registers the built-ins: the name `flexkit plugins` shows",
    "flexkit.cli.main": "the console script's target, flexkit.cli.main:main",
    "flexkit.config.reference": "a documented command, python -m flexkit.config.reference",
    "flexkit.sample.actuators.group_filter": "GroupFilter and GroupKeep, the group filters' base (plugin authors)",
    "flexkit.sample.actuators.taskset_mixer": "the bases of taskset mixers (plugin authors, docs/plugins/actuator.md)",
    "flexkit.selectors.difficulty_based.tuning": "difficulty_based's engine constants, set by users (THREADS)",
}


def modules() -> list[str]:
    """Every module of ``flexkit/`` by its dotted name (a package by its own name)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["flexkit", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def packages() -> set[str]:
    return {".".join(["flexkit", *p.parent.relative_to(PACKAGE).parts]) for p in PACKAGE.rglob("__init__.py")}


def component_modules() -> set[str]:
    """The module of each built-in component's factory and config class (docs/components.md names them)."""
    found = set()
    for entries in (table.SELECTORS, table.SCORERS, table.ACTUATORS, table.FEEDBACK, table.STORAGES, table.TRAINERS):
        for entry in entries:
            found.update(target.partition(":")[0] for target in (entry.factory, entry.config) if target)
    return found


def private_by_name(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_every_module_is_public_or_private_by_name() -> None:
    public = set(PUBLIC_MODULES) | component_modules() | packages()
    unmarked = [m for m in modules() if m not in public and not private_by_name(m)]
    assert not unmarked, ("give these modules a leading underscore (internal), or add them to PUBLIC_MODULES and to "
                          f"docs/architecture.md's table of public modules: {unmarked}")


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES) + sorted(component_modules()))
def test_each_public_module_exists_and_is_not_private(module: str) -> None:
    assert module in modules(), f"{module} is listed as public but is no module of flexkit/"
    assert not private_by_name(module), f"{module} is listed as public but is private by name"


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_docs_architecture_lists_each_public_module(module: str) -> None:
    assert f"`{module}" in ARCHITECTURE.read_text(encoding="utf-8"), f"docs/architecture.md does not name {module}"


def test_the_rule_finds_an_unmarked_module() -> None:
    assert private_by_name("flexkit.run._runner") and private_by_name("flexkit._metric_names")
    assert not private_by_name("flexkit.run.runner") and not private_by_name("flexkit.selectors.frontier")
    assert "flexkit.selectors.frontier" in component_modules() and "flexkit.run.simulator" in component_modules()
