"""The ``flexkit`` command line: ``plugins``, ``validate``, ``schema`` (and more as they come)."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flexkit._version import DISTRIBUTION, __version__
from flexkit.errors import ConfigError, FlexkitError
from flexkit.log import configure_cli_logging, say

DEFAULT_SCHEMA_PATH = Path("schemas") / "pipeline.schema.json"

#: Exit status after the reader of our output went away (``flexkit plugins | head``): a SIGPIPE death's.
EXIT_OUTPUT_CUT = 128 + 13

_OVERRIDES_HELP = """\
  KEY    a dotted path into the TOML: run.total_steps, tasksets.0.selector.tau (numbers index
         arrays; tasksets[0] works too); missing tables are created
  VALUE  a TOML value: 0.5, true, "text", [1, 2] (a bare word such as random is a string), or
         an inline table, which replaces the whole table: tasksets.0.selector={type="random"}
  Setting a component's type to another one (tasksets.0.selector.type=random) drops the old
  component's parameters from its table, except the keys the same setting gives; for
  storage_type, which shares the [[tasksets]] table, replace the whole taskset table."""


class _RefusePipelinePlugins(argparse.Action):
    """``--no-pipeline-plugins``: sets ``FLEXKIT_NO_PIPELINE_PLUGINS=1`` for this process (and the runs it
    starts), so every pipeline it loads has its own ``plugins = [...]`` refused."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from flexkit.config.loader import ENV_NO_PIPELINE_PLUGINS

        os.environ[ENV_NO_PIPELINE_PLUGINS] = "1"
        setattr(namespace, self.dest, True)


