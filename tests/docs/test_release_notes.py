"""The release notes: CHANGELOG.md in Keep a Changelog's form, its latest release the version the distributions
carry, RELEASING.md saying how the next one is cut, and ``.ci/wheels`` refusing a wheel of another version."""

from __future__ import annotations

import re

import flexkit
from tests.fixtures import ROOT

CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
#: The kinds of change Keep a Changelog 1.1.0 names, in its order.
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$")


def _sections() -> list[tuple[str, list[str]]]:
    """Each ``## `` heading with its lines, in order."""
    sections: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.splitlines():
        if line.startswith("## "):
            sections.append((line, []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def test_the_changelog_opens_with_unreleased_then_releases_newest_first() -> None:
    headings = [heading for heading, _lines in _sections()]
    assert headings[0] == "## [Unreleased]"
    releases = [RELEASE.match(heading) for heading in headings[1:]]
    assert all(releases), headings
    versions = [tuple(int(p) for p in m.group(1).split(".")) for m in releases if m]
    assert versions == sorted(versions, reverse=True)
    assert releases[0] is not None and releases[0].group(1) == flexkit.__version__  # the version the wheels carry


def test_every_section_groups_its_entries_by_kind_and_releases_stay_short() -> None:
    for heading, lines in _sections():
        kinds = [line.removeprefix("### ") for line in lines if line.startswith("### ")]
        assert all(kind in KINDS for kind in kinds), (heading, kinds)
        assert kinds == sorted(kinds, key=KINDS.index), (heading, kinds)  # Keep a Changelog's order
        assert len(kinds) == len(set(kinds)), heading
        if heading != "## [Unreleased]":
            assert len(lines) <= 60, f"{heading}: {len(lines)} lines; the details belong in docs/history/"


def test_every_version_heading_has_its_link() -> None:
    for heading, _lines in _sections():
        name = heading.removeprefix("## ").split(" - ")[0]
        assert re.search(rf"^{re.escape(name)}: https://github\.com/flexkit/flexkit/\S+$", CHANGELOG, re.M), name


def test_releasing_says_how_the_next_release_is_cut() -> None:
    text = (ROOT / "RELEASING.md").read_text(encoding="utf-8")
    for step in ("CHANGELOG.md", "## [Unreleased]", "flexkit/_version.py", "plugins/*/pyproject.toml", ".ci/wheels",
                 "git tag -a vX.Y.Z", "twine upload"):
        assert step in text, step


def test_ci_refuses_a_wheel_without_the_release_version() -> None:
    script = (ROOT / ".ci" / "wheels").read_text(encoding="utf-8")
    assert 'version=$(sed -n \'s/^__version__ = "\\(.*\\)"$/\\1/p\' "$root/flexkit/_version.py")' in script
    assert '*-"$version"-py3-none-any.whl) ;;' in script and "does not carry the release version" in script
    assert re.search(r'^__version__ = "\d+\.\d+\.\d+"$', (ROOT / "flexkit" / "_version.py").read_text(), re.M)
