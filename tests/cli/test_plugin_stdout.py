"""A plugin that prints while it is imported or registers its components cannot corrupt machine-readable output:
what it prints goes to stderr while plugins load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flexkit.cli.main import main
from tests.fixtures import ROOT

NOISY = """\
print("noisy: imported")

from flexkit import hookimpl
from flexkit.scheduler.feedback import PassRateCalculator, PassRateConfig


class NoisyRate(PassRateCalculator):
    \"\"\"A feedback operator whose plugin prints.\"\"\"


@hookimpl
def flexkit_register_feedback(register):
    print("noisy: registering")
    register("noisy_rate", NoisyRate, PassRateConfig)
"""


@pytest.fixture
def noisy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "noisy.py").write_text(NOISY)
    return tmp_path / "noisy.py"


def _printed_to_stderr(err: str) -> bool:
    return "noisy: imported" in err and "noisy: registering" in err


def test_regression_plugins_json_stays_json(noisy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a plugin's print on import landed in ``flexkit plugins --json``'s stdout, which then did not
    parse."""
    assert main(["plugins", "--json", "--plugin", "noisy.py"]) == 0
    out, err = capsys.readouterr()
    assert "noisy_rate" in [row["name"] for row in json.loads(out)]
    assert _printed_to_stderr(err)


def test_regression_schema_stays_json(noisy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--plugin", "noisy.py"]) == 0
    out, err = capsys.readouterr()
    assert "noisy_rate" in json.dumps(json.loads(out))
    assert _printed_to_stderr(err)


def test_regression_preview_json_stays_json_lines(noisy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "examples" / "minimal.toml").read_text()
    pipeline = noisy.parent / "pipeline.toml"
    pipeline.write_text('plugins = ["./noisy.py"]\n' + text.replace('path = "', f'path = "{ROOT / "examples"}/'))
    assert main(["preview", str(pipeline), "--steps", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["step"] for line in out.splitlines()] == [0, 1]
    assert _printed_to_stderr(err)
