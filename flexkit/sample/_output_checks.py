"""Checks on what a scorer and an actuator return, made by :meth:`flexkit.sample.SampleStage.run`.

The :class:`~flexkit.sample.Scorer` and :class:`~flexkit.sample.Actuator` base classes check part of their own
output; a plugin's scorer or actuator need not derive from them, so the stage checks every output once more
where it enters flexkit:

- scores: the shape of the scorer's ``granularity`` (``(B,)``, ``(B, T)`` or a dict taskset id → value), real
  numbers (not bool or complex), finite (token scores: on response tokens);
- actions: the type of the stage's mechanism; keep indices inside the batch; weights of shape ``(B,)`` or
  ``(B, T)``; mix proportions only for the pipeline's tasksets.

Errors are :class:`~flexkit.errors.SampleError` naming the component, its plugin and its distribution.
Torch is imported inside the functions.
"""

from __future__ import annotations

from typing import Any

from flexkit.errors import SampleError
from flexkit.plugins._contract import ActuatorLike, ScorerLike, describe_component
from flexkit.sample._actuator import ACTION_OF, Action, Keep, Mix, Weights, check_finite
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._scorer import check_scores


def check_score_output(scores: Any, batch: RolloutBatch, scorer: ScorerLike) -> Any:
    """``scores`` as :func:`~flexkit.sample._scorer.check_scores` normalises them, after checking shape, dtype and
    finiteness; raises :class:`SampleError` naming ``scorer``."""
    import torch

    name = describe_component(scorer)
    granularity = scorer.granularity
    try:
        scores = check_scores(scores, batch, granularity, who=name)
    except SampleError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. strings, or a domain value that is not a number
        raise SampleError(f"scorer {name} returned scores that are not numbers: {exc}") from None
    if isinstance(scores, torch.Tensor) and (scores.dtype == torch.bool or scores.is_complex()):
        raise SampleError(f"scorer {name} returned {scores.dtype} scores; scores must be real numbers (float or int)")
    check_finite(scores, batch, who=f"scorer {name}")
    return scores


def check_action_output(
    action: Any, batch: RolloutBatch, actuator: ActuatorLike, mechanism: str, num_tasksets: int | None = None
) -> Action:
    """``action`` when it is the ``mechanism``'s action type and fits ``batch`` (and the pipeline's
    ``num_tasksets`` for a mix); raises :class:`SampleError` naming ``actuator``."""
    expected = ACTION_OF[mechanism]
    if not isinstance(action, expected):
        raise SampleError(f"{describe_component(actuator, 'actuator')} is in a {mechanism!r} stage and must return "
                          f"{expected.__name__}, got {type(action).__name__}")
    b = batch.batch_size
    if isinstance(action, Keep):
        idx = action.indices
        if idx.size and (int(idx[0]) < 0 or int(idx[-1]) >= b):  # sorted by Keep
            bad = int(idx[0]) if int(idx[0]) < 0 else int(idx[-1])
            raise SampleError(f"{describe_component(actuator, 'actuator')} kept sample {bad}, outside the batch of "
                              f"{b} samples")
    elif isinstance(action, Weights):
        shape = tuple(action.weights.shape)
        t = batch.response_length
        if shape[0] != b or (len(shape) == 2 and t is not None and shape[1] != t):
            fits = f"({b},) or ({b}, {t if t is not None else 'T'})"
            raise SampleError(f"{describe_component(actuator, 'actuator')} returned weights of shape {shape} for a "
                              f"batch of {b} samples; expected {fits}")
    elif isinstance(action, Mix) and num_tasksets is not None:
        unknown = [tid for tid in action.proportions if tid >= num_tasksets]
        if unknown:
            raise SampleError(f"{describe_component(actuator, 'actuator')} gave a proportion to taskset id "
                              f"{unknown[0]}, but the pipeline has {num_tasksets} taskset(s) (ids 0 to "
                              f"{num_tasksets - 1})")
    return action
