"""Calling the lifecycle hooks (``flexkit_on_select``, ``flexkit_on_feedback``): observers see, never steer.

The scheduler calls them after the event is committed and outside its lock, through :func:`notify`. An
observer that raises cannot undo the event or stop the run: its error is logged as a warning (logger
``flexkit.observers``, event ``observer_failed``, naming the hook, the step and the error) and the call
returns. Both hooks are reported the same way. A ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``, the
injected :class:`flexkit.testing.Crash`) is not an observer's failure: it passes through and ends the caller.
"""

from __future__ import annotations

from typing import Any

import structlog

log = structlog.get_logger("flexkit.observers")


def notify(hooks: Any, hook: str, **kwargs: Any) -> None:
    """Call lifecycle hook ``hook`` of the pluggy relay ``hooks`` (None: no observers) with ``kwargs``; an
    exception raised by an observer is logged, not raised (the observers after it miss this one event)."""
    if hooks is None:
        return
    try:
        getattr(hooks, hook)(**kwargs)
    except Exception as exc:
        log.warning("observer_failed", hook=hook, step=kwargs.get("step"), error=f"{type(exc).__name__}: {exc}",
                    exc_info=exc)
