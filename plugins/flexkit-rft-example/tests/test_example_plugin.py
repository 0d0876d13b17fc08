"""The example third-party distribution (plugins/flexkit-rft-example), installed by the README's test command,
is discovered through its entry point and usable by name in a pipeline TOML."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexkit import load_pipeline

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _installed() -> None:
    try:
        importlib.metadata.distribution("flexkit-rft-example")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("plugins/flexkit-rft-example is not installed; use the README's test command")


def test_listed_by_flexkit_plugins() -> None:
    out = subprocess.run([sys.executable, "-m", "flexkit", "plugins", "--json"], check=True, capture_output=True,
                         text=True).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    row = rows["reverse"]
    assert (row["stage"], row["plugin"], row["distribution"], row["version"]) == (
        "selector", "example", "flexkit-rft-example", "0.1.0")


def test_used_by_name_in_a_pipeline(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("".join(f'{{"i": {i}}}\n' for i in range(5)))
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 3\nprefetch = false\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\n'
                    '[tasksets.selector]\ntype = "reverse"\nskip = 1\n')
    sched = load_pipeline(path).scheduler
    assert [t.index for t in sched.read()] == [3, 2, 1]
    path.write_text(path.read_text().replace("skip = 1", "skip = -1"))
    with pytest.raises(Exception, match=r"tasksets\[0\].selector.skip: must be >= 0, got -1"):
        load_pipeline(path)


#: How docs/plugins.md's distribution (flexkit-countdown) renames the shipped one, so that both can be installed.
DOC_NAMES = {"reverse": "countdown", "Reverse": "Countdown", "Register the example's": "Register the plugin's"}


def test_docs_example_matches_the_shipped_plugin() -> None:
    """docs/plugins.md's module is the shipped plugin's under other names, so copying it verbatim works, and
    registering ``countdown`` it does not conflict with this distribution's ``reverse``."""
    doc = (ROOT / "docs" / "plugins.md").read_text()
    shipped = (ROOT / "plugins" / "flexkit-rft-example" / "flexkit_example" / "__init__.py").read_text()
    body = shipped.split("\n", 1)[1]  # the module docstring names the package differently
    for old, new in DOC_NAMES.items():
        body = body.replace(old, new)
    assert body in doc
