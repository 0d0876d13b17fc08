"""Every relative link in the README and docs/ points to a file of the repository, and every ``#anchor`` into a
Markdown file to one of its headings (as GitHub names them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "plugins").glob("*/README.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens,
    repeats numbered ``-1``, ``-2``..."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", text).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links(path: Path) -> list[str]:
    """The links of ``path`` (outside code blocks) that are not web addresses or in-page anchors."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:|#", link)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_a_heading(doc: Path) -> None:
    broken = []
    for link in relative_links(doc):
        target, _, anchor = link.partition("#")
        file = (doc.parent / target).resolve() if target else doc
        if not file.exists():
            broken.append(f"{link}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{link}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, broken


def test_anchors_follow_github() -> None:
    assert heading_anchors("## Design measurements 3: how far 0.50 is\n## A `frontier` (x)\n## A `frontier` (x)") \
        == {"design-measurements-3-how-far-050-is", "a-frontier-x", "a-frontier-x-1"}
