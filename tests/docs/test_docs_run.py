"""Every code block of README.md and docs/ runs (Python), validates (TOML) or runs as a command (bash), page by
page in a temporary folder, so no file lands in the repository (see :mod:`tests.docs.doc_examples`)."""

from __future__ import annotations

import re
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


def _blocks(page: Path) -> list[tuple[int, str, str]]:
    """``(line, language, source)`` of every fenced block of ``page``."""
    from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

    document = Document(page.read_text(encoding="utf-8"), str(page))
    lexer = FencedCodeBlockLexer(language=r"[\w+-]*")
    return [(document.text.count("\n", 0, region.start) + 1, region.lexemes["language"], region.lexemes["source"])
            for region in lexer(document)]


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_blocks_naming_a_repository_example_are_that_file(page: Path) -> None:
    """A block whose first line names a file under ``examples/`` is that file, verbatim: the guide shows what the
    repository ships (and the docs tests run it)."""
    from tests.docs.doc_examples import file_header

    for line, _language, source in _blocks(page):
        name = file_header(source)
        if name is None or not name.startswith("examples/"):
            continue
        shipped = ROOT / name
        assert shipped.is_file(), f"{_page_id(page)}:{line} names {name}, which the repository does not have"
        assert source.lstrip("\n") == shipped.read_text(encoding="utf-8"), (
            f"{_page_id(page)}:{line} differs from {name}; copy the file into the page")


INTEGRATION_PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))


@pytest.mark.parametrize("page", INTEGRATION_PAGES, ids=_page_id)
def test_integration_guides_skip_only_blocks_a_named_test_runs(page: Path) -> None:
    """Every code block of an integration guide runs in the docs tests; a block they cannot run (a multi-GPU
    launch, a cluster) must say which test file exercises it instead, and that file must exist."""
    text = page.read_text(encoding="utf-8")
    for match in re.finditer(r'<!--\s*skip:\s*next\s+"([^"]*)"\s*-->', text):
        line = text.count("\n", 0, match.start()) + 1
        paths = re.findall(r"[\w./-]+/test_[\w]+\.py", match.group(1))
        assert paths, (f"{_page_id(page)}:{line}: a skipped block must name the test file that runs it "
                       f"(reason given: {match.group(1)!r})")
        for path in paths:
            assert (ROOT / path).is_file(), f"{_page_id(page)}:{line}: {path} does not exist"
