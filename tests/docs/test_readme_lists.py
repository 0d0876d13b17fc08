"""The README's component table and command table match the registry and the parser."""

from __future__ import annotations

import pytest

from tests.docs.readme_lists import BEGIN, components_table, current_block, subcommands
from tests.fixtures import ROOT

README = ROOT / "README.md"


def test_the_component_table_is_generated_from_the_registry() -> None:
    pytest.importorskip("flexkit_toyrl", reason="the table lists the embedded trainer's components")
    pytest.importorskip("flexkit_trl", reason="the table lists the trl trainer (flexkit-rft-trl)")
    block = current_block(README.read_text(encoding="utf-8"))
    assert block == components_table(), "README.md's component table is out of date: python -m tests.docs.readme_lists"


def test_every_registered_first_party_component_is_in_the_table() -> None:
    table = components_table()
    for name in ("group_reward_range", "zero_variance_filter", "difficulty_based", "pass_rate_calculator", "file",
                 "simulator"):
        assert f"`{name}`" in table
    assert "`reverse`" not in table  # the example plugin is a template, not a feature
    assert table.startswith(BEGIN)


def test_every_command_is_in_the_command_table() -> None:
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## Command line"):]
    table = table[:table.index("\n\n", table.index("| command |"))]
    rows = [line for line in table.splitlines() if line.startswith("| `flexkit ")]
    documented = {row.split("`flexkit ", 1)[1].split()[0].rstrip("`") for row in rows}
    missing = set(subcommands()) - documented
    assert not missing, f"README.md's command table lacks: {', '.join(sorted(missing))}"
    assert "annotate" in subcommands()
