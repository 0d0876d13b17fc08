"""What :class:`~flexkit.FlexkitSampler` honours of a pipeline in your own loop (:class:`flexkit.host.HostSupport`),
importable without torch (``flexkit validate --for sampler`` reads :data:`SAMPLER_SUPPORT` through the
``flexkit.hosts`` entry points).

The sampler chooses tasks and routes the rewards you feed back; everything else a pipeline may ask for happens in
your loop, which only you can vouch for. So the sampler's own host gives no part: a pipeline that needs one is
refused where the sampler is built, with what your loop must do and how to declare it
(``FlexkitSampler(pipe, dataset, host=HostSupport(name="my loop", evaluation=True))``).
"""

from __future__ import annotations

from flexkit.pipeline._support import PARTS, HostSupport

__all__ = ["SAMPLER_SUPPORT", "UNDECLARED_SUPPORT"]

#: How a loop declares what it does: the sampler's ``host`` argument.
_DECLARE = ("and declare it with the sampler's host argument: "
            'host=HostSupport(name="my loop", {part}=True) (from flexkit.host)')

#: The sampler in your own loop: no part given, each with what your loop must do to give it.
SAMPLER_SUPPORT = HostSupport(
    name="FlexkitSampler in your own loop",
    advice={
        "sample": ("apply the stage in your loss (pipe.apply_sample_stage(batch, step=step), then its keep and "
                   "token weights in your policy loss: docs/sample-stage.md) " + _DECLARE.format(part="sample")
                   + "; or remove [sample]"),
        "refill": ("a loader's batches are fixed, so refills need your step to roll out again: drive it with "
                   "flexkit.fill_batch (docs/integrations/dynamic-sampling.md) " + _DECLARE.format(part="refill")
                   + "; or remove [sample.refill]"),
        "replay": ("train on the replayed rows of a flexkit.host.ReplayBuffer (the [replay] table's groups and "
                   "max_age), weighed by their behaviour log-probabilities, " + _DECLARE.format(part="replay")
                   + "; or remove [replay]"),
        "evaluation": ("call sampler.evaluation(metrics) with your validation metrics after each evaluation (for "
                       'guard_metric = "val_accuracy/{}": each group\'s accuracy as val_accuracy/<group>, the '
                       "group named by flexkit.host.group_label) " + _DECLARE.format(part="evaluation")
                       + '; or turn the guard off (guard_metric = "")'),
    },
)

#: A sampler built with ``host=None`` (a host adapter checks the pipeline and declares itself with
#: ``FlexkitSampler.declare_host``) that no adapter declared before its first batch: it gives no part.
UNDECLARED_SUPPORT = HostSupport(
    name="FlexkitSampler(host=None), which no host adapter declared before its first batch",
    advice=dict.fromkeys(PARTS, "host=None leaves the check to a host adapter (FlexkitGRPOTrainer, verl's "
                                "FlexkitTrainerMixin or FlexkitV1TrainerMixin), which declares what it honours "
                                "(sampler.declare_host); use the sampler through one, or build it with host= what "
                                "your loop honours (the default: nothing but selection and feedback)"),
)
