"""The ``flexkit`` command line: :func:`main`, its entry point (``flexkit = "flexkit.cli.main:main"``), which runs a
command and turns its errors into messages and exit statuses.

The parser is :mod:`flexkit.cli._parser`; the commands live in :mod:`flexkit.cli._registry` (``plugins``,
``schema``), :mod:`flexkit.cli._pipeline` (``validate``, ``preview``), :mod:`flexkit.cli._run` (``run``,
``annotate``, ``plot``) and :mod:`flexkit.cli._compare` (``compare``), and are importable from here as before.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from flexkit._log import configure_cli_logging, say
from flexkit.cli._compare import MAX_LIST_VALUES, cmd_compare
from flexkit.cli._parser import build_parser
from flexkit.cli._pipeline import cmd_preview, cmd_validate
from flexkit.cli._registry import DEFAULT_SCHEMA_PATH, cmd_plugins, cmd_schema
from flexkit.cli._run import cmd_annotate, cmd_plot, cmd_run, resume_command
from flexkit.cli._signals import EXIT_TERMINATED, exit_status, sigterm_as_interrupt
from flexkit.errors import ConfigError, FlexkitError

__all__ = ["DEFAULT_SCHEMA_PATH", "EXIT_OUTPUT_CUT", "MAX_LIST_VALUES", "build_parser", "cmd_annotate", "cmd_compare",
           "cmd_plot", "cmd_plugins", "cmd_preview", "cmd_run", "cmd_schema", "cmd_validate", "main",
           "resume_command"]

#: Exit status after the reader of our output went away (``flexkit plugins | head``): a SIGPIPE death's.
EXIT_OUTPUT_CUT = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flexkit`` command; returns the exit status.

    When the reader of the output goes away (``flexkit plugins | head``), the command stops quietly with status
    141, as a tool killed by SIGPIPE does, instead of ending in a ``BrokenPipeError`` traceback.
    """
    try:
        try:
            status = _main(argv)
        finally:  # also after --help or a usage error (SystemExit): flush here, where a cut pipe is handled
            sys.stdout.flush()
    except BrokenPipeError:
        return _output_cut()
    return status


def _output_cut() -> int:
    """Point stdout and stderr at /dev/null, so that nothing more (not even the interpreter's last flush) fails
    on the cut pipe; the exit status of a tool killed by SIGPIPE."""
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # replaced by a test or an embedding application
            continue
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)
    return EXIT_OUTPUT_CUT


def _main(argv: Sequence[str] | None) -> int:
    """Parse the arguments and run the command, with errors as messages."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose + getattr(args, "sub_verbose", 0)
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    configure_cli_logging(getattr(args, "sub_log_format", None) or args.log_format, level)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with sigterm_as_interrupt():
            return int(args.func(args) or 0)
    except ConfigError as exc:
        say("config_error", exc.report(), level="error", issues=[str(issue) for issue in exc.issues])
        return 1
    except FlexkitError as exc:
        say("error", f"error: {exc}", level="error", error=type(exc).__name__)
        return 1
    except BrokenPipeError:
        raise  # the output was cut: main() ends quietly
    except OSError as exc:  # a full or read-only disk, a folder that vanished: a message, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        say("error", f"error: {where}{exc.strerror or exc}", level="error", error=type(exc).__name__)
        return 1
    except KeyboardInterrupt as exc:
        status = exit_status(exc)
        say("interrupted", "terminated" if status == EXIT_TERMINATED else "interrupted", level="warning")
        return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
