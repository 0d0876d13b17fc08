"""The TRL guide installs as the README does (its own venv, the CPU torch pin) and its example writes only under
``runs/``."""

from __future__ import annotations

import ast
import re

from tests.fixtures import ROOT


def _torch_pin(text: str) -> str:
    pins = set(re.findall(r"pip install torch==([\w.+]+)", text))
    assert len(pins) == 1, pins
    return pins.pop()


def test_the_trl_guide_creates_its_venv_and_pins_the_readme_torch() -> None:
    guide = (ROOT / "docs" / "integrations" / "trl.md").read_text(encoding="utf-8")
    install = next(line for line in guide.splitlines() if "plugins/flexkit-rft-trl" in line and "pip install" in line)
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install torch==")
    assert _torch_pin(install) == _torch_pin((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_trl_example_writes_only_under_runs() -> None:
    for path in (ROOT / "examples" / "trl" / "train.py", ROOT / "docs" / "integrations" / "trl.md"):
        text = path.read_text(encoding="utf-8")
        source = text if path.suffix == ".py" else text.split("# examples/trl/train.py", 1)[1].split("```", 1)[0]
        calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
        dirs = [kw.value.value for call in calls for kw in call.keywords
                if kw.arg in ("output_dir", "logging_dir") and isinstance(kw.value, ast.Constant)]
        assert dirs and all(d.startswith("runs/") for d in dirs), (path, dirs)
