"""flexkit: data-centric dynamic training for RL fine-tuning of LLMs.

The public surface::

    pipe = flexkit.load_pipeline("pipeline.toml", overrides=["run.seed=3"])
    tasks = pipe.scheduler.read()                  # list of Task: .taskset_id, .index, .data
    pipe.scheduler.feedback({flexkit.SELECTOR_METRIC: {0: {"indices": [...], "values": [...]}}})
    state = pipe.scheduler.state_dict(); other.scheduler.load_state_dict(state)
    sel = flexkit.make_selector("difficulty_based", size=N, features={"f0": a0, "f1": a1}, target_reward=0.5)

**The API line.** :data:`__all__` is everything a plugin author or a host adapter uses: the component base classes
(:class:`Selector`, :class:`Scorer`, :class:`Actuator`, :class:`GroupFilter`, :class:`Trainer`, :class:`Taskset`),
their configs' :func:`field`, the registration hook's :class:`Register` and :data:`hookimpl`, the errors (their
home is :mod:`flexkit.errors`), the pipeline loaders, the host adapters' helpers (:func:`pipeline_metrics`,
:class:`FlexkitSampler`, :func:`fill_batch`, :func:`split_arrays`), the public subpackages :mod:`flexkit.testing`
(contract checks for a plugin's tests) and :mod:`flexkit.distributed`, and :mod:`flexkit.errors`; host adapters
also use :mod:`flexkit.host`. Internal modules say so by name (a leading underscore: ``flexkit.run._runner``, as
pytest's ``_pytest``): their names may move between releases (the public modules are listed in
docs/architecture.md). A few names load their module on first use
(``FlexkitSampler`` imports torch; ``GroupFilter`` is a built-in's module), so that ``import flexkit`` stays light
and loads no built-in component.
"""

from __future__ import annotations

from flexkit._lazy import lazy_exports
from flexkit._version import DISTRIBUTION, __version__
from flexkit.config import field
from flexkit.config._converter import make_converter, structure
from flexkit.errors import (
    CheckpointError,
    ComponentError,
    ComponentTypeError,
    ConfigError,
    ConfigIssue,
    ConfigTypeError,
    DistributedStateError,
    FeedbackError,
    FlexkitError,
    PluginError,
    SampleError,
    SampleTypeError,
    StateError,
    StateMismatchError,
    TasksetError,
)
from flexkit.pipeline._checkpoint import join_arrays, split_arrays
from flexkit.pipeline._pipeline import Pipeline, load_pipeline, make_selector, pipeline_from_dict
from flexkit.plugins._contract import Configurable, FeedbackOperator, Rollout, Trainer, ValidationRows
from flexkit.plugins._hookspecs import Register, hookimpl
from flexkit.plugins._manager import PluginHost, get_plugins, plugin_host_for
from flexkit.run._dynamic_sampling import fill_batch
from flexkit.sample import Actuator, Keep, Mix, RolloutBatch, SampleStage, Scorer, Weights
from flexkit.sample._actuator import sample_weights_normalised
from flexkit.sample._weights import aggregate, keep_mask, policy_loss
from flexkit.scheduler._scheduler import Task, TasksetScheduler
from flexkit.scheduler.feedback import SELECTOR_METRIC, Experience, PassRateCalculator, task_triples
from flexkit.selectors import FEATURE_KEYS, Selector, feature_keys_of, read_feature_columns
from flexkit.tasksets import InMemoryTaskset, Taskset

#: Names loaded on first use, and their modules (torch, a built-in component's module, the runner).
_LAZY: dict[str, str] = {
    "FlexkitSampler": "flexkit.integrations._torch",
    "GroupFilter": "flexkit.sample.actuators.group_filter",
    "WithIndex": "flexkit.integrations._torch",
    "max_rounds_field": "flexkit.sample.actuators.group_filter",
    "pipeline_metrics": "flexkit.integrations._host_metrics",
    "run_pipeline": "flexkit.run._runner",
    "selector_metrics": "flexkit.integrations._host_metrics",
    "target_groups_field": "flexkit.sample.actuators.group_filter",
}

__all__ = [
    "DISTRIBUTION",
    "FEATURE_KEYS",
    "SELECTOR_METRIC",
    "Actuator",
    "CheckpointError",
    "ComponentError",
    "ComponentTypeError",
    "ConfigError",
    "ConfigIssue",
    "ConfigTypeError",
    "Configurable",
    "DistributedStateError",
    "Experience",
    "FeedbackError",
    "FeedbackOperator",
    "FlexkitError",
    "InMemoryTaskset",
    "Keep",
    "Mix",
    "PassRateCalculator",
    "Pipeline",
    "PluginError",
    "PluginHost",
    "Register",
    "Rollout",
    "RolloutBatch",
    "SampleError",
    "SampleStage",
    "SampleTypeError",
    "Scorer",
    "Selector",
    "StateError",
    "StateMismatchError",
    "Task",
    "Taskset",
    "TasksetError",
    "TasksetScheduler",
    "Trainer",
    "ValidationRows",
    "Weights",
    "__version__",
    "aggregate",
    "feature_keys_of",
    "field",
    "fill_batch",
    "get_plugins",
    "hookimpl",
    "join_arrays",
    "keep_mask",
    "load_pipeline",
    "make_converter",
    "make_selector",
    "pipeline_from_dict",
    "plugin_host_for",
    "policy_loss",
    "read_feature_columns",
    "sample_weights_normalised",
    "split_arrays",
    "structure",
    "task_triples",
    *sorted(_LAZY),
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