def _add_plugin_option(parser: argparse.ArgumentParser, *, pipelines: bool = True) -> None:
    """``--plugin`` (every command that loads plugins) and, for commands that load pipelines,
    ``--no-pipeline-plugins``."""
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_PATH",
        help="load an extra plugin for this command: a module name or a .py path (repeatable)",
    )
    if not pipelines:
        return
    parser.add_argument(
        "--no-pipeline-plugins",
        action=_RefusePipelinePlugins,
        help="refuse the pipeline file's own plugins = [...] instead of importing them (runs none of its code), "
        "to validate or preview an untrusted pipeline; same as FLEXKIT_NO_PIPELINE_PLUGINS=1",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """``-v`` and ``--log-format`` on a subcommand too (``flexkit run x.toml -v``); they add to / replace the
    ones given before the subcommand."""
    parser.add_argument("--log-format", dest="sub_log_format", choices=["console", "json"], default=None,
                        help="format of log output and messages on stderr (default: console)")
    parser.add_argument("-v", "--verbose", dest="sub_verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``flexkit`` command."""
    parser = argparse.ArgumentParser(
        prog="flexkit",
        description="Data-centric dynamic training for RL fine-tuning: task selection, curricula, "
        "taskset mixing, rollout filtering and reweighting, from TOML pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"flexkit {__version__}")
    parser.add_argument("--log-format", choices=["console", "json"], default="console",
                        help="format of log output and messages on stderr (default: console; also after the "
                        "command)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("plugins", help="list registered components and the plugins providing them",
                       description="List every registered component (selectors, scorers, actuators, feedback "
                       "operators, storages, trainers) with the plugin and distribution that provides it, and "
                       "report plugins that failed to load on stderr. Exit status: 0 when every plugin loaded, 1 "
                       "when one failed (the list still shows the others' components).")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    _add_plugin_option(p, pipelines=False)
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("validate", help="check pipeline files and describe them",
                       description="Validate pipeline TOML files. Prints a description of each valid file; "
                       "for an invalid one prints every problem with its key path and exits non-zero.")
    p.add_argument("files", nargs="+", metavar="FILE", help="pipeline TOML file(s)")
    _add_plugin_option(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="run a pipeline end to end with its [trainer] backend",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run a pipeline with the trainer its [trainer] table names: select tasks, roll\n"
                       "out, feed rewards back, apply the sample stage, update. Writes a run folder with the\n"
                       "resolved config, metrics.jsonl and checkpoints, and prints accuracy before and after.",
                       epilog=f"""overrides (the same syntax as flexkit compare, without NAME:):
{_OVERRIDES_HELP}
  All --set options form one setting, applied in order. With --resume, give the same FILE and
  --set options (a larger run.total_steps extends a finished run).

example:
  flexkit run examples/quickstart.toml --set run.total_steps=100,run.eval_every=25 \\
      --set tasksets.0.selector.type=random""")
    p.add_argument("file", metavar="FILE", help="pipeline TOML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE,...",
                   help="override keys of FILE for this run (repeatable; see below)")
    p.add_argument("--out", metavar="DIR", help="run folder (default: a fresh dated folder under runs/)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--tensorboard", action="store_true",
                   help="also log flexkit/... metrics to RUN_DIR/tensorboard "
                   "(pip install \"flexkit-rft[tensorboard]\")")
    p.add_argument("--wandb", action="store_true",
                   help="also log them to an offline Weights & Biases run in RUN_DIR/wandb "
                   "(pip install \"flexkit-rft[wandb]\")")
    _add_plugin_option(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("annotate", help="measure the trainer policy's pass rate on every task of a taskset",
                       description="Run the pipeline's [trainer] policy (its rollout) K times over a taskset and "
                       "write a copy of the taskset with each task's measured pass rate as a new column, for "
                       "difficulty-aware selectors' feature_keys. Interrupted? Run the same command again: it "
                       "continues from OUT.partial.")
    p.add_argument("file", metavar="PIPELINE", help="pipeline TOML file with a [trainer] table")
    p.add_argument("--samples", "-k", type=int, required=True, metavar="K",
                   help="responses per task (rounded up to whole rollouts of the trainer's group size)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="output file: .jsonl, or .parquet (needs pyarrow); other suffixes are refused")
    p.add_argument("--column", default="pass_rate",
                   help="name of the new column (default pass_rate); an existing column is refused without "
                   "--overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the values of --column when the taskset already has that column")
    p.add_argument("--taskset", metavar="NAME", help="which taskset (required when the pipeline has several)")
    p.add_argument("--checkpoint", metavar="RUN_DIR",
                   help="use the trainer state of this run folder's checkpoint (e.g. a stronger reference policy)")
    p.add_argument("--chunk", type=int, metavar="N", help="tasks per rollout call (default: [run] batch_size)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_plugin_option(p)
    p.set_defaults(func=cmd_annotate)

    p = sub.add_parser("compare", help="compare settings of a pipeline over several seeds, with intervals",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Run a pipeline (with its [trainer]) under several settings and seeds, then\n"
                       "report final eval accuracy (overall and per level), steps/rollouts to each target accuracy,\n"
                       "accuracy at each rollout budget and the cost per run (steps, optimizer steps, trained\n"
                       "samples, rollouts, seconds) as mean ± 95% Student-t interval over seeds (from 3 seeds on;\n"
                       "with fewer, the mean and n). Writes OUT/<setting>/seed<k>/ run folders, OUT/results.md,\n"
                       "OUT/results.json, OUT/accuracy.png and OUT/levels.png (the plots need matplotlib:\n"
                       "pip install \"flexkit-rft[plot]\").",
                       epilog=f"""settings:
  --set NAME:KEY=VALUE[,KEY=VALUE...]   a named setting (NAME names its folder)
  --set NAME:                           no overrides (the file as it is)
{_OVERRIDES_HELP}

example:
  flexkit compare examples/simulated.toml --seeds 5 \\
      --set random:tasksets.0.selector.type=random \\
      --set 'difficulty:tasksets.0.selector.target_reward=0.5'

The default target is initial + 90% of the way to the best setting's mean final accuracy.

failed runs: a run that fails or is killed does not stop the others. Every other run finishes,
the reports cover the finished runs and list the failed ones (setting, seed, exit status, the end
of stderr), and the command exits 1. Run the same command again: it reuses the finished runs and
runs the failed or missing ones again from the start. Ctrl-C writes the reports of what finished.""")
    p.add_argument("file", metavar="FILE", help="pipeline TOML file (with a [trainer] and [run] eval_every > 0)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                   help="a named setting: overrides of the file's keys (repeatable; see below). Without any, "
                   "the file is run as it is under the name 'baseline'")
    p.add_argument("--seeds", default="3", metavar="N|LIST",
                   help="seeds per setting: N means 0..N-1, or a list such as 0,3,7 (default 3; at most "
                   "1000); replaces [run] seed")
    p.add_argument("--target", metavar="ACC[,ACC...]",
                   help="target eval accuracy for steps/rollouts to target, or several: 0.3,0.4,0.5 (default: "
                   "the initial accuracy plus 90%% of the way to the best setting's mean final accuracy)")
    p.add_argument("--budget", metavar="ROLLOUTS[,ROLLOUTS...]",
                   help="rollout budget for 'accuracy at budget', or several: 200000,400000 (default: the fewest "
                   "rollouts any run generated); budgets do not stop runs ([run] max_rollouts does)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: a fresh dated folder under runs/); the "
                   "folder of an earlier call is continued: its finished runs are reused")
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="runs in parallel, each in its own process with cpu_count/N threads (default 1)")
    _add_plugin_option(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("plot", help="draw a run's metrics: accuracy per level, task mix, pass rates, filtering",
                       description="Write PNG plots of a flexkit run folder's metrics.jsonl into RUN_DIR/plots/ "
                       "(or --out): overview.png, accuracy.png (held-out accuracy per level against steps and "
                       "rollouts), mix.png (taskset and level mix of the drawn tasks), pass_rates.png (the "
                       "selectors' predicted pass rates of the drawn tasks against the pool's) and filtering.png "
                       "(kept fraction, filter rounds). Needs matplotlib: pip install \"flexkit-rft[plot]\".")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder written by flexkit run (or by compare)")
    p.add_argument("--out", metavar="DIR", help="where to write the PNGs (default RUN_DIR/plots)")
    p.add_argument("--dpi", type=int, default=100, help="resolution of the PNGs (default 100)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("preview", help="show what a pipeline would draw, step by step",
                       description="Run a pipeline's scheduler without a trainer and print each step's taskset "
                       "mix, its level mix (rows with a level) or bins of the --feedback FIELD, and the indices, "
                       "optionally feeding simulated rewards back to the selectors, to debug a curriculum. With "
                       "[sample.refill] and --feedback, each task's group is drawn from its simulated reward, the "
                       "pipeline's filter drops groups and the refill rounds are shown.")
    p.add_argument("file", metavar="FILE", help="pipeline TOML file")
    p.add_argument("--steps", type=int, default=10, help="number of steps to show (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object per step")
    p.add_argument("--feedback", default="none", metavar="none|random|FIELD",
                   help="simulated feedback after each step: none (default), uniform random rewards, or the "
                   "value of a numeric FIELD of each task row (e.g. a reference pass rate)")
    _add_plugin_option(p)
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("schema", help="print, write or check the pipeline JSON Schema",
                       description="Generate the pipeline JSON Schema (draft-07) from the config classes and "
                       "the registered components. By default it covers flexkit's own components; "
                       "--all-plugins adds every installed plugin's.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help=f"exit non-zero if the file (--output, default {DEFAULT_SCHEMA_PATH}) is out of date")
    p.add_argument("--output", "-o", metavar="PATH", help="write the schema to PATH instead of stdout")
    p.add_argument("--all-plugins", action="store_true", help="include components of installed plugins")
    _add_plugin_option(p, pipelines=False)
    p.add_argument("--distribution", action="append", default=[], metavar="NAME",
                   help="also include the components of this installed distribution (repeatable), e.g. "
                   "flexkit-rft-toyrl for schemas/toyrl.schema.json")
    p.set_defaults(func=cmd_schema)
    for command in sub.choices.values():
        _add_output_options(command)
    return parser


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
    except KeyboardInterrupt:
        say("interrupted", "interrupted", level="warning")
        return 130


def _plugin_host(specs: Sequence[str]) -> object:
    """The plugin host with ``--plugin`` specs (paths relative to the current directory) added; a plugin that
    does not load is a :class:`ConfigError` naming its ``--plugin``."""
    import attrs

    from flexkit.plugins import plugin_host_for

    try:
        return plugin_host_for(specs)
    except ConfigError as exc:
        raise ConfigError([attrs.evolve(i, path=i.path.replace("plugins", "--plugin", 1)) for i in exc.issues],
                          exc.source) from None


def cmd_plugins(args: argparse.Namespace) -> int:
    """``flexkit plugins``: components per stage with their plugin, distribution and version; exit status 1
    when a plugin failed to load."""
    host = _plugin_host(args.plugin)
    rows = [
        {"name": c.name, "stage": c.stage, "plugin": c.plugin, "distribution": c.distribution,
         "version": c.version, "description": c.description}
        for c in host.all_components()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        current = None
        for row in rows:
            if row["stage"] != current:
                current = row["stage"]
                print(f"{current}:")
            origin = f"{row['distribution'] or 'local'} {row['version'] or ''}".strip()
            print(f"  {row['name']:<22} {origin:<22} {row['description']}")
    for failure in host.failures:
        say("plugin_problem", f"problem: {failure}", level="warning", plugin=failure.plugin,
            distribution=failure.distribution, phase=failure.phase, error=failure.error)
    return 1 if host.failures else 0


def cmd_validate(args: argparse.Namespace) -> int:
    """``flexkit validate``: load each file and read every row of its tasksets; describe it or print its full
    error report."""
    from flexkit.pipeline import load_pipeline

    status = 0
    for path in args.files:
        try:
            pipe = load_pipeline(path, plugins=args.plugin)
            sched = pipe.scheduler  # opens every taskset and builds every selector
            rows = _check_every_row(sched, path)
        except ConfigError as exc:
            say("config_error", exc.report() if exc.source else exc.with_source(path).report(), level="error")
            status = 1
            continue
        print(f"{path}: valid")
        for line in pipe.describe():
            print(f"  {line}")
        print("  rows: every row read and parsed (" + ", ".join(f"{n}: {k}" for n, k in rows.items()) + ")")
    return status


def _check_every_row(sched: object, source: str) -> dict[str, int]:
    """Read every row of every taskset of a scheduler; a bad row is a :class:`ConfigError` naming the taskset's
    position, its path and the row's line. Returns the rows checked per taskset."""
    from flexkit.errors import ConfigIssue, TasksetError
    from flexkit.tasksets.base import check_rows

    issues: list[ConfigIssue] = []
    checked: dict[str, int] = {}
    for i, entry in enumerate(sched.entries):  # type: ignore[attr-defined]
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


def cmd_run(args: argparse.Namespace) -> int:
    """``flexkit run``: drive the pipeline's trainer to the end; print the before/after summary."""
    from flexkit.runner import RunInterrupted, default_run_dir, run_pipeline, summary_lines

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        say("error", "error: give --resume RUN_DIR or --out DIR, not both", level="error")
        return 2
    pipe = _load_with_overrides(args.file, args.overrides, args.plugin)
    run_dir = Path(args.resume) if args.resume else Path(args.out) if args.out else default_run_dir(
        name=Path(args.file).stem)
    trackers = None
    if args.tensorboard or args.wandb:
        import attrs

        from flexkit.trackers import Trackers

        config = json.loads(json.dumps(attrs.asdict(pipe.config), default=str))
        trackers = Trackers(run_dir, tensorboard=args.tensorboard, wandb=args.wandb, config=config)
    try:
        result = run_pipeline(pipe, run_dir=run_dir, resume=bool(args.resume),
                              progress=None if args.quiet else sys.stderr, trackers=trackers)
    except RunInterrupted as stop:
        _say_interrupted(args, stop)
        return 130
    finally:
        if trackers is not None:
            trackers.close()
    print("\n".join(summary_lines(result)))
    return 0


def resume_command(args: argparse.Namespace, run_dir: Path) -> str:
    """The ``flexkit run`` command line that continues ``args``' run from ``run_dir``'s checkpoint: the same
    FILE, ``--set`` and plugin options, with ``--resume RUN_DIR``."""
    import shlex

    words = ["flexkit", "run", args.file]
    for override in args.overrides:
        words += ["--set", override]
    for plugin in args.plugin:
        words += ["--plugin", plugin]
    if args.no_pipeline_plugins:
        words.append("--no-pipeline-plugins")
    words += ["--resume", str(run_dir)]
    return shlex.join(words)


def _say_interrupted(args: argparse.Namespace, stop: object) -> None:
    """After Ctrl-C: the last checkpoint's step and the command that continues from it."""
    run_dir, step = stop.run_dir, stop.checkpoint_step  # type: ignore[attr-defined]
    if step is None:
        say("run_interrupted", f"\ninterrupted before the first checkpoint of {run_dir}: nothing to resume; start "
            f"again with --out {run_dir} (it reuses the folder)", level="warning", run_dir=str(run_dir),
            checkpoint_step=None)
        return
    command = resume_command(args, run_dir)
    say("run_interrupted", f"\ninterrupted; the last checkpoint is at step {step} in {run_dir}\n"
        f"continue with: {command}", level="warning", run_dir=str(run_dir), checkpoint_step=step,
        resume_command=command)


def _load_with_overrides(path: str, overrides: Sequence[str], plugins: Sequence[str]) -> object:
    """The pipeline at ``path`` with ``--set`` overrides applied (error reports name the file and the
    overrides)."""
    from flexkit.pipeline import load_pipeline

    return load_pipeline(path, plugins=plugins, overrides=overrides)


def cmd_annotate(args: argparse.Namespace) -> int:
    """``flexkit annotate``: write the taskset with the trainer policy's measured pass rate per task."""
    from flexkit.annotate import annotate
    from flexkit.pipeline import load_pipeline

    if args.samples < 1 or (args.chunk is not None and args.chunk < 1):
        say("error", "error: --samples and --chunk must be >= 1", level="error")
        return 2
    pipe = load_pipeline(args.file, plugins=args.plugin)
    out = annotate(pipe, out=args.out, samples=args.samples, column=args.column, taskset=args.taskset,
                   checkpoint=args.checkpoint, chunk=args.chunk, overwrite=args.overwrite,
                   progress=None if args.quiet else sys.stderr)
    print(f"wrote {out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``flexkit compare``: run every setting under every seed; print the results table."""
    from flexkit.compare import Setting, compare, parse_seeds, parse_setting, render_table
    from flexkit.runner import default_run_dir

    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        say("error", f"error: {exc}", level="error")
        return 2
    try:
        targets = _number_list(args.target, float, "--target")
        budgets = _number_list(args.budget, int, "--budget")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = [parse_setting(spec) for spec in args.settings] or [Setting("baseline", (), "baseline:")]
    out = Path(args.out) if args.out else default_run_dir(name=f"compare-{Path(args.file).stem}")
    result = compare(args.file, settings, seeds, out, _one_or_all(targets), budget=_one_or_all(budgets),
                     plugins=args.plugin, progress=None if args.quiet else sys.stderr, jobs=args.jobs)
    print(render_table(result.results, result.targets, result.budgets))
    if len(result.targets) == 1:
        print(f"\ntarget eval accuracy: {result.target_rule}")
    else:
        print(f"\ntarget eval accuracies: {', '.join(f'{t:g}' for t in result.targets)} (--target)")
    if len(result.budgets) == 1:
        print(f"rollout budget: {result.budget_rule}")
    else:
        print(f"rollout budgets: {', '.join(f'{b:,}' for b in result.budgets)} (--budget)")
    plots = "".join(f", {p}" for p in (result.plot, result.level_plot) if p)
    print(f"results: {out / 'results.md'}{plots}")
    if result.failures:
        print(f"{len(result.failures)} run(s) FAILED: "
              + ", ".join(f"{name} seed {f.seed}" for name, f in result.failures)
              + " (see results.md; run the same command again to run them again)", file=sys.stderr)
        return 1
    return 0


#: The most values ``--target`` or ``--budget`` takes.
MAX_LIST_VALUES = 100


def _number_list(text: str | None, kind: type, option: str) -> list[Any]:
    """``--target`` / ``--budget``: one number or a comma-separated list; raises ``ValueError``."""
    if text is None:
        return []
    items = text.split(",")
    if len(items) > MAX_LIST_VALUES:
        raise ValueError(f"{option}: at most {MAX_LIST_VALUES} values, got {len(items)}")
    try:
        values = [kind(item.strip()) for item in items]
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{option} {text}: expected {what} or a comma-separated list of them") from None
    if kind is int and any(v < 1 for v in values):
        raise ValueError(f"{option} must be >= 1")
    if kind is float and not all(math.isfinite(v) for v in values):
        raise ValueError(f"{option} {text}: expected finite numbers")
    if len(set(values)) != len(values):
        raise ValueError(f"{option} {text}: give each value once")
    return values


def _one_or_all(values: list[Any]) -> Any:
    """``None`` for no values, the value for one, the list for several (a single value reproduces the earlier
    command line exactly)."""
    return None if not values else values[0] if len(values) == 1 else values


def cmd_plot(args: argparse.Namespace) -> int:
    """``flexkit plot``: write a run folder's PNGs; print their paths."""
    from flexkit.plot import plot_run

    if not Path(args.run_dir).is_dir():
        say("error", f"error: no run folder {args.run_dir}", level="error")
        return 1
    if args.dpi < 10:
        say("error", "error: --dpi must be >= 10", level="error")
        return 2
    def note(text: str) -> None:
        print(f"note: not drawn: {text}", file=sys.stderr)

    for path in plot_run(args.run_dir, args.out, dpi=args.dpi, on_skip=note):
        print(path)
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    """``flexkit preview``: draw ``--steps`` batches and print each one's mix, level / field bins, refill rounds
    and indices (:mod:`flexkit.preview`)."""
    from flexkit.pipeline import load_pipeline
    from flexkit.preview import preview_steps

    if args.steps < 1:
        say("error", "error: --steps must be >= 1", level="error")
        return 2
    pipe = load_pipeline(args.file, plugins=args.plugin)
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


def cmd_schema(args: argparse.Namespace) -> int:
    """``flexkit schema``: print, write or check the JSON Schema."""
    from flexkit.config.schema import REGENERATE_COMMAND, dumps, pipeline_schema

    host = _plugin_host(args.plugin)
    wanted, local = {DISTRIBUTION, *args.distribution}, set(args.plugin)
    missing = sorted(set(args.distribution) - {c.distribution for c in host.all_components()})
    if missing:
        say("error", f"error: no installed distribution registers components: {', '.join(missing)}", level="error")
        return 2
    include = None if args.all_plugins else (lambda c: c.distribution in wanted or c.plugin in local)
    text = dumps(pipeline_schema(host, include))
    if args.check:
        path = Path(args.output) if args.output else DEFAULT_SCHEMA_PATH
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            say("schema_check_failed", f"{path}: missing; regenerate with: {REGENERATE_COMMAND}", level="error")
            return 1
        if current != text:
            say("schema_check_failed", f"{path}: out of date; regenerate with: {REGENERATE_COMMAND}", level="error")
            return 1
        print(f"{path}: up to date")
        return 0
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
