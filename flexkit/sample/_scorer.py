"""The scorer protocol: what turns a rollout batch into scores, and the checks made when a stage is built.

After DataFlex-RL's Scorer layer: a scorer declares

- ``requires``: the batch fields it reads (``"a|b"``: either field will do). They are checked on every call,
  so the first batch that lacks one fails with a :class:`~flexkit.errors.SampleError` naming it;
- ``timing``: where the runner calls the stage (:data:`TIMINGS`); it decides *when* the stage runs (see
  :meth:`flexkit.sample.SampleStage.should_run`), it is not decoration;
- ``granularity``: the shape of its scores (:data:`GRANULARITIES`): ``prompt`` and ``response`` give a (B,)
  tensor (prompt scores are equal within a group), ``token`` a (B, T) tensor, ``domain`` a
  ``dict[int, float]`` from taskset id to value;
- ``needs_groups``: whether the scores only make sense when the batch holds groups of responses per prompt
  (``uid``) — true of GRPO-style training, not of PPO with GAE. ``uid`` is then added to ``requires``.

Invalid declarations fail when the subclass is defined (:class:`~flexkit.errors.ComponentTypeError`, a
``TypeError``), not at the first batch. DataFlex-RL checks only the enum values; flexkit also checks ``requires``
at call time and validates the output shape.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from flexkit._estimators import BUILTIN_GROUP_ESTIMATORS
from flexkit.config._converter import did_you_mean
from flexkit.errors import ComponentError, ComponentTypeError, ConfigError, ConfigIssue, SampleError, join_path
from flexkit.plugins._contract import Configurable, display_name, optional_member
from flexkit.sample._batch import RolloutBatch

if TYPE_CHECKING:
    import torch

#: Where a stage can run: before rollouts, after rewards, after advantages, or inside the loss.
TIMINGS: tuple[str, ...] = ("pre_rollout", "post_reward", "post_advantage", "in_loss")
#: What one score describes: a taskset (domain), a prompt (its group), a response, or a token.
GRANULARITIES: tuple[str, ...] = ("domain", "prompt", "response", "token")
#: Actuator mechanisms: keep some samples, weight them, or set taskset proportions.
MECHANISMS: tuple[str, ...] = ("select", "reweight", "mix")

#: The group advantage estimators a sample stage built without a plugin host accepts: the built-ins
#: (:data:`flexkit._estimators.BUILTIN_GROUP_ESTIMATORS`; in a pipeline they come through the
#: ``flexkit_group_estimators`` hook like a plugin's own) and those given to :func:`register_group_estimator`.
GROUP_ESTIMATORS: set[str] = set(BUILTIN_GROUP_ESTIMATORS)


def register_group_estimator(name: str) -> None:
    """Declare ``name`` a group advantage estimator (for a trainer plugin's own estimators)."""
    if not isinstance(name, str) or not name.strip():
        raise ComponentError(f"an estimator name must be a non-empty string, got {name!r}")
    GROUP_ESTIMATORS.add(name.strip())


def _check_choice(cls: type, attr: str, value: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ComponentTypeError(
            f"{cls.__qualname__}.{attr} = {value!r} is invalid; allowed values: {', '.join(allowed)}"
        )


def _check_requires(cls: type[Scorer]) -> tuple[str, ...]:
    value = cls.requires
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(
        isinstance(v, str) and v for v in value
    ):
        raise ComponentTypeError(
            f"{cls.__qualname__}.requires = {value!r} is invalid; it must be a tuple of batch field names"
        )
    return tuple(value)


class Scorer(Configurable, abc.ABC):
    """Base class of scorers: set :attr:`Config` and the class attributes below, implement :meth:`score`.

    Built by its registered factory as ``factory(config)`` (``None``: ``Config()``, its defaults). Messages
    name it by its registered name (:func:`flexkit.plugins._contract.display_name`). Stateful scorers extend
    :meth:`state_dict` and :meth:`load_state_dict` (plain data only).
    """

    #: Batch fields read by :meth:`score` (``"a|b"``: either); an instance may narrow them to its config's.
    requires: tuple[str, ...] = ()
    #: Where the runner calls the stage (one of :data:`TIMINGS`).
    timing: ClassVar[str] = "post_reward"
    #: What one score describes (one of :data:`GRANULARITIES`).
    granularity: ClassVar[str] = "response"
    #: Whether the scores need groups of responses per prompt (rejects non-group estimators).
    needs_groups: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        requires = _check_requires(cls)
        _check_choice(cls, "timing", cls.timing, TIMINGS)
        _check_choice(cls, "granularity", cls.granularity, GRANULARITIES)
        if not isinstance(cls.needs_groups, bool):
            raise ComponentTypeError(f"{cls.__qualname__}.needs_groups = {cls.needs_groups!r} is invalid; it must be "
                                     "a bool")
        if cls.needs_groups and "uid" not in requires:
            requires = (*requires, "uid")
        cls.requires = requires

    @classmethod
    def display_name(cls) -> str:
        """``'name' (ClassName)`` for messages: the name the class is registered under, if any."""
        return display_name(cls)

    def __call__(self, batch: RolloutBatch, *, step: int) -> torch.Tensor | dict[int, float]:
        """Check ``requires``, score the batch and check the scores' shape (scores are detached)."""
        if batch.missing(self.requires):
            batch.require(self.requires, who=f"scorer {display_name(self)}")
        return check_scores(self.score(batch, step=step), batch, self.granularity, who=display_name(self))

    @abc.abstractmethod
    def score(self, batch: RolloutBatch, *, step: int) -> torch.Tensor | dict[int, float]:
        """The scores of ``batch`` at training step ``step`` (shape per :attr:`granularity`)."""

    def bind(self, taskset_names: Sequence[str]) -> None:
        """Learn the pipeline's taskset names, by id (the pipeline calls it once); the default ignores them."""

    def state_dict(self) -> dict[str, Any]:
        """Plain-data state for checkpoints (stateless scorers: ``{}``)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""


def check_scores(scores: Any, batch: RolloutBatch, granularity: str, *, who: str) -> torch.Tensor | dict[int, float]:
    """Validate (and normalise) a scorer's output for ``granularity``; raise :class:`SampleError` if wrong."""
    import numpy as np
    import torch

    if granularity == "domain":
        if not isinstance(scores, Mapping):
            raise SampleError(f"scorer {who} has domain granularity and must return a dict taskset_id -> value, "
                              f"got {type(scores).__name__}")
        out: dict[int, float] = {}
        for key, value in scores.items():
            if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
                raise SampleError(f"scorer {who}: domain scores must be keyed by int taskset id, got {key!r}")
            out[int(key)] = float(value)
        return out
    if isinstance(scores, np.ndarray):
        scores = torch.from_numpy(scores)
    if not isinstance(scores, torch.Tensor):
        raise SampleError(f"scorer {who} must return a torch.Tensor, got {type(scores).__name__}")
    b = batch.batch_size
    if granularity == "token":
        t = batch.response_length
        expected: tuple[int, ...] = (b, t) if t is not None else (b, -1)
        ok = scores.ndim == 2 and scores.shape[0] == b and (t is None or scores.shape[1] == t)
    else:
        expected = (b,)
        ok = tuple(scores.shape) == expected
    if not ok:
        raise SampleError(f"scorer {who} has {granularity} granularity and must return shape {expected}, "
                          f"got {tuple(scores.shape)}")
    return scores.detach()


def _cls(obj: Any) -> type:
    return obj if isinstance(obj, type) else type(obj)


def check_compatible(
    scorer_cls: Any, actuator_cls: Any, estimator: str, mechanism: str, *, path: str = "sample",
    group_estimators: Collection[str] | None = None,
) -> None:
    """Raise :class:`~flexkit.errors.ConfigError` (every problem at once) unless the scorer, the actuator, the
    advantage ``estimator`` and the configured ``mechanism`` fit together. Classes or instances are accepted.

    The four declarations read (``needs_groups``, ``granularity``, ``accepts``, ``mechanism``) are declared on
    :class:`Scorer` and :class:`~flexkit.sample.Actuator`; a duck-typed class without one counts as declaring
    none (no groups needed, no granularity, accepting nothing, no mechanism).

    Checks: a ``needs_groups`` scorer needs a group estimator (one of ``group_estimators``, by default
    :data:`GROUP_ESTIMATORS`; a pipeline passes what its plugins' ``flexkit_group_estimators`` hooks return); the
    scorer's
    granularity is one the actuator ``accepts``; the actuator's mechanism is ``mechanism``. Issues carry key
    paths under ``path`` (``sample.estimator``, ``sample.actuator``, ``sample.mechanism``).
    """
    scorer, actuator = _cls(scorer_cls), _cls(actuator_cls)
    s_name, a_name = display_name(scorer_cls), display_name(actuator_cls)
    issues: list[ConfigIssue] = []
    if mechanism not in MECHANISMS:
        issues.append(ConfigIssue(join_path(path, "mechanism"),
                                  f"unknown mechanism {mechanism!r}{did_you_mean(str(mechanism), MECHANISMS)}; "
                                  f"one of: {', '.join(MECHANISMS)}"))
    group = GROUP_ESTIMATORS if group_estimators is None else group_estimators
    if optional_member(scorer, "needs_groups", False) and estimator not in group:
        known = sorted(group)
        issues.append(ConfigIssue(join_path(path, "estimator"),
                                  f"scorer {s_name} has needs_groups=True (its scores need groups of responses "
                                  f"per prompt), but estimator {estimator!r} is not a group advantage estimator"
                                  f"{did_you_mean(str(estimator), known)}; use one of: {', '.join(known)} "
                                  "(a trainer plugin declares its own with the flexkit_group_estimators hook), or "
                                  "a scorer without needs_groups"))
    accepts = tuple(optional_member(actuator, "accepts", ()))
    granularity = optional_member(scorer, "granularity")
    if granularity not in accepts:
        issues.append(ConfigIssue(join_path(path, "actuator"),
                                  f"actuator {a_name} accepts {', '.join(accepts) or 'no'} scores, but scorer "
                                  f"{s_name} gives {granularity} scores"))
    a_mech = optional_member(actuator, "mechanism")
    if mechanism in MECHANISMS and a_mech != mechanism:
        issues.append(ConfigIssue(join_path(path, "mechanism"),
                                  f"mechanism is {mechanism!r} but actuator {a_name} is a {a_mech!r} actuator"))
    if issues:
        raise ConfigError(issues)


def timing_index(timing: str) -> int:
    """The position of ``timing`` in :data:`TIMINGS` (raises :class:`~flexkit.errors.ConfigError` naming the
    allowed values)."""
    if timing not in TIMINGS:
        raise ConfigError(f"unknown timing {timing!r}{did_you_mean(str(timing), TIMINGS)}; one of: "
                          f"{', '.join(TIMINGS)}")
    return TIMINGS.index(timing)

