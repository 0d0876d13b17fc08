"""docs/integrations/trinity.md: every block runs in the Trinity-RFT environment (its python blocks are skipped
in the main environment, which has no trinity-rft)."""

from __future__ import annotations

import shutil
import unittest
from pathlib import Path

import pytest

pytest.importorskip("trinity", reason="the Trinity-RFT adapter's tests need trinity-rft (the test extra)")
pytest.importorskip("sybil", reason="the docs tests need Sybil")

import trinity_testkit  # noqa: F401  (keeps datasets offline)
from sybil import Document

from tests.docs.doc_examples import parsers

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"

PAGE = ROOT / "docs" / "integrations" / "trinity.md"


def test_every_block_of_the_trinity_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    ran, skipped = [], []
    for example in Document.parse(str(PAGE), *parsers()):
        try:
            example.evaluate()
        except (unittest.SkipTest, pytest.skip.Exception) as exc:
            skipped.append(str(exc))
            continue
        ran.append(example.line)
    # ran: the install block (checked, not run), the three yaml and two python blocks, and the skip marker; the
    # example is skipped (test_trinity_example.py runs it)
    assert len(ran) == 7
    assert skipped == ["needs trinity-rft; plugins/flexkit-rft-trinity/tests/test_trinity_example.py runs it"]
    out = capsys.readouterr().out
    assert "FlexkitSelector difficulty_based 300" in out
    assert "buffer.explorer_input.tasksets[0].data_selector.kwargs.tau: must be >= 0, got -1" in out
