"""What the verl adapter honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without verl
(``flexkit validate --for verl`` and ``--for verl-legacy`` read :data:`SUPPORT` and :data:`LEGACY_SUPPORT` through
the ``flexkit.hosts`` entry points; the construction checks take the one of the trainer being built,
:func:`support_for`).

Both trainers: the sample stage's keep and weights reach verl's per-token loss as ``rollout_is_weights``;
validation metrics reach the selectors (``trainer.test_freq`` > 0 with ``data.val_files``): verl's own and
``val_accuracy/<group>`` per value of the grouping column (:mod:`flexkit_verl.groups`), which a
``frontier`` guard (``guard_metric = "val_accuracy/{}"``) reads. Refills are refused: verl generates one batch per
step here.

Rollout replay (``[replay]``, after DOTS, arXiv 2506.05316) runs in both trainers, with one selection, buffer and
checkpoint file: in the legacy ``RayPPOTrainer`` (:mod:`flexkit_verl.replay`) the stored rows join the finished
``DataProto`` in ``_update_actor``; in the v1 trainer (:mod:`flexkit_verl.tq_replay`) they are written back to
TransferQueue under new keys and join the update's ``KVBatchMeta`` there, after verl computed the fresh rows'
``old_log_probs`` and advantages, so a replayed row keeps those of its own step. The v1 replay needs
:class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` (``flexkit_verl.main_ppo`` uses it): flexkit's replay buffer
built by verl's own trainer class alone refuses ``[replay]`` (:data:`BUFFER_SUPPORT`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from flexkit.host import HostSupport

__all__ = ["BUFFER_SUPPORT", "LEGACY_SUPPORT", "SUPPORT", "buffer_support", "support_for", "trainer_mixin_builds"]

_REFILL = "verl generates one batch per step here: remove [sample.refill] (the filter still drops groups)"
_EVALUATION = 'set trainer.test_freq > 0 with data.val_files, or turn the guard off (guard_metric = "")'
#: What a guard and ``[replay]`` need of verl's settings (checked when the trainer is built; flexkit validate --for
#: lists it).
_REQUIREMENTS = {
    "evaluation": "trainer.test_freq > 0 with data.val_files",
    "group_accuracy": ("validation rows (data.val_files) carrying the selector's grouping column, for every value "
                       "of it in the training rows"),
    "replay": ("actor_rollout_ref.actor.ppo_mini_batch_size at most [replay] groups (whole mini-batches of groups "
               "are replayed), no critic (algorithm.adv_estimator=grpo or kin) and a policy loss with PPO's ratio"),
}

#: verl's v1 trainer (``trainer.use_v1=true``, verl's default) with
#: :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` (``flexkit_verl.main_ppo``): the sample stage, rollout
#: replay and validation metrics.
SUPPORT = HostSupport(
    name="verl's v1 trainer (flexkit_verl)", sample=True, replay=True, evaluation=True,
    advice={"refill": _REFILL, "evaluation": _EVALUATION},
    requirements=_REQUIREMENTS,
)

#: flexkit's v1 replay buffer (``trainer.v1.sampler.custom_sampler``) in verl's own v1 trainer class, without
#: :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin`: the sample stage and validation metrics; no replay,
#: which happens in the mixin's ``_update_actor``.
BUFFER_SUPPORT = HostSupport(
    name="flexkit's v1 replay buffer without FlexkitV1TrainerMixin (flexkit_verl)", sample=True, evaluation=True,
    advice={
        "refill": _REFILL,
        "replay": "replay happens in FlexkitV1TrainerMixin's actor update, and verl's own trainer class runs "
                  "without it: start verl with python -m flexkit_verl.main_ppo (or build the trainer class with "
                  "flexkit_verl.trainer_v1.flexkit_trainer_class), remove [replay], or run the legacy trainer "
                  "(trainer.use_v1=false with FlexkitTrainerMixin; flexkit validate --for verl-legacy)",
        "evaluation": _EVALUATION,
    },
    requirements=_REQUIREMENTS,
)

#: verl's legacy ``RayPPOTrainer`` (``trainer.use_v1=false``) with
#: :class:`~flexkit_verl.FlexkitTrainerMixin`: the sample stage, rollout replay and validation metrics (verl's own
#: and ``val_accuracy/<group>``).
LEGACY_SUPPORT = HostSupport(
    name="verl's legacy RayPPOTrainer (flexkit_verl)", sample=True, replay=True, evaluation=True,
    advice={"refill": _REFILL, "evaluation": _EVALUATION}, requirements=_REQUIREMENTS,
)


def support_for(*, v1: bool) -> HostSupport:
    """:data:`SUPPORT` for the v1 trainer, :data:`LEGACY_SUPPORT` for the legacy one."""
    return SUPPORT if v1 else LEGACY_SUPPORT


_MIXIN_BUILDS: ContextVar[bool] = ContextVar("flexkit_verl_mixin_builds", default=False)


@contextmanager
def trainer_mixin_builds() -> Iterator[None]:
    """Within it, a v1 replay buffer being built belongs to a trainer with
    :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` (whose ``_build_replay_buffer`` enters it)."""
    token = _MIXIN_BUILDS.set(True)
    try:
        yield
    finally:
        _MIXIN_BUILDS.reset(token)


def buffer_support() -> HostSupport:
    """What a v1 replay buffer being built honours: :data:`SUPPORT` inside :func:`trainer_mixin_builds`, else
    :data:`BUFFER_SUPPORT`."""
    return SUPPORT if _MIXIN_BUILDS.get() else BUFFER_SUPPORT
