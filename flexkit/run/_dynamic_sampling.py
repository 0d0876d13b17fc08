"""Dynamic sampling: roll out, filter and refill until the kept groups fill the training batch.

DAPO (Yu et al., arXiv 2503.14476) drops every group whose responses all got the same reward (no GRPO
advantage, no gradient) and keeps generating until the training batch holds the wanted number of groups, with
a cap on generation rounds. :func:`fill_batch` is that loop for any trainer:

1. draw a batch of tasks from the pipeline's scheduler;
2. roll them out with the caller's function (``rollout(tasks) -> Rollout``);
3. feed **every** rolled-out group back to the selectors (kept or not: a zero-variance group is information);
4. run the ``[sample]`` stage's group filter (e.g. ``zero_variance_filter``), which counts the kept groups of
   the step and says whether to refill (its ``max_rounds`` caps the rounds);
5. repeat while it asks for a refill.

The result lists each round's rollout and the rows kept from it. With ``surplus = "drop"`` (DAPO's choice) the
groups kept beyond the filter's target in the last round are dropped, so the update sees exactly the target;
with ``"keep"`` they are trained on too. The step's counts are one
:class:`~flexkit.sample._refill_count.RefillCount`, :attr:`FilledBatch.count`: rounds, groups drawn, kept by the
filter and trained on, surplus dropped, and every response generated (:attr:`FilledBatch.responses`,
:attr:`FilledBatch.generated_tokens`): that is the cost the field compares selection methods by.

``flexkit run`` calls this when the pipeline has a ``[sample.refill]`` table; a verl or TRL user calls it from
their own step (docs/integrations/dynamic-sampling.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from flexkit.errors import ConfigError, SampleError
from flexkit.plugins._contract import RefillAction, Rollout
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._refill_count import RefillCount
from flexkit.sample._stage_checks import check_refill_stage

if TYPE_CHECKING:
    from flexkit.pipeline._pipeline import Pipeline
    from flexkit.scheduler._scheduler import Task

#: What to do with groups kept beyond the target in the last round.
SURPLUS_MODES: tuple[str, ...] = ("drop", "keep")

RolloutFn = Callable[[list["Task"]], Rollout]


@attrs.frozen(kw_only=True, eq=False)
class Round:
    """One generation round: the tasks drawn, their rollout, and the rows of ``rollout.batch`` trained on."""

    tasks: tuple[Any, ...]
    rollout: Rollout
    batch: RolloutBatch
    feedback: Mapping[str, Any]
    kept: np.ndarray
    kept_groups: int
    groups: int
    responses: int
    tokens: int


@attrs.frozen(kw_only=True, eq=False)
class FilledBatch:
    """What :func:`fill_batch` produced for one training step: its rounds and their :attr:`count`."""

    rounds: tuple[Round, ...]
    #: The step's refill accounting (the properties below read it).
    count: RefillCount

    @property
    def target_groups(self) -> int:
        """Groups the filter wanted kept this step."""
        return self.count.target_groups

    @property
    def filter_rounds(self) -> int:
        """Generation rounds this step took (1: no refill was needed)."""
        return self.count.rounds

    @property
    def kept_groups(self) -> int:
        """Groups the update trains on (after the surplus rule)."""
        return self.count.groups_kept

    @property
    def responses(self) -> int:
        """Responses generated this step, kept or not."""
        return self.count.responses

    @property
    def generated_tokens(self) -> int:
        """Response tokens generated this step (``response_mask`` summed), kept or not."""
        return self.count.tokens

    @property
    def tasks(self) -> list[Any]:
        """Every task drawn this step, in round order."""
        return [t for r in self.rounds for t in r.tasks]

    @property
    def batch(self) -> RolloutBatch:
        """The kept rows of every round as one :class:`~flexkit.sample.RolloutBatch`
        (:meth:`~flexkit.sample.RolloutBatch.concat_rows`)."""
        return RolloutBatch.concat_rows([r.batch for r in self.rounds], [r.kept for r in self.rounds])


def fill_batch(pipe: Pipeline, rollout: RolloutFn, *, step: int, surplus: str | None = None) -> FilledBatch:
    """Draw, roll out, feed back and filter until the kept groups fill the step's batch (see module docstring).

    Args:
        pipe: a pipeline with a ``[sample]`` group filter (``mechanism = "select"``, a ``post_reward`` scorer).
        rollout: ``rollout(tasks) -> Rollout``: generates and scores responses for a list of
            :class:`~flexkit.Task` (``Rollout.batch`` with ``uid`` per response,
            ``Rollout.experiences``
            for the feedback operator).
        step: the training step (the filter counts kept groups per step).
        surplus: ``"drop"`` (train on exactly the target) or ``"keep"`` the last round's extra groups
            (default: the pipeline's ``[sample.refill] surplus``, else ``"drop"``).

    Each round reads the scheduler past its ``total_steps`` if needed: the caller decides when training ends.
    With ``prefetch = true`` a round would be selected before the previous round's feedback arrived, so that mode
    is refused; the default with ``[sample.refill]`` (``"after_feedback"``: each round is selected right after
    the previous round's feedback) and ``false`` are fine.
    """
    if surplus is None:
        refill = pipe.config.sample.refill if pipe.config.sample is not None else None
        surplus = refill.surplus if refill is not None else "drop"
    if surplus not in SURPLUS_MODES:
        raise ConfigError(f"surplus must be one of {', '.join(SURPLUS_MODES)}, got {surplus!r}")
    check_refill_stage(pipe.sample_stage if pipe.has_sample_stage else None)
    sched = pipe.scheduler
    if sched.prefetch is True:
        raise ConfigError("dynamic sampling cannot use [run] prefetch = true: a prefetched round is selected "
                          "before the previous round's feedback reaches the selectors; remove the key (the "
                          "default selects each round right after that feedback) or set it to false")
    rounds: list[Round] = []
    count = RefillCount.start(step)
    while True:
        tasks = sched.read(beyond_end=True)
        result = rollout(tasks)
        if not isinstance(result, Rollout):
            raise SampleError(f"the rollout function must return a flexkit.Rollout, got "
                              f"{type(result).__name__}")
        batch = result.batch if isinstance(result.batch, RolloutBatch) else RolloutBatch.from_dict(result.batch)
        feedback = pipe.feedback(result.experiences if result.experiences is not None else batch.feedback_columns())
        action = pipe.apply_sample_stage(batch, step=step)
        target_groups = action.target_groups if isinstance(action, RefillAction) else None
        if target_groups is None:
            raise SampleError(f"{type(pipe.sample_stage.actuator).__name__} returned {type(action).__name__}, "
                              "not a GroupKeep with target_groups: it cannot drive a refill")
        if not rounds:
            count = RefillCount.start(step, int(target_groups))
        limit = None if surplus == "keep" else count.groups_needed  # the rest is surplus
        kept, kept_groups, passed, groups = _kept_rows(batch, action.indices, limit)
        tokens = batch.count_tokens()
        count = count.add_round(groups=groups, passed=passed, kept=kept_groups, responses=batch.batch_size,
                                responses_kept=len(kept), tokens=tokens)
        rounds.append(Round(tasks=tuple(tasks), rollout=result, batch=batch, feedback=feedback, kept=kept,
                            kept_groups=kept_groups, groups=groups, responses=batch.batch_size, tokens=tokens))
        if not action.refill:
            break
    return FilledBatch(rounds=tuple(rounds), count=count)


def _kept_rows(batch: RolloutBatch, indices: np.ndarray,
               limit: int | None) -> tuple[np.ndarray, int, int, int]:
    """The kept rows, truncated to the first ``limit`` kept groups (in order of first row); with the groups kept
    after and before the truncation and the batch's groups."""
    gid, groups = batch.group_index()
    rows = np.asarray(indices, dtype=np.int64)
    kept_gids = np.unique(gid[rows]) if len(rows) else np.empty(0, dtype=np.int64)
    passed = len(kept_gids)
    if limit is not None and len(kept_gids) > limit:
        first_row = np.full(groups, len(gid), dtype=np.int64)
        np.minimum.at(first_row, gid[rows], rows)
        order = kept_gids[np.argsort(first_row[kept_gids], kind="stable")]
        chosen = np.zeros(groups, dtype=bool)
        chosen[order[:limit]] = True
        rows = rows[chosen[gid[rows]]]
        kept_gids = order[:limit]
    return rows, len(kept_gids), passed, groups
