"""What the Ray scheduler service honours of a pipeline (:class:`flexkit.host.HostSupport`; ``flexkit validate --for
ray`` reads :data:`SERVICE_SUPPORT` through the ``flexkit.hosts`` entry points).

:class:`~flexkit_ray.SchedulerService` hands batches out and applies their feedback; the loss, replayed rows and
evaluations live in your learner, which only you can vouch for. So the service's own host gives no part: a
pipeline that needs one is refused where the service is built, with what to do. A learner that hands the actor its
validation metrics (:meth:`~flexkit_ray.SchedulerService.evaluation`) declares it:
``SchedulerActor.remote(path, host=HostSupport(name="my learner", evaluation=True))``.
"""

from __future__ import annotations

from flexkit.host import HostSupport

__all__ = ["SERVICE_SUPPORT"]

#: Where the parts the service cannot give belong: the learner, with a pipeline of its own.
_LEARNER = "the learner, where the loss is, runs it with a pipeline of its own"

#: Selection and feedback only.
SERVICE_SUPPORT = HostSupport(
    name="the Ray scheduler service (flexkit_ray)",
    advice={
        "sample": ("the service only hands out batches and takes their feedback, and a [sample] stage's keep and "
                   f"weights belong in the policy loss: remove [sample] from the service's pipeline ({_LEARNER}: "
                   "Pipeline.apply_sample_stage, docs/sample-stage.md)"),
        "refill": ("the workers roll out the batches the service leases, once each: remove [sample.refill] "
                   f"({_LEARNER}: flexkit.fill_batch, docs/integrations/dynamic-sampling.md)"),
        "replay": ("replayed rows are trained by the learner, never seen by the service: remove [replay] from the "
                   "service's pipeline (the learner keeps them in a flexkit.host.ReplayBuffer)"),
        "evaluation": ("send the actor your validation metrics after each evaluation (scheduler.evaluation.remote("
                       'metrics); for guard_metric = "val_accuracy/{}" each group\'s accuracy as '
                       "val_accuracy/<group>, the group named by flexkit.host.group_label) and declare it: "
                       'SchedulerActor.remote(..., host=HostSupport(name="my learner", evaluation=True)) (from '
                       'flexkit.host); or turn the guard off (guard_metric = "")'),
    },
)
