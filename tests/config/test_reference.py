"""The component reference (docs/components.md): generated from the config classes, committed, in sync."""

from __future__ import annotations

import pytest

from flexkit.config._components import STAGES
from flexkit.config.reference import (
    COMMITTED_DISTRIBUTIONS,
    REFERENCE_PATH,
    REGENERATE_COMMAND,
    main,
    reference_markdown,
)
from flexkit.plugins._manager import get_plugins
from tests.fixtures import ROOT


def core_reference() -> str:
    """The committed reference: flexkit's components and the embedded trainer's (skipped without it)."""
    pytest.importorskip("flexkit_toyrl")
    return reference_markdown(get_plugins(), lambda c: c.distribution in COMMITTED_DISTRIBUTIONS)


def test_committed_reference_is_up_to_date() -> None:
    assert (ROOT / REFERENCE_PATH).read_text(encoding="utf-8") == core_reference(), (
        f"{REFERENCE_PATH} is out of date; regenerate with: {REGENERATE_COMMAND}"
    )


def test_every_builtin_and_every_key_is_in_it() -> None:
    text, host = core_reference(), get_plugins()
    assert "\n### `toyrl`\n" in text and "\n### `arithmetic`\n" in text  # the embedded trainer's components
    for stage in STAGES:
        for name in host.names(stage):
            component = host.component(stage, name)
            if component.distribution not in COMMITTED_DISTRIBUTIONS:
                continue
            section = text.split(f"\n### `{name}`\n", 1)[1].split("\n### ", 1)[0]
            for key in component.config_cls.__attrs_attrs__:
                assert f"| `{key.alias}` |" in section, (stage, name, key.alias)


def test_difficulty_based_default_target_is_called_out() -> None:
    text = core_reference()
    assert "`difficulty_based` defaults to `target_reward = 1.0`" in text
    assert "| `target_reward` | float | 1.0 | >= 0, <= 1 |" in text and "most users want 0.5" in text


def test_check_mode(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "components.md"
    stale.write_text("old\n", encoding="utf-8")
    assert main(["--check", str(stale)]) == 1
    assert REGENERATE_COMMAND in capsys.readouterr().err
    assert main(["--output", str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
