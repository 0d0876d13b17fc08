"""``SampleStage``: one scorer and one actuator, run on a rollout batch at the scorer's ``timing``.

Whoever drives the step asks :meth:`SampleStage.should_run` at each point of it (the timings are ``pre_rollout``,
``post_reward``, ``post_advantage`` and ``in_loss``; ``flexkit run`` offers ``post_reward`` and ``post_advantage``)
and runs the stage where the scorer's ``timing`` matches.
For select / reweight, :meth:`SampleStage.token_weights` gives the (B, T) per-token loss weights (already
multiplied into the batch's existing ``rollout_is_weights``); for mix, :attr:`SampleStage.proportions` gives
the latest action's taskset proportions, which the pipeline hands to the scheduler (the mix in force is the
scheduler's, and only the scheduler checkpoints it). The latest scores, action, kept fraction, mean weight and
proportions are kept for logging (:meth:`SampleStage.metrics`); the stage's state is its scorer's and actuator's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from flexkit._metric_names import KEPT_FRACTION, MEAN_WEIGHT, proportion, sample_metric
from flexkit._state_problems import add_problem, is_count, is_number, short
from flexkit.errors import KeyPath, SampleError
from flexkit.plugins._contract import ActuatorLike, ScorerLike
from flexkit.sample._actuator import Action, Actuator, Keep, Mix, Weights
from flexkit.sample._batch import BatchAdapter, RolloutBatch
from flexkit.sample._members import actuator_metrics, bind
from flexkit.sample._output_checks import check_action_output, check_score_output
from flexkit.sample._scorer import check_compatible, timing_index
from flexkit.sample._weights import combine, to_token_weights

if TYPE_CHECKING:
    import torch


#: The key of the latest mix proportions in sample stage states written before flexkit stored the mix once.
_OLD_PROPORTIONS = "proportions"


def _calls_as_actuator(actuator: ActuatorLike) -> TypeGuard[Actuator]:
    """Whether ``actuator`` is called through :meth:`Actuator.__call__` (it takes ``scores_checked``)."""
    return type(actuator).__call__ is Actuator.__call__


class SampleStage:
    """A scorer and an actuator checked against the trainer's advantage ``estimator`` and ``mechanism``.

    Args:
        scorer: a scorer (:class:`~flexkit.plugins._contract.ScorerLike`), usually a
            :class:`~flexkit.Scorer` instance.
        actuator: an actuator (:class:`~flexkit.plugins._contract.ActuatorLike`), usually an
            :class:`~flexkit.Actuator` instance.
        mechanism: ``"select"``, ``"reweight"`` or ``"mix"`` (must be the actuator's).
        estimator: the trainer's advantage estimator (``"grpo"``, ``"gae"``, ...).
        weights_key: the batch field holding weights the trainer already computed (multiplied, never
            overwritten).
        group_estimators: the advantage estimators that sample groups of responses per prompt (default
            :data:`~flexkit.sample._scorer.GROUP_ESTIMATORS`; a pipeline passes its plugins' declarations).

    Raises :class:`~flexkit.errors.ConfigError` when they do not fit together (see
    :func:`~flexkit.sample._scorer.check_compatible`).
    """

    def __init__(
        self,
        scorer: ScorerLike,
        actuator: ActuatorLike,
        *,
        mechanism: str,
        estimator: str,
        weights_key: str = "rollout_is_weights",
        group_estimators: Collection[str] | None = None,
    ) -> None:
        check_compatible(scorer, actuator, estimator, mechanism, group_estimators=group_estimators)
        self.scorer = scorer
        self.actuator = actuator
        self.mechanism = mechanism
        self.estimator = estimator
        self.weights_key = weights_key
        #: Scores of the latest run (a tensor, or a dict for domain scores).
        self.last_scores: Any = None
        #: Action of the latest run.
        self.last_action: Action | None = None
        #: Step of the latest run.
        self.last_step: int | None = None
        #: Share of samples with a positive weight in the latest select / reweight run.
        self.kept_fraction: float | None = None
        #: Mean weight of the latest select / reweight run (over samples; over response tokens for token weights).
        self.mean_weight: float | None = None
        self._num_tasksets: int | None = None  # known once bound
        self._ran_for: tuple[int, int] | None = None
        self._token_weights: tuple[tuple[int, int], torch.Tensor] | None = None
        self._batches = BatchAdapter()  # a plain mapping becomes a RolloutBatch, the same one while it is reused

    # -- wiring -----------------------------------------------------------------------------------------

    @property
    def timing(self) -> str:
        """The scorer's timing: where the runner calls this stage."""
        return self.scorer.timing

    def should_run(self, timing: str) -> bool:
        """Whether the runner should run this stage at ``timing`` (an unknown timing raises
        :class:`~flexkit.errors.ConfigError`)."""
        timing_index(timing)
        return timing == self.scorer.timing

    def bind(self, taskset_names: Sequence[str]) -> None:
        """Tell the actuator (and scorer, if it wants them) the pipeline's taskset names, in id order."""
        self._num_tasksets = len(taskset_names)
        for part in (self.scorer, self.actuator):
            bind(part, list(taskset_names))

    # -- running ----------------------------------------------------------------------------------------

    def run(self, batch: RolloutBatch | Mapping[str, Any], *, step: int) -> Action:
        """Score ``batch`` and act on the scores; record the result for :meth:`token_weights` and logging.

        ``batch`` is a :class:`~flexkit.RolloutBatch` or a plain mapping of field name to tensor or
        array, converted with :meth:`RolloutBatch.from_dict <flexkit.RolloutBatch.from_dict>` (the
        same mapping object passed again counts as the same batch); anything else raises
        :class:`~flexkit.errors.SampleTypeError` (a ``TypeError``).

        The scores and the action are checked where they enter (:mod:`flexkit.sample._output_checks`): a wrong
        shape or dtype, a non-finite score, a kept index outside the batch or a proportion for an unknown taskset
        raises :class:`~flexkit.errors.SampleError` naming the scorer or actuator and its distribution.
        """
        batch = self._batches(batch, who="SampleStage.run")
        scores = check_score_output(self.scorer(batch, step=step), batch, self.scorer)
        if _calls_as_actuator(self.actuator):  # check_score_output just checked the scores
            acted = self.actuator(scores, batch, step=step, scores_checked=True)
        else:  # an actuator with its own __call__
            acted = self.actuator(scores, batch, step=step)
        action = check_action_output(acted, batch, self.actuator, self.mechanism, self._num_tasksets)
        self.last_scores, self.last_action, self.last_step = scores, action, int(step)
        self._ran_for = (int(step), batch.serial)
        self._token_weights = None
        self._log(action, batch)
        return action

    def _log(self, action: Action, batch: RolloutBatch) -> None:
        b = batch.batch_size
        if isinstance(action, Mix):
            self.kept_fraction = self.mean_weight = None
        elif isinstance(action, Keep):
            self.kept_fraction = len(action.indices) / b if b else 0.0
            self.mean_weight = self.kept_fraction
        elif isinstance(action, Weights):
            w = action.weights
            if w.ndim == 2:
                mask = batch["response_mask"].to(device=w.device, dtype=w.dtype)
                tokens = float(mask.sum())
                self.mean_weight = float((w * mask).sum()) / tokens if tokens else 0.0
                self.kept_fraction = float(((w * mask) > 0).any(dim=1).double().mean()) if b else 0.0
            else:
                self.mean_weight = float(w.mean()) if b else 0.0
                self.kept_fraction = float((w > 0).double().mean()) if b else 0.0

    def token_weights(self, batch: RolloutBatch | Mapping[str, Any], *, step: int) -> torch.Tensor:
        """(B, T) float per-token loss weights for ``batch`` (a batch or a plain mapping, as :meth:`run` takes) at
        ``step``.

        Runs the stage unless it already ran for this very batch object and step (a repeated call returns
        the same weights). Keep / weights become per-token weights × ``response_mask``, multiplied into
        ``batch[weights_key]`` when present (never overwriting it). For a mix stage: the existing weights, or
        ``response_mask`` as float. Write the result back into the trainer's batch once.
        """
        import torch

        batch = self._batches(batch, who="SampleStage.token_weights")
        key = (int(step), batch.serial)
        if self._ran_for != key:
            self.run(batch, step=step)
        if self._token_weights is not None and self._token_weights[0] == key:
            return self._token_weights[1]
        batch.require(["response_mask"], who="SampleStage.token_weights")
        mask = batch["response_mask"]
        existing = batch.get(self.weights_key)
        if existing is not None and not isinstance(existing, torch.Tensor):
            raw = np.asarray(existing)
            if raw.dtype.kind not in "fb":
                raise SampleError(f"existing weights (the batch's {self.weights_key!r} field) must be floats, got "
                                  f"{raw.dtype}: is [sample] weights_key the name of a weights field?")
            existing = torch.as_tensor(raw.astype(np.float32))
        if isinstance(self.last_action, Mix):
            if existing is not None:
                out = combine(existing, torch.ones(tuple(mask.shape), dtype=torch.float32, device=mask.device))
            else:
                out = mask.to(torch.float32)
        else:
            out = combine(existing, to_token_weights(self.last_action, mask))
        self._token_weights = (key, out)
        return out

    # -- results ----------------------------------------------------------------------------------------

    @property
    def proportions(self) -> dict[int, float] | None:
        """The latest mix action's proportions (taskset id → share, summing to 1), or ``None`` before this stage
        ran a mix (a stage restored from a checkpoint too: the mix in force is the scheduler's,
        ``TasksetScheduler.mix``)."""
        return dict(self.last_action.proportions) if isinstance(self.last_action, Mix) else None

    @property
    def kept_indices(self) -> np.ndarray | None:
        """The kept indices of the latest select action (``None`` otherwise)."""
        return self.last_action.indices if isinstance(self.last_action, Keep) else None

    def metrics(self) -> dict[str, float]:
        """Scalars for logging (:mod:`flexkit._metric_names`): ``flexkit/sample/kept_fraction``,
        ``flexkit/sample/mean_weight``, ``flexkit/sample/proportion/<id>``, and the actuator's own (e.g.
        ``kept_groups``, ``groups_needed`` of the group filters) as ``flexkit/sample/<name>``."""
        out: dict[str, float] = {}
        out.update({sample_metric(k): float(v) for k, v in actuator_metrics(self.actuator).items()})
        if self.kept_fraction is not None:
            out[KEPT_FRACTION] = self.kept_fraction
        if self.mean_weight is not None:
            out[MEAN_WEIGHT] = self.mean_weight
        for tid, p in (self.proportions or {}).items():
            out[proportion(tid)] = p
        return out

    # -- state ------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state: the scorer's and the actuator's."""
        return {key: part.state_dict() for (key,), part in self.state_children()}

    def state_children(self) -> list[tuple[KeyPath, ScorerLike | ActuatorLike]]:
        """The scorer and the actuator, with the key path of their state inside :meth:`state_dict`'s."""
        return [(("scorer",), self.scorer), (("actuator",), self.actuator)]

    def check_state(self, state: Any, path: KeyPath, problems: list[str]) -> None:
        """Append the problems of a loaded :meth:`state_dict` (at key path ``path``) to ``problems``, changing
        nothing: a table for the scorer and one for the actuator (each checks its own when it loads it).

        A state written before flexkit stored the mix once also holds the latest mix action's proportions
        (``proportions``: ``[taskset id, share]`` pairs, a copy of the scheduler's mix); their shape is checked
        as it was, and :meth:`load_state_dict` ignores them."""
        if not isinstance(state, Mapping):
            add_problem(problems, path, "missing, or not a table (the pipeline has a [sample] stage)")
            return
        for (key,), _part in self.state_children():
            if not isinstance(state.get(key), Mapping):
                add_problem(problems, (*path, key), "missing, or not a table")
        props, n = state.get(_OLD_PROPORTIONS), self._num_tasksets
        if props is not None and (not isinstance(props, list) or not all(
                isinstance(p, list) and len(p) == 2 and is_count(p[0]) and (n is None or p[0] < n)
                and is_number(p[1]) and p[1] >= 0 for p in props)):
            add_problem(problems, (*path, _OLD_PROPORTIONS), f"expected [taskset id, proportion >= 0] pairs, got "
                                                             f"{short(props)}")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output. The ``proportions`` of a state written before flexkit stored the mix
        once are ignored: the mix in force is the scheduler's (restored from its own state), and
        :attr:`proportions` is the latest action's of this stage, set again by its next run."""
        for (key,), part in self.state_children():
            part.load_state_dict(state.get(key, {}))
        self._ran_for = None
        self._token_weights = None
