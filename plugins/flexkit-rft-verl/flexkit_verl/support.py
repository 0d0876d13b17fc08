"""What the verl adapter honours of a pipeline (:class:`flexkit.host.HostSupport`), importable without verl
(``flexkit validate --for verl`` reads :data:`SUPPORT` through the ``flexkit.hosts`` entry point).

The sample stage's keep and weights reach verl's per-token loss as ``rollout_is_weights``; validation metrics reach
the selectors (``trainer.test_freq`` > 0 with ``data.val_files``): verl's own and, on the v1 trainer,
``val_accuracy/<group>`` per value of the grouping column (:mod:`flexkit_verl.groups`), which a ``frontier``
guard (``guard_metric = "val_accuracy/{}"``) reads. Refills are refused: verl generates one batch per step here.

Rollout replay (``[replay]``, after DOTS, arXiv 2506.05316) is refused, because verl 0.9.1's v1 step offers no
clean place for it: replaying a group means training on it with its stored advantages and its generating policy's
log-probabilities as ``old_log_probs`` (PPO's clipped ratio is then the importance weight), but

- ``PPOTrainer._step_once`` recomputes ``old_log_probs`` with the current policy for every key the replay buffer
  returns (``_compute_old_log_prob``), then the advantages (and the rollout-correction weights, from those
  log-probs) over the whole batch by ``uid`` (``_compute_advantage``): the stored values would be overwritten
  inside verl's own methods, and restoring them means overriding both;
- trajectories leave TransferQueue at the end of their step (``kv_clear`` in ``fit``): a buffer would have to copy
  every field of each replayed trajectory (token and position ids, masks, multimodal inputs, tags) out and back
  under new keys, and store all of it in ``data.pt`` for an exact resume;
- ``_balance_batch`` pads the batch to a multiple of ``ppo_mini_batch_size × rollout.n`` (and the data-parallel
  size) with synthetic samples, so a varying number of replayed groups varies the optimizer steps of each verl
  step against an LR schedule verl sizes from ``total_training_steps``.

``flexkit run`` replays; in verl, remove ``[replay]``.
"""

from __future__ import annotations

from flexkit.host import HostSupport

__all__ = ["SUPPORT"]

#: The sample stage and validation metrics.
SUPPORT = HostSupport(
    name="verl (flexkit_verl)", sample=True, evaluation=True,
    advice={
        "refill": "verl generates one batch per step here: remove [sample.refill] (the filter still drops groups)",
        "replay": "verl's v1 step recomputes old_log_probs and advantages for every sampled row, so replayed rows "
                  "cannot keep their own (see flexkit_verl.support): remove [replay], or run the recipe with "
                  "flexkit run",
        "evaluation": "set trainer.test_freq > 0 with data.val_files, or turn the guard off "
                      '(guard_metric = "")',
    },
)
