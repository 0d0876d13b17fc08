"""Every code block of README.md and docs/ runs (Python), validates (TOML) or runs as a command (bash), page by
page in a temporary folder, so no file lands in the repository (see :mod:`tests.docs.doc_examples`)."""

from __future__ import annotations

import shutil
import unittest
from pathlib import Path

import pytest

pytest.importorskip("sybil", reason="the docs tests need Sybil (the test extra: pip install -e '.[test]')")

from sybil import Document

from tests.docs.doc_examples import CHECKED_LANGUAGES, SHOWN_LANGUAGES, block_languages, parsers
from tests.fixtures import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _repository_listing() -> set[str]:
    """What a page's blocks could leave behind in the repository: the top level and ``examples/``."""
    return {p.name for p in ROOT.iterdir()} | {str(p) for p in (ROOT / "examples").rglob("*")}


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    before = _repository_listing()
    document = Document.parse(str(page), *parsers())
    ran, skipped = 0, []
    for example in document:
        try:
            example.evaluate()
        except (unittest.SkipTest, pytest.skip.Exception) as exc:
            skipped.append(f"line {example.line}: {exc}")
            continue
        ran += 1
    assert _repository_listing() == before, "a block wrote into the repository instead of the current folder"
    if skipped and not ran:
        pytest.skip("; ".join(skipped))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_block_has_a_known_language(page: Path) -> None:
    """A block is run or checked (python, toml, bash, sh), or shown only (text, or no language)."""
    unknown = [(line, lang) for line, lang in block_languages(page) if lang not in CHECKED_LANGUAGES + SHOWN_LANGUAGES]
    assert not unknown, f"{_page_id(page)}: blocks in a language the docs tests do not know: {unknown}"
