"""What the Trinity-RFT adapter honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without
Trinity-RFT (``flexkit validate --for trinity`` reads :data:`SUPPORT` through the ``flexkit.hosts`` entry point).

The adapter is a data selector (:class:`~flexkit_trinity.FlexkitSelector`): it chooses tasks and takes Trinity's
pass-rate feedback. Trinity-RFT's evaluation results never reach a data selector, so a selector that steers by
held-out evaluations (``frontier``'s ``guard_metric``) is refused; the sample stage, refills and replay are
Trinity's own business, not flexkit's, and are refused too.
"""

from __future__ import annotations

from flexkit.host import HostSupport

__all__ = ["SUPPORT"]

#: Selection and feedback only.
SUPPORT = HostSupport(
    name="the Trinity-RFT data selector (flexkit_trinity)",
    advice={
        "sample": "Trinity-RFT applies its own sample-level operators; remove [sample]",
        "refill": "remove [sample.refill]",
        "replay": "remove [replay] (Trinity-RFT's buffer decides what is trained again)",
        "evaluation": ("Trinity-RFT hands a data selector no evaluation results, so the guard would never fire: "
                       'turn the guard off (guard_metric = ""; frontier guards by default where tasks are '
                       "grouped by a column)"),
    },
)
