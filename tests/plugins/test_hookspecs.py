"""Meta-tests: every hook is documented, prefixed, keyword-only in use, and exercised by some test."""

from __future__ import annotations

import inspect

import pytest

from flexkit.plugins import _hookspecs as hookspecs
from flexkit.plugins._manager import REGISTER_HOOKS
from tests.fixtures import ROOT


def hook_names() -> list[str]:
    return [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
            if getattr(fn, "flexkit_spec", None) is not None]


def test_there_are_hooks_for_every_stage() -> None:
    assert set(REGISTER_HOOKS.values()) <= set(hook_names())
    assert {"flexkit_register_selectors", "flexkit_register_scorers", "flexkit_register_actuators",
            "flexkit_register_feedback"} <= set(hook_names())


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_documented_and_prefixed(name: str) -> None:
    fn = getattr(hookspecs, name)
    assert name.startswith("flexkit_")
    doc = inspect.getdoc(fn) or ""
    assert len(doc.split()) >= 8, f"{name} needs a real docstring"


@pytest.mark.parametrize("name", hook_names())
def test_hook_is_exercised_by_a_test(name: str) -> None:
    files = [*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "plugins").glob("*/tests/**/test_*.py")]
    sources = [p.read_text(encoding="utf-8") for p in files if p.name != "test_hookspecs.py"]
    assert any(name in text for text in sources), f"no test mentions {name}"
