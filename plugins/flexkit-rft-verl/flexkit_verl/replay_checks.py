"""Construction checks of a verl config for ``[replay]`` (:mod:`flexkit_verl.replay` in the legacy ``RayPPOTrainer``,
:mod:`flexkit_verl.tq_replay` in the v1 trainer); each problem is one :class:`~flexkit.ConfigIssue` naming the key
and what to do.

- ``[replay] groups`` below ``actor_rollout_ref.actor.ppo_mini_batch_size``: replayed groups join the update in
  whole mini-batches (verl's actor asserts rows % (mini-batch × ``rollout.n``) == 0), so none would ever be replayed;
- a critic (``critic.enable``, or ``algorithm.adv_estimator=gae``): replay keeps the groups with a non-zero
  group-relative advantage; with a value baseline nearly every row has one, and its values and returns are stale;
- policy losses without an importance ratio against ``old_log_probs`` (``gpg``, ``dro``): a replayed row would be
  trained as if the current policy had generated it;
- ``actor_rollout_ref.actor.use_prefix_grouper``: verl then balances whole ``uid`` groups across ranks and shares
  their prompt prefix; not tested with replayed rows;
- a multimodal model (verl built a processor): replay stores text rollouts (image inputs are not one row per
  response).
"""

from __future__ import annotations

from typing import Any

from flexkit import ConfigIssue, Pipeline
from flexkit_verl.keys import config_get

__all__ = ["RATIO_BLIND_LOSSES", "replay_issues", "uses_critic"]

#: verl 0.9.1 policy losses that never compare ``log_prob`` with ``old_log_probs`` through an importance ratio.
RATIO_BLIND_LOSSES = {
    "gpg": "is -log_prob × advantage, without a ratio to old_log_probs",
    "dro": "weighs log_prob × advantage without a ratio to old_log_probs (old_log_probs only enter its penalty)",
}


def uses_critic(config: Any) -> bool:
    """verl's own rule (``need_critic``): ``critic.enable`` when set, else whether the estimator is ``gae``."""
    enable = config_get(config, "critic.enable")
    return bool(enable) if enable is not None else config_get(config, "algorithm.adv_estimator") == "gae"


def replay_issues(config: Any, pipeline: Pipeline, *, multimodal: bool = False) -> list[ConfigIssue]:
    """What makes ``pipeline``'s ``[replay]`` unworkable under verl's ``config`` (none without
    ``[replay]``); ``multimodal``: verl built a processor for the model."""
    replay = pipeline.config.replay
    if replay is None:
        return []
    issues = []
    mini_batch = config_get(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if mini_batch is not None and replay.groups < int(mini_batch):
        issues.append(ConfigIssue("replay.groups", (
            f"is {replay.groups}, below actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}: verl trains in "
            "whole mini-batches, so replayed groups join an update only as whole mini-batches of groups and none "
            f"would ever be replayed; set [replay] groups to a multiple of {mini_batch}")))
    if uses_critic(config):
        key = "critic.enable" if config_get(config, "critic.enable") is not None else "algorithm.adv_estimator"
        issues.append(ConfigIssue(key, (
            "gives verl a critic: [replay] replays the groups whose group-relative advantages are non-zero (GRPO "
            "and its kin), and a replayed row's values and returns would be stale; use a critic-free estimator "
            "(algorithm.adv_estimator=grpo) or remove [replay]")))
    mode = config_get(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla")
    if mode in RATIO_BLIND_LOSSES:
        issues.append(ConfigIssue("actor_rollout_ref.actor.policy_loss.loss_mode", (
            f"is {mode!r}, which {RATIO_BLIND_LOSSES[mode]}: a replayed row would be trained as if the current "
            "policy had generated it; use a loss with PPO's ratio (vanilla, gspo, cispo, ...) or remove [replay]")))
    if config_get(config, "actor_rollout_ref.actor.use_prefix_grouper", False):
        issues.append(ConfigIssue("actor_rollout_ref.actor.use_prefix_grouper", (
            "is true: the prefix grouper is not tested with replayed rows; set it to false or remove [replay]")))
    if multimodal:
        issues.append(ConfigIssue("actor_rollout_ref.model.path", (
            "is a multimodal model (verl built a processor for it): [replay] stores text rollouts only (image "
            "inputs are not one row per response); remove [replay] or use a text model")))
    return issues
