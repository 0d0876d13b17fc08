"""Held-out accuracy per group in verl's legacy ``RayPPOTrainer``, from the validation verl runs anyway.

The legacy ``_validate`` keeps each response's reward in a local list and hands it, in batch order, to
``_maybe_log_val_generations(inputs, outputs, scores)``; the rows' columns reach only ``_get_gen_batch`` (which
pops them for generation). :class:`LegacyValidation` notes each validation batch's prompt ``uid`` and grouping
columns there, pairs them with the scores in order, and pools them with :class:`~flexkit_verl.groups.ValidationGroups`
into ``val_accuracy`` and ``val_accuracy/<group>``, the names the v1 adapter and ``flexkit run`` report. Nothing
here imports verl.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexkit_verl.groups import ValidationGroups

__all__ = ["LegacyValidation"]


class LegacyValidation:
    """One validation's rows and rewards: :meth:`start` when ``_validate`` begins, :meth:`note` per generation
    batch, :meth:`score` with the scores verl collected, :meth:`finish` at the end (empty outside a validation)."""

    def __init__(self, groups: ValidationGroups) -> None:
        self.groups = groups
        self._batches: list[tuple[list[str], dict[str, list[Any]]]] | None = None

    def start(self) -> None:
        """Forget earlier validations and note the batches that follow."""
        self.groups.reset()
        self._batches = []

    def note(self, non_tensor_batch: Any) -> None:
        """One validation batch's rows (verl's ``non_tensor_batch``, ``n`` repeats of each prompt): each row's
        ``uid`` (its prompt) and its value in every grouping column the batch has. Ignored outside a validation."""
        if self._batches is None:
            return
        uids = [str(u) for u in non_tensor_batch["uid"]]
        columns = {name: list(non_tensor_batch[name]) for name in self.groups.names if name in non_tensor_batch}
        self._batches.append((uids, columns))

    def score(self, scores: Sequence[float]) -> None:
        """The validation's rewards, one per noted row in order; a count that does not match the noted rows (a
        verl whose ``_validate`` differs from the one this adapter is tested with) is a ``RuntimeError``."""
        if self._batches is None:
            return
        rows = sum(len(uids) for uids, _ in self._batches)
        if rows != len(scores):
            raise RuntimeError(
                f"flexkit_verl: verl's validation scored {len(scores)} responses but {rows} validation rows went to "
                "generation; this verl's RayPPOTrainer._validate is not the one flexkit_verl is tested with (verl "
                "0.9.x): pin verl, or turn the guard off (guard_metric = \"\")")
        offset = 0
        for uids, columns in self._batches:
            self.groups.add(uids, [float(s) for s in scores[offset:offset + len(uids)]], columns)
            offset += len(uids)

    def finish(self) -> dict[str, float]:
        """``val_accuracy`` and ``val_accuracy/<group>`` of the validation that just ended (empty outside one);
        stop noting."""
        if self._batches is None:
            return {}
        self._batches = None
        return self.groups.metrics()
