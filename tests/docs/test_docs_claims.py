"""Claims of the guides checked against the product: the selector guide's prefetch default."""

from __future__ import annotations

from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.scheduler._scheduler import AFTER_FEEDBACK
from tests.fixtures import ROOT


def _prefetch(selector: str) -> object:
    pipe = pipeline_from_dict({"run": {"batch_size": 4}, "tasksets": [
        {"name": "t", "storage_type": "simulated", "size": 32, "selector": {"type": selector}}]})
    try:
        return pipe.scheduler.prefetch
    finally:
        pipe.scheduler.close()


def test_the_selector_guide_states_the_prefetch_default() -> None:
    assert _prefetch("thompson_target") == AFTER_FEEDBACK  # a selector that learns from feedback
    assert _prefetch("shuffle") is True
    guide = (ROOT / "docs" / "plugins" / "selector.md").read_text(encoding="utf-8")
    assert f'`prefetch = "{AFTER_FEEDBACK}"`' in guide and "with prefetch on (the\n  default)" not in guide
    assert "`predicted_pass_rates(self)`" in guide and "flexkit copies what it returns" in guide
