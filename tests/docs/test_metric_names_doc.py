"""docs/metrics.md's table is the vocabulary of :mod:`flexkit._metric_names`, row for row; the other guides link
to it instead of listing names."""

from __future__ import annotations

from flexkit._metric_names import LEGACY_NAMES, METRICS
from tests.fixtures import ROOT

PAGE = ROOT / "docs" / "metrics.md"


def table() -> str:
    """The table docs/metrics.md must hold, from :data:`~flexkit._metric_names.METRICS`."""
    rows = ["| name | `metrics.jsonl` | `pipeline_metrics` | value |", "|---|---|---|---|"]
    for m in METRICS:
        rows.append(f"| `{m.name}` | {'yes' if m.record else ''} | {'yes' if m.host else ''} | {m.doc} |")
    return "\n".join(rows) + "\n"


def test_the_page_holds_the_table_of_the_module() -> None:
    text = PAGE.read_text(encoding="utf-8")
    expected = table()
    assert expected in text, f"docs/metrics.md's table differs from flexkit._metric_names.METRICS; make it:\n{expected}"
    assert text.count("| name |") == 1  # one table of names


def test_the_page_names_every_old_name() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert all(f"`{old}`" in text for old in [*LEGACY_NAMES, "eval_accuracy", "eval_accuracy/<level>", "sample/<name>"])


def test_guides_link_to_the_table_instead_of_repeating_it() -> None:
    for page in ("run.md", "integrations/metrics.md", "sample-stage.md", "integrations/dynamic-sampling.md",
                 "plugins/actuator.md", "plugins/trainer.md"):
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        depth = page.count("/")
        assert f"]({'../' * depth}metrics.md" in text, page
        assert "| `flexkit/feedback/tasks` |" not in text, page
