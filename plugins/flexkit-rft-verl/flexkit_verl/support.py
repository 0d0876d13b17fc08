"""What the verl adapter honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without verl
(``flexkit validate --for verl`` and ``--for verl-legacy`` read :data:`SUPPORT` and :data:`LEGACY_SUPPORT` through
the ``flexkit.hosts`` entry points; the construction checks take the one of the trainer being built,
:func:`support_for`).

Both trainers: the sample stage's keep and weights reach verl's per-token loss as ``rollout_is_weights``;
validation metrics reach the selectors (``trainer.test_freq`` > 0 with ``data.val_files``): verl's own and
``val_accuracy/<group>`` per value of the grouping column (:mod:`flexkit_verl.groups`), which a
``frontier`` guard (``guard_metric = "val_accuracy/{}"``) reads. Refills are refused: verl generates one batch per
step here.

Rollout replay (``[replay]``, after DOTS, arXiv 2506.05316) runs in the legacy ``RayPPOTrainer``
(:mod:`flexkit_verl.replay`): its ``_update_actor`` receives the finished batch, so stored rows join it there with
their own advantages and generating policy's ``old_log_probs``, as in ``flexkit run``. The v1 trainer refuses it,
because it is not implemented there:

- the v1 step reads each trajectory from TransferQueue and clears it at the end of its step (``kv_clear`` in
  ``fit``), so replaying means putting every field of each stored trajectory back under new keys from the replay
  buffer's ``sample``, and saving them for resume;
- what verl then does decides the objective: ``_compute_old_log_prob`` recomputes ``old_log_probs`` with the
  current policy for every sampled key (in ``bypass_mode`` it copies the stored ``rollout_log_probs`` instead) and
  ``_compute_advantage`` recomputes the advantages by ``uid`` (the stored ones for GRPO without
  ``use_kl_in_reward``). Without ``bypass_mode`` the generating policy would then enter through verl's rollout
  correction (``rollout_is``: a truncated weight exp(old − rollout) outside PPO's clip around the current policy),
  not as ``flexkit run``'s clipped ratio π_θ / π_generating; keeping the stored ``old_log_probs`` instead would
  mean overriding both methods over split key sets (``_balance_batch``'s padding keys included).

Neither route is built or tested here; ``flexkit validate --for verl`` and the v1 construction checks refuse
``[replay]`` and name the legacy trainer.
"""

from __future__ import annotations

from flexkit.host import HostSupport

__all__ = ["LEGACY_SUPPORT", "SUPPORT", "support_for"]

_REFILL = "verl generates one batch per step here: remove [sample.refill] (the filter still drops groups)"
_EVALUATION = 'set trainer.test_freq > 0 with data.val_files, or turn the guard off (guard_metric = "")'
#: What a guard needs of verl's settings (checked when the trainer is built; flexkit validate --for lists it).
_REQUIREMENTS = {
    "evaluation": "trainer.test_freq > 0 with data.val_files",
    "group_accuracy": ("validation rows (data.val_files) carrying the selector's grouping column, for every value "
                       "of it in the training rows"),
}

#: verl's v1 trainer (``trainer.use_v1=true``, verl's default, ``flexkit_verl.main_ppo``): the sample stage and
#: validation metrics; no replay.
SUPPORT = HostSupport(
    name="verl's v1 trainer (flexkit_verl)", sample=True, evaluation=True,
    advice={
        "refill": _REFILL,
        "replay": "replay is not implemented for verl's v1 trainer (its step recomputes old_log_probs and "
                  "advantages for every sampled row and clears each trajectory after its step; see "
                  "flexkit_verl.support): run verl's legacy RayPPOTrainer (trainer.use_v1=false with "
                  "FlexkitTrainerMixin, which replays; flexkit validate --for verl-legacy), remove [replay], or run "
                  "the recipe with flexkit run",
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
