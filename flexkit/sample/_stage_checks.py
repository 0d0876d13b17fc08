"""Checks that a built sample stage fits the driver that will run it: a refill loop, or a step loop that calls
the stage only at some timings (``flexkit run``)."""

from __future__ import annotations

from collections.abc import Sequence

from flexkit.errors import ConfigError, ConfigIssue
from flexkit.plugins._contract import display_name, is_group_filter
from flexkit.sample._scorer import timing_index
from flexkit.sample._stage import SampleStage


def check_refill_stage(stage: SampleStage | None) -> None:
    """Refuse a ``[sample]`` stage that cannot drive a refill loop (``[sample.refill]``), saying why."""
    if stage is None:
        raise ConfigError("dynamic sampling needs a [sample] table with a group filter (e.g. zero_variance_filter)")
    if stage.mechanism != "select":
        raise ConfigError(f"sample.refill needs mechanism = \"select\", not {stage.mechanism!r}")
    if stage.timing != "post_reward":
        raise ConfigError(f"sample.refill needs a scorer that runs at post_reward (before advantages), but "
                          f"{type(stage.scorer).__name__} runs at {stage.timing!r}")
    if not is_group_filter(stage.actuator):
        raise ConfigError(f"sample.refill needs a group filter actuator that reports the groups still needed "
                          f"(zero_variance_filter, pass_rate_band), not "
                          f"{type(stage.actuator).__name__}")


def check_stage_timing(stage: SampleStage, runs: Sequence[str], *, driver: str, source: str | None = None) -> None:
    """Refuse a stage whose scorer's ``timing`` is not one of the timings ``runs`` at which ``driver`` calls the
    sample stage: it would never run, silently. The :class:`~flexkit.errors.ConfigError` names the scorer, its
    timing and the timings the driver runs, at the key path ``sample.scorer``."""
    for timing in runs:
        timing_index(timing)  # a driver naming an unknown timing is flexkit's bug: fail loudly
    timing = stage.timing
    if timing in runs:
        return
    raise ConfigError([ConfigIssue("sample.scorer", (
        f"scorer {display_name(stage.scorer)} runs at timing {timing!r}, but {driver} calls the sample stage "
        f"only at {', '.join(map(repr, runs))}, so it would never run; choose a scorer with one of those timings, "
        f"or drive the pipeline from a trainer that calls pipe.apply_sample_stage(batch, step=step, "
        f"timing={timing!r})"))], source)
