"""flexkit: data-centric dynamic training for RL fine-tuning of LLMs.

The public surface::

    pipe = flexkit.load_pipeline("pipeline.toml")
    tasks = pipe.scheduler.read()                  # list of Task: .taskset_id, .index, .data
    pipe.scheduler.feedback({flexkit.SELECTOR_METRIC: {0: {"indices": [...], "values": [...]}}})
    state = pipe.scheduler.state_dict(); other.scheduler.load_state_dict(state)
    sel = flexkit.make_selector("difficulty_based", size=N, features={"f0": a0, "f1": a1}, target_reward=0.5)
"""

from flexkit._version import DISTRIBUTION, __version__
from flexkit.errors import (
    CheckpointError,
    ComponentError,
    ConfigError,
    FeedbackError,
    FlexkitError,
    PluginError,
    SampleError,
    TasksetError,
)
from flexkit.feedback import SELECTOR_METRIC, Experience, PassRateCalculator
from flexkit.hookspecs import hookimpl
from flexkit.pipeline import Pipeline, load_pipeline, make_selector, pipeline_from_dict
from flexkit.sample import Keep, Mix, RolloutBatch, SampleStage, Weights
from flexkit.scheduler import Task, TasksetScheduler
from flexkit.selectors import Selector

__all__ = [
    "DISTRIBUTION",
    "SELECTOR_METRIC",
    "CheckpointError",
    "ComponentError",
    "ConfigError",
    "Experience",
    "FeedbackError",
    "FlexkitError",
    "Keep",
    "Mix",
    "PassRateCalculator",
    "Pipeline",
    "PluginError",
    "RolloutBatch",
    "SampleError",
    "SampleStage",
    "Selector",
    "Task",
    "TasksetError",
    "TasksetScheduler",
    "Weights",
    "__version__",
    "hookimpl",
    "load_pipeline",
    "make_selector",
    "pipeline_from_dict",
]
