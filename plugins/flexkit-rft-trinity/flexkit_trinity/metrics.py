"""flexkit's selector metrics in Trinity-RFT's monitor.

Trinity-RFT's explorer logs each step's metrics through its monitor (``monitor.monitor_type``: ``tensorboard``,
``wandb``, ...), and gives selectors no way to add their own: ``TasksetScheduler.feedback`` takes the selector
payload out of the step's metrics and passes selectors only ``indices`` and ``values``. :class:`FlexkitMonitor`
is a monitor that wraps the one Trinity would use (``monitor_args.flexkit_wraps``, default ``tensorboard``) and
adds, once per step, the metrics of every live :class:`~flexkit_trinity.FlexkitSelector` of its process (the
explorer's: where the scheduler and its selectors live), named as flexkit's :func:`flexkit.pipeline_metrics`
scheme:
``flexkit/selector/<taskset>/<key>`` (``predicted_pass_rate_mean`` for selectors that keep estimates, plus a
plugin selector's own ``summary()``).
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

from trinity.utils.monitor import MONITOR, Monitor

from flexkit import selector_metrics

__all__ = ["WRAPS_KEY", "FlexkitMonitor", "flexkit_metrics", "register_live", "selector_metrics_of"]

#: The ``monitor_args`` key naming the monitor :class:`FlexkitMonitor` wraps.
WRAPS_KEY = "flexkit_wraps"

#: The live flexkit selectors of this process, by taskset name (the newest one of a name wins).
_LIVE: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def register_live(selector: Any) -> None:
    """Make ``selector`` (a :class:`~flexkit_trinity.FlexkitSelector`) report to :func:`flexkit_metrics`."""
    _LIVE[selector.taskset_name] = selector


def selector_metrics_of(selector: Any) -> dict[str, float]:
    """One adapter selector's metrics, ``flexkit/selector/<taskset>/<key>`` (via
    :func:`flexkit.selector_metrics`)."""
    entry = SimpleNamespace(name=selector.taskset_name, selector=selector.selector, size=selector.size)
    metrics: dict[str, float] = selector_metrics(SimpleNamespace(entries=[entry]))
    return metrics


def flexkit_metrics() -> dict[str, float]:
    """The metrics of every live flexkit selector of this process."""
    out: dict[str, float] = {}
    for selector in list(_LIVE.values()):
        out.update(selector_metrics_of(selector))
    return out


class FlexkitMonitor(Monitor):
    """Trinity-RFT's monitor named by ``monitor_args.flexkit_wraps``, plus flexkit's selector metrics.

    Trinity-RFT builds it as ``cls(project=, group=, name=, role=, config=)`` (explorer and trainer each build
    one); the first :meth:`log` of each step gets :func:`flexkit_metrics` added (empty in a process without
    flexkit selectors, such as the trainer's).
    """

    def __init__(self, project: str, group: str, name: str, role: str, config: Any = None) -> None:
        args = dict(getattr(getattr(config, "monitor", None), "monitor_args", None) or {})
        wrapped = args.get(WRAPS_KEY) or "tensorboard"
        self.inner = MONITOR.get(wrapped)(project=project, group=group, name=name, role=role, config=config)
        self._last_step: int | None = None

    def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
        """Log ``data`` through the wrapped monitor, with flexkit's metrics on the step's first call."""
        if step != self._last_step:
            self._last_step = step
            extra = flexkit_metrics()
            if extra:
                data = {**data, **extra}
        self.inner.log(data, step, commit)

    def log_table(self, table_name: str, experiences_table: Any, step: int) -> None:
        """Forwarded to the wrapped monitor."""
        self.inner.log_table(table_name, experiences_table, step)

    def close(self) -> None:
        """Close the wrapped monitor (once)."""
        inner = self.__dict__.pop("inner", None)
        if inner is not None:
            inner.close()

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """``{"flexkit_wraps": "tensorboard"}``, Trinity-RFT's default monitor."""
        return {WRAPS_KEY: "tensorboard"}
