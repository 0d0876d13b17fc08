"""Construction-time checks of a verl config against a flexkit pipeline; each raises one
:class:`~flexkit.ConfigError` naming the verl keys and the pipeline keys involved.

- batch size: ``data.train_batch_size`` must be ``[run] batch_size`` (otherwise one verl step draws several
  scheduler batches, or part of one);
- run length: verl's step count (``trainer.total_training_steps``, else steps per epoch ×
  ``trainer.total_epochs``) must be the pipeline's (``[run] total_steps``, else its steps per epoch ×
  ``[run] total_epochs``): a longer verl run stops when the scheduler ends, short of its last checkpoint and
  with an LR schedule sized for steps that never come; a shorter one cuts the curriculum;
- loss modes: with a ``[sample]`` stage that keeps or reweights samples, verl losses that do not multiply
  ``rollout_is_weights`` into the per-token loss are refused (``bypass_mode`` recomputes its own weights,
  ``geo_mean`` aggregates their log), and on the v1 trainer so are rollout-correction IS weights
  (``algorithm.rollout_correction.rollout_is``), which verl writes over flexkit's after sampling;
- v1 sampling point: the replay buffer runs the stage after rewards, so the scorer must be a ``post_reward``
  one and rewards must exist at sampling time (no colocated reward model);
- validation: a selector that reads held-out evaluations (``frontier``'s ``guard_metric``) needs verl to
  validate during the run (``trainer.test_freq`` > 0), and a per-group guard (``"val_accuracy/{}"``) needs the
  validation rows to carry its grouping column (:mod:`flexkit_verl.groups`);
- what the trainer does not honour of the pipeline (:func:`~flexkit_verl.support.support_for`:
  ``[sample.refill]``), and what ``[replay]`` cannot work with (:mod:`flexkit_verl.replay_checks`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flexkit import ConfigError, ConfigIssue, Pipeline
from flexkit.host import pipeline_needs, unmet_needs
from flexkit_verl.groups import column_issues, group_columns
from flexkit_verl.keys import config_get
from flexkit_verl.replay_checks import replay_issues
from flexkit_verl.support import support_for

#: Policy losses that do not multiply ``rollout_is_weights`` into the per-token loss (verl 0.9.1).
WEIGHT_BLIND_LOSSES = {
    "bypass_mode": "recomputes its own IS weights and ignores the batch's rollout_is_weights",
    "geo_mean": "aggregates the log of rollout_is_weights per sequence (a dropped sample is not zeroed)",
}


def _weights_stage(pipeline: Pipeline) -> str | None:
    """The mechanism of a stage that writes token weights (``select``/``reweight``), else ``None``."""
    sample = pipeline.config.sample
    if not pipeline.has_sample_stage or sample is None:
        return None
    mechanism = sample.mechanism
    return mechanism if mechanism in ("select", "reweight") else None


def batch_size_issues(config: Any, pipeline: Pipeline) -> list[ConfigIssue]:
    """``data.train_batch_size`` against ``[run] batch_size``."""
    verl_bs, flex_bs = config_get(config, "data.train_batch_size"), pipeline.scheduler.batch_size
    if verl_bs is not None and int(verl_bs) != flex_bs:
        return [ConfigIssue("data.train_batch_size", f"is {verl_bs} but the pipeline's [run] batch_size is {flex_bs}: "
                            "one verl step must be one scheduler batch; set both to the same value")]
    return []


def run_length_issues(config: Any, pipeline: Pipeline, *, steps_per_epoch: int) -> list[ConfigIssue]:
    """verl's total steps against the pipeline's (``steps_per_epoch`` is the trainer's own count)."""
    steps = config_get(config, "trainer.total_training_steps")
    epochs = config_get(config, "trainer.total_epochs")
    if steps is not None:
        verl_total, verl_keys = int(steps), f"trainer.total_training_steps={steps}"
    elif epochs is not None:
        verl_total = int(epochs) * int(steps_per_epoch)
        verl_keys = f"trainer.total_epochs={epochs} × {steps_per_epoch} steps per epoch"
    else:
        return []
    run = pipeline.config.run
    sched = pipeline.scheduler
    if sched.total_steps == verl_total:
        return []
    if run.total_steps is not None:
        flex_keys = f"[run] total_steps={run.total_steps}"
    else:
        flex_keys = f"[run] total_epochs={run.total_epochs or 1} × {sched.steps_per_epoch} steps per epoch"
    return [ConfigIssue("trainer.total_epochs", f"verl runs {verl_total} steps ({verl_keys}) but the pipeline "
                        f"{sched.total_steps} ({flex_keys}): make them agree, e.g. "
                        f"'+flexkit.set=[\"run.total_steps={verl_total}\"]' or trainer.total_training_steps="
                        f"{sched.total_steps}")]


def loss_mode_issues(config: Any, pipeline: Pipeline, *, v1: bool) -> list[ConfigIssue]:
    """verl loss settings under which flexkit's token weights would silently do the wrong thing."""
    mechanism = _weights_stage(pipeline)
    if mechanism is None:
        return []
    issues = []
    stage = f"the pipeline's [sample] stage ({mechanism}) writes rollout_is_weights, but"
    if config_get(config, "algorithm.rollout_correction.bypass_mode", False):
        issues.append(ConfigIssue("algorithm.rollout_correction.bypass_mode", f"is true: {stage} verl's bypass_mode "
                                  f"loss {WEIGHT_BLIND_LOSSES['bypass_mode']}; set it to false"))
    mode = config_get(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla")
    if mode in WEIGHT_BLIND_LOSSES:
        issues.append(ConfigIssue("actor_rollout_ref.actor.policy_loss.loss_mode",
                                  f"is {mode!r}: {stage} this loss {WEIGHT_BLIND_LOSSES[mode]}"))
    rollout_is = config_get(config, "algorithm.rollout_correction.rollout_is")
    if v1 and rollout_is is not None and not config_get(config, "algorithm.rollout_correction.bypass_mode", False):
        issues.append(ConfigIssue("algorithm.rollout_correction.rollout_is",
                                  f"is {rollout_is!r}: {stage} verl's v1 trainer computes its rollout-correction "
                                  "weights after sampling and writes them over flexkit's; set it to null or use "
                                  "the legacy trainer (trainer.use_v1=false), where flexkit multiplies into them"))
    return issues


def v1_sampling_issues(config: Any, pipeline: Pipeline) -> list[ConfigIssue]:
    """What the v1 replay buffer needs: rewards at sampling time, a ``post_reward`` scorer."""
    issues = []
    colocated_rm = not config_get(config, "reward.reward_model.enable_resource_pool", False)
    if config_get(config, "reward.reward_model.enable", False) and colocated_rm:
        issues.append(ConfigIssue("reward.reward_model.enable_resource_pool", "is false with reward.reward_model."
                                  "enable=true: a colocated reward model scores after replay-buffer sampling, where "
                                  "flexkit needs the rewards; set enable_resource_pool=true or use a rule-based "
                                  "reward"))
    if pipeline.has_sample_stage and pipeline.sample_stage.timing not in ("pre_rollout", "post_reward"):
        issues.append(ConfigIssue("sample.scorer", f"runs at {pipeline.sample_stage.timing!r}, but verl's v1 trainer "
                                  "runs flexkit's [sample] stage in the replay buffer (post_reward); use a post_reward "
                                  "scorer or the legacy trainer"))
    return issues


def validation_issues(config: Any, pipeline: Pipeline, val_columns: Iterable[str] | None) -> list[ConfigIssue]:
    """A guard without verl validations (``trainer.test_freq`` ≤ 0, no ``data.val_files``), and validation rows
    (``val_columns``: the validation dataset's column names; ``None``: not known here) lacking a column a
    per-group guard needs. A per-group ``guard_metric`` no validation can feed raises at once
    (:func:`~flexkit_verl.groups.group_columns`)."""
    guards = [need.key for need in pipeline_needs(pipeline) if need.part == "evaluation"]
    if not guards:
        return []
    issues = []
    test_freq = config_get(config, "trainer.test_freq")
    if test_freq is not None and int(test_freq) <= 0:
        issues.append(ConfigIssue("trainer.test_freq", f"is {test_freq}, but {', '.join(guards)} steers by held-out "
                                  "evaluations, which come from verl's validation: set trainer.test_freq > 0 (e.g. "
                                  '5) with data.val_files, or turn the guard off (guard_metric = "")'))
    if config is not None and config_get(config, "data") is not None and not config_get(config, "data.val_files"):
        issues.append(ConfigIssue("data.val_files", f"is unset, but {', '.join(guards)} steers by held-out "
                                  "evaluations: give verl validation files"))
    if val_columns is not None:
        issues += column_issues(group_columns(pipeline), val_columns)
    return issues


def check_trainer_config(config: Any, pipeline: Pipeline, *, steps_per_epoch: int | None, v1: bool,
                         val_columns: Iterable[str] | None = None, multimodal: bool = False) -> None:
    """Every check above that applies; raises one :class:`~flexkit.ConfigError` listing all problems
    (``val_columns``: the validation dataset's column names, when known; ``multimodal``: verl built a processor for
    the model)."""
    issues = batch_size_issues(config, pipeline) + loss_mode_issues(config, pipeline, v1=v1)
    issues += unmet_needs(pipeline_needs(pipeline), support_for(v1=v1))  # what this trainer does not honour
    issues += validation_issues(config, pipeline, val_columns)
    issues += replay_issues(config, pipeline, multimodal=multimodal)
    if steps_per_epoch is not None:
        issues += run_length_issues(config, pipeline, steps_per_epoch=steps_per_epoch)
    if issues:
        raise ConfigError(issues, source="verl config vs flexkit pipeline")
