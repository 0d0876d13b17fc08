"""The actuator protocol and the actions it returns.

After DataFlex-RL's Selector / Reweighter / Mixer actuators: an actuator turns scores into one
action, according to its ``mechanism``:

- ``select`` → :class:`Keep` (the sample indices that count; the others get loss weight 0);
- ``reweight`` → :class:`Weights` (a (B,) weight per sample or a (B, T) weight per token);
- ``mix`` → :class:`Mix` (taskset proportions, keyed by taskset id, for the scheduler's next steps).

An actuator declares ``accepts``, the score granularities it understands; a pipeline pairing it with a scorer
of another granularity is rejected when built (:func:`flexkit.sample._scorer.check_compatible`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from flexkit._lazy import is_tensor
from flexkit.errors import ComponentTypeError, SampleError
from flexkit.plugins._contract import Configurable, display_name, registered_name_of
from flexkit.sample._batch import RolloutBatch
from flexkit.sample._scorer import GRANULARITIES, MECHANISMS

if TYPE_CHECKING:
    import torch


def _as_indices(value: Any) -> np.ndarray:
    arr = np.asarray(value.detach().cpu().numpy() if is_tensor(value) else value)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.ndim != 1 or arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise SampleError(f"Keep.indices must be a 1-D array of integers, got {arr.dtype} with shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size > 1 and not (arr[1:] > arr[:-1]).all():  # already sorted and unique (flatnonzero's output): kept
        arr = np.unique(arr)
    return arr


@attrs.frozen(eq=False)
class Keep:
    """Select: the indices of the samples that count (sorted, unique int64); the others get weight 0."""

    indices: np.ndarray = attrs.field(converter=_as_indices)


@attrs.frozen(eq=False)
class Weights:
    """Reweight: a float tensor, (B,) per sample or (B, T) per token (detached; never carries gradient)."""

    weights: torch.Tensor = attrs.field()

    @weights.validator
    def _check(self, _attribute: attrs.Attribute[Any], value: Any) -> None:
        import torch

        if not isinstance(value, torch.Tensor) or value.ndim not in (1, 2) or not value.is_floating_point():
            shown = f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise SampleError(f"Weights.weights must be a (B,) or (B, T) float tensor, got {shown}")
        if not bool(torch.isfinite(value).all()) or bool((value < 0).any()):
            raise SampleError("Weights.weights must be finite and non-negative")


def _as_proportions(value: Any) -> dict[int, float]:
    if not isinstance(value, Mapping) or not value:
        raise SampleError(f"Mix.proportions must be a non-empty dict taskset_id -> proportion, got {value!r}")
    out: dict[int, float] = {}
    for key, p in value.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0:
            raise SampleError(f"Mix.proportions must be keyed by taskset id (int >= 0), got {key!r}")
        p = float(p)
        if not math.isfinite(p) or p < 0:
            raise SampleError(f"Mix proportion of taskset {key} must be finite and >= 0, got {p!r}")
        out[int(key)] = p
    try:
        total = math.fsum(out.values())
    except OverflowError:  # finite values near the float maximum: scale them down first
        top = max(out.values())
        out = {k: p / top for k, p in out.items()}
        total = math.fsum(out.values())
    if total <= 0:
        raise SampleError("Mix.proportions must not all be zero")
    return {k: out[k] / total for k in sorted(out)}


@attrs.frozen
class Mix:
    """Mix: taskset proportions keyed by taskset id (the scheduler's order), normalised to sum to 1."""

    proportions: dict[int, float] = attrs.field(converter=_as_proportions)

    def as_list(self, num_tasksets: int) -> list[float]:
        """The proportions as a list by taskset id (0 for ids without an entry)."""
        return [self.proportions.get(i, 0.0) for i in range(num_tasksets)]


#: Any action.
Action = Keep | Weights | Mix

#: The action type each mechanism returns.
ACTION_OF: dict[str, type[Keep] | type[Weights] | type[Mix]] = {"select": Keep, "reweight": Weights, "mix": Mix}


class Actuator(Configurable, abc.ABC):
    """Base class of actuators: set :attr:`Config`, declare ``mechanism`` and ``accepts``, implement :meth:`act`.

    Built by its registered factory as ``factory(config)`` (``None``: ``Config()``, its defaults). Messages
    name it by its registered name (:func:`flexkit.plugins._contract.display_name`). Stateful actuators extend
    :meth:`state_dict` / :meth:`load_state_dict` (plain data). Invalid declarations fail when the subclass is
    defined.
    """

    #: One of :data:`~flexkit.sample._scorer.MECHANISMS`.
    mechanism: ClassVar[str] = "select"
    #: The score granularities this actuator understands.
    accepts: ClassVar[tuple[str, ...]] = ("prompt", "response")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.mechanism, str) or cls.mechanism not in MECHANISMS:
            raise ComponentTypeError(f"{cls.__qualname__}.mechanism = {cls.mechanism!r} is invalid; allowed values: "
                                     f"{', '.join(MECHANISMS)}")
        accepts = cls.accepts
        if isinstance(accepts, str) or not isinstance(accepts, (tuple, list)) or not accepts or not all(
            a in GRANULARITIES for a in accepts
        ):
            raise ComponentTypeError(f"{cls.__qualname__}.accepts = {accepts!r} is invalid; it must be a non-empty "
                                     f"tuple of: {', '.join(GRANULARITIES)}")
        cls.accepts = tuple(accepts)

    @classmethod
    def display_name(cls) -> str:
        """``'name' (ClassName)`` for messages: the name the class is registered under, if any."""
        return display_name(cls)

    def __call__(self, scores: Any, batch: RolloutBatch, *, step: int, scores_checked: bool = False) -> Action:
        """Check the scores are finite (unless the caller just did: ``scores_checked``), act, and check the
        action's type matches :attr:`mechanism`."""
        if not scores_checked:
            check_finite(scores, batch, who=f"actuator {display_name(self)}")
        try:
            action = self.act(scores, batch, step=step)
        except SampleError as exc:  # name the actuator where its own message does not (same error type kept)
            named = registered_name_of(self) or type(self).__name__
            if exc.args and isinstance(exc.args[0], str) and named not in exc.args[0]:
                exc.args = (f"actuator {display_name(self)}: {exc.args[0]}", *exc.args[1:])
            raise
        expected = ACTION_OF[self.mechanism]
        if not isinstance(action, expected):
            raise SampleError(f"actuator {display_name(self)} is a {self.mechanism!r} actuator and must return "
                              f"{expected.__name__}, got {type(action).__name__}")
        return action

    @abc.abstractmethod
    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Action:
        """The action for ``scores`` of ``batch`` at training step ``step``."""

    def bind(self, taskset_names: Sequence[str]) -> None:
        """Learn the pipeline's taskset names, by id (mix actuators use it; the pipeline calls it once)."""

    def metrics(self) -> dict[str, float]:
        """The actuator's own scalars for logging, logged as ``flexkit/sample/<name>`` (the group filters'
        ``kept_groups``, ``groups_needed``, ...); the default: none."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state for checkpoints (stateless actuators: ``{}``)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""


def check_finite(scores: Any, batch: RolloutBatch, *, who: str) -> None:
    """Raise :class:`SampleError` when tensor scores hold NaN or infinities (token scores: on response tokens)."""
    import torch

    if isinstance(scores, Mapping):
        bad = [k for k, v in scores.items() if not math.isfinite(v)]
        if bad:
            raise SampleError(f"{who}: domain scores must be finite, got {scores[bad[0]]!r} for taskset {bad[0]}")
        return
    if not isinstance(scores, torch.Tensor):
        return
    finite = torch.isfinite(scores)
    if scores.ndim == 2 and "response_mask" in batch:
        finite = finite | ~batch["response_mask"].to(device=scores.device, dtype=torch.bool)
    if not bool(finite.all()):
        raise SampleError(f"{who}: scores must be finite, got NaN or infinite values")


def sample_weights_normalised(raw: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``raw`` scaled to mean 1: over samples for (B,), over response tokens (``mask``) for (B, T).

    All-zero ``raw`` stays all zero (nothing can be normalised; every sample is then dropped).
    """
    import torch

    if raw.ndim == 2 and mask is not None:
        m = mask.to(device=raw.device, dtype=raw.dtype)
        raw = raw * m
        count = m.sum()
    else:
        count = torch.tensor(float(raw.numel()), dtype=raw.dtype, device=raw.device)
    total = raw.sum()
    if not bool(total > 0):
        return torch.zeros_like(raw)
    return raw * (count / total)
