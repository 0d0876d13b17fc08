"""``flexkit validate`` and ``flexkit preview``: check a pipeline file, every row of its tasksets included, and
show what its scheduler would draw step by step, without a trainer."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from typing import TYPE_CHECKING

from flexkit._log import say
from flexkit.errors import ConfigError
from flexkit.pipeline._support import HostSupport, check_support

if TYPE_CHECKING:
    from flexkit.pipeline._pipeline import Pipeline
    from flexkit.scheduler._scheduler import TasksetScheduler

__all__ = ["cmd_preview", "cmd_validate"]


#: The entry-point group under which adapter distributions declare their :class:`HostSupport`.
HOSTS_GROUP = "flexkit.hosts"


def cmd_validate(args: argparse.Namespace) -> int:
    """``flexkit validate``: load each file and read every row of its tasksets; describe it or print its full
    error report."""
    from flexkit.pipeline._pipeline import load_pipeline

    status = 0
    for path in args.files:
        try:
            pipe = load_pipeline(path, plugins=args.plugin, overrides=args.overrides)
            sched = pipe.scheduler  # opens every taskset and builds every selector
            rows = _check_every_row(sched, path)
            host = _check_host(pipe, args.host)
        except ConfigError as exc:
            say("config_error", exc.report() if exc.source else exc.with_source(path).report(), level="error")
            status = 1
            continue
        print(f"{path}: valid" + (f" for {host.name}" if host else ""))
        for line in host.run_time_requirements(pipe) if host else []:
            print(f"  needs at run time: {line}")
        for line in pipe.describe():
            print(f"  {line}")
        print("  rows: every row read and parsed (" + ", ".join(f"{n}: {k}" for n, k in rows.items()) + ")")
    return status


def _check_host(pipe: Pipeline, host: str | None) -> HostSupport | None:
    """Refuse what the host would not honour (:func:`~flexkit.pipeline._support.check_support`); returns the host's
    support. ``host``: ``"run"`` (``flexkit run`` with the pipeline's ``[trainer]``, built but not set up: cheap; its
    :meth:`~flexkit.Trainer.check_setup` checks what its setup will read), a
    host's name from the ``flexkit.hosts`` entry points (``sampler``, the core's torch sampler; ``trl``, ``verl``,
    ``trinity``, ``ray`` from the adapters), or ``None``: ``run`` when the pipeline has a ``[trainer]``, else no
    host check."""
    if host is None and pipe.config.trainer is None:
        return None
    if host in (None, "run"):
        from flexkit.plugins._contract import check_trainer_setup
        from flexkit.run._runner import new_trainer, run_support

        trainer = new_trainer(pipe)
        support = run_support(pipe, trainer)
        check_support(pipe, support)
        check_trainer_setup(trainer, pipe)  # the files and columns its setup reads, without building a model
        return support
    support = host_support(host)
    check_support(pipe, support)
    return support


def host_support(name: str) -> HostSupport:
    """The :class:`~flexkit.pipeline._support.HostSupport` an installed adapter declares under ``name`` in the
    ``flexkit.hosts`` entry-point group; a :class:`~flexkit.ConfigError` naming the installed ones otherwise."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=HOSTS_GROUP)}
    if name not in found:
        known = ", ".join(["run", *sorted(found)])
        raise ConfigError(f"--for {name}: no such host installed (known: {known}); an adapter distribution "
                          f"declares its host under the {HOSTS_GROUP!r} entry points (e.g. pip install -e "
                          "plugins/flexkit-rft-trl)")
    support = found[name].load()
    if not isinstance(support, HostSupport):
        raise ConfigError(f"--for {name}: the entry point {found[name].value} is a {type(support).__name__}, "
                          "not a flexkit HostSupport")
    return support


def _check_every_row(sched: TasksetScheduler, source: str) -> dict[str, int]:
    """Read every row of every taskset of a scheduler; a bad row is a :class:`ConfigError` naming the taskset's
    position, its path and the row's line. Returns the rows checked per taskset."""
    from flexkit.errors import ConfigIssue, TasksetError
    from flexkit.tasksets._base import check_rows

    issues: list[ConfigIssue] = []
    checked: dict[str, int] = {}
    for i, entry in enumerate(sched.entries):
        try:
            checked[entry.name] = check_rows(entry.taskset)
        except TasksetError as exc:
            issues.append(ConfigIssue(f"tasksets[{i}]", str(exc)))
        except Exception as exc:  # a third-party storage's own error
            issues.append(ConfigIssue(f"tasksets[{i}]", f"taskset {entry.name!r}: reading every row failed: "
                                                        f"{type(exc).__name__}: {exc}"))
    if issues:
        raise ConfigError(issues, source)
    return checked


def cmd_preview(args: argparse.Namespace) -> int:
    """``flexkit preview``: draw ``--steps`` batches and print each one's mix, level / field bins, refill rounds
    and indices (:mod:`flexkit.cli._preview`)."""
    from flexkit.cli._preview import preview_steps
    from flexkit.pipeline._pipeline import load_pipeline

    if args.steps < 1:
        say("error", "error: --steps must be >= 1", level="error")
        return 2
    pipe = load_pipeline(args.file, plugins=args.plugin, overrides=args.overrides)
    sched = pipe.scheduler
    shown = 0
    try:
        for summary in preview_steps(pipe, args.steps, args.feedback):
            shown += 1
            print(json.dumps(summary.to_json()) if args.json else "\n".join(summary.lines()))
    finally:
        sched.close()
    if shown < args.steps:
        say("preview_end", f"(run ends after {sched.total_steps} steps)")
    return 0
