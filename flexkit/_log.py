"""Logging set-up for the command line only: library code never configures logging.

Library modules call ``structlog.get_logger(...)`` and bind context; only :func:`configure_cli_logging`
(called by ``flexkit``'s entry point) decides where output goes — always stderr, so ``flexkit schema > file``
stays clean.

Messages for the person running a command (an error, where a resumed run continues, how to resume an
interrupted one) go through :func:`say`: plain text on stderr, or with ``--log-format json`` one JSON object per
message (``event``, ``level``, ``message``, ``timestamp`` and the message's fields), like every log line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import IO, Any, Literal

import structlog

LogFormat = Literal["console", "json"]

#: The format :func:`configure_cli_logging` chose; ``None`` when flexkit runs as a library.
_cli_format: LogFormat | None = None

_log = structlog.get_logger("flexkit")


def configure_cli_logging(fmt: LogFormat = "console", level: int = logging.WARNING) -> None:
    """Send structlog output to stderr as coloured console lines or JSON objects, at ``level`` and above."""
    global _cli_format
    _cli_format = fmt
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def say(event: str, message: str, *, level: str = "info", stream: IO[str] | None = None, **fields: Any) -> None:
    """Tell the person running a command ``message``.

    On the command line it is written to ``stream`` (default stderr) as it is, or under ``--log-format json`` as
    one JSON object with ``event``, ``level``, ``message``, ``timestamp`` and ``fields``; it is shown at every
    verbosity (it is the command's own output, not a diagnostic). In library use it is a structlog event at
    ``level`` with the same fields, which the host application's logging configuration shows or not.
    """
    if _cli_format is None:
        if level == "debug":
            _log.debug(event, message=message, **fields)
        elif level == "warning":
            _log.warning(event, message=message, **fields)
        elif level == "error":
            _log.error(event, message=message, **fields)
        else:  # "info", and any other level
            _log.info(event, message=message, **fields)
        return
    out = stream if stream is not None else sys.stderr
    if _cli_format == "json":
        record = {"event": event, "level": level, "message": message, **fields,
                  "timestamp": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}
        out.write(json.dumps(record, default=str) + "\n")
    else:
        out.write(message + "\n")
    out.flush()
