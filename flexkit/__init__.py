"""flexkit: data-centric dynamic training for RL fine-tuning of LLMs."""

from flexkit._version import __version__
from flexkit.errors import ConfigError, FeedbackError, FlexkitError, PluginError
from flexkit.hookspecs import hookimpl

__all__ = ["ConfigError", "FeedbackError", "FlexkitError", "PluginError", "__version__", "hookimpl"]
