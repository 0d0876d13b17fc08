"""The examples of docs/integrations/dynamic-sampling.md run as written (in a temporary folder)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from tests.fixtures import ROOT

DOC = ROOT / "docs" / "integrations" / "dynamic-sampling.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_guide_has_a_trl_style_and_a_verl_style_loop() -> None:
    assert len(BLOCKS) == 2
    assert "fill_batch" in BLOCKS[0] and "DataProto.concat" in BLOCKS[1]


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=["trl-style", "verl-style"])
def test_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    if "from verl" in BLOCKS[index]:
        pytest.importorskip("verl")
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "example.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    runpy.run_path(str(script), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("step ") for line in lines)
    assert list(tmp_path.iterdir()) == [script]  # nothing else written
