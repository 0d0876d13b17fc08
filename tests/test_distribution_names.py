"""Every install line, install hint and declared dependency names a distribution of this repository.

The package index's ``flexkit`` is an unrelated project: installing ``flexkit[plot]`` by name would replace this
package with it. The import name stays ``flexkit``; the distributions are ``flexkit-rft`` and ``flexkit-rft-*``.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import flexkit
from tests.distribution_names import check_requirement, normalize, our_distributions, requirement_name
from tests.fixtures import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: ``pip install ...`` up to the end of the line, a backtick, a closing parenthesis, ``&&`` or a comment.
_INSTALL = re.compile(r"pip install ([^`\n)&;|#]*)")


def _tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    if not out:
        pytest.skip("not a git checkout")
    own = {"tests/test_distribution_names.py", "tests/distribution_names.py"}  # they quote bad lines on purpose
    return [p for p in out.splitlines() if p not in own and (
        p.endswith((".md", ".py", ".toml", ".sh", ".yaml", ".yml", ".txt")) or p.startswith(".ci/"))]


def test_the_core_distribution_is_flexkit_rft_and_plugins_share_its_prefix() -> None:
    assert flexkit.DISTRIBUTION == "flexkit-rft"
    assert "flexkit" not in our_distributions()
    assert all(name == "flexkit-rft" or name.startswith("flexkit-rft-") for name in our_distributions())
    assert len(our_distributions()) == 1 + len(list((ROOT / "plugins").glob("*/pyproject.toml")))


def test_plugin_folders_are_named_after_their_distributions() -> None:
    for project in (ROOT / "plugins").glob("*/pyproject.toml"):
        name = tomllib.loads(project.read_text(encoding="utf-8"))["project"]["name"]
        assert normalize(name) == project.parent.name


def test_declared_dependencies_name_our_distributions() -> None:
    for project in [ROOT / "pyproject.toml", *(ROOT / "plugins").glob("*/pyproject.toml")]:
        table = tomllib.loads(project.read_text(encoding="utf-8"))["project"]
        requirements = list(table.get("dependencies", []))
        for extra in table.get("optional-dependencies", {}).values():
            requirements += extra
        for requirement in requirements:
            check_requirement(requirement, str(project.relative_to(ROOT)))


def test_every_install_line_and_hint_names_our_distributions() -> None:
    checked = 0
    for path in _tracked_text_files():
        text = (ROOT / path).read_text(encoding="utf-8", errors="replace")
        for line_no, line in enumerate(text.splitlines(), 1):
            for match in _INSTALL.finditer(line):
                words = match.group(1).replace("\\", " ").split()
                editable = False
                for word in words:
                    if word.startswith("-"):
                        editable = word in ("-e", "--editable")
                        continue
                    if not editable and (name := requirement_name(word)) and name.startswith("flexkit"):
                        check_requirement(word, f"{path}:{line_no}")
                        checked += 1
                    editable = False
    assert checked >= 5  # the README, the docs and the error hints install extras by name


@pytest.mark.parametrize("line", ['pip install "flexkit[plot]"', "pip install flexkit", "pip install Flexkit==0.1",
                                  "pip install flexkit-verl"])
def test_the_check_refuses_distributions_that_are_not_ours(line: str) -> None:
    word = line.split()[-1]
    with pytest.raises(AssertionError, match="not one of this repository's"):
        check_requirement(word, "here")


def test_the_check_accepts_ours_and_other_projects() -> None:
    for word in ('"flexkit-rft[plot]"', "flexkit-rft-trl", "flexkit_rft_verl>=0.1", "numpy==2.0", "torch"):
        check_requirement(word, "here")
