"""What the verl adapter honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without verl
(``flexkit validate --for verl`` reads :data:`SUPPORT` through the ``flexkit.hosts`` entry point).

The sample stage's keep and weights reach verl's per-token loss as ``rollout_is_weights``; validation metrics reach
the selectors (``trainer.test_freq`` > 0 with ``data.val_files``). Refills and rollout replay are not implemented
in this adapter and are refused.
"""

from __future__ import annotations

from flexkit.host import HostSupport

__all__ = ["SUPPORT"]

#: The sample stage and validation metrics.
SUPPORT = HostSupport(
    name="verl (flexkit_verl)", sample=True, evaluation=True,
    advice={
        "refill": "verl generates one batch per step here: remove [sample.refill] (the filter still drops groups)",
        "replay": "this adapter does not replay rollouts yet: remove [replay], or run the recipe with flexkit run",
        "evaluation": "set trainer.test_freq > 0 with data.val_files, or remove the key",
    },
)
