"""Logging set-up for the command line only: library code never configures logging.

Library modules call ``structlog.get_logger(...)`` and bind context; only :func:`configure_cli_logging`
(called by ``flexkit``'s entry point) decides where output goes — always stderr, so ``flexkit schema > file``
stays clean.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["console", "json"]


def configure_cli_logging(fmt: LogFormat = "console", level: int = logging.WARNING) -> None:
    """Send structlog output to stderr as coloured console lines or JSON objects, at ``level`` and above."""
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
