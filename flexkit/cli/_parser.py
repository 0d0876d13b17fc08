"""The argument parser of the ``flexkit`` command: every subcommand with its options, help and epilog, and the
options several of them share (``--plugin``, ``--no-pipeline-plugins``, ``-v``, ``--log-format``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from flexkit.cli._compare import cmd_compare
from flexkit.cli._pipeline import cmd_preview, cmd_validate
from flexkit.cli._registry import DEFAULT_SCHEMA_PATH, cmd_plugins, cmd_schema, version_report
from flexkit.cli._run import cmd_annotate, cmd_plot, cmd_run

__all__ = ["build_parser"]

_OVERRIDES_HELP = """\
  KEY    a dotted path into the TOML: run.total_steps, tasksets.0.selector.tau (numbers index
         arrays; tasksets[0] works too); missing tables are created
  VALUE  a TOML value: 0.5, true, "text", [1, 2] (a bare word such as random is a string), or
         an inline table, which replaces the whole table: tasksets.0.selector={type="random"}
  Setting a component's type to another one (tasksets.0.selector.type=random) drops the old
  component's parameters from its table, except the keys the same setting gives; for
  storage_type, which shares the [[tasksets]] table, replace the whole taskset table."""


class _Version(argparse.Action):
    """``--version``: the version and where each distribution came from (read only when asked), then exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        sys.stdout.write(version_report() + "\n")
        parser.exit()


class _RefusePipelinePlugins(argparse.Action):
    """``--no-pipeline-plugins``: sets ``FLEXKIT_NO_PIPELINE_PLUGINS=1`` for this process (and the runs it
    starts), so every pipeline it loads has its own ``plugins = [...]`` refused."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from flexkit.config._loader import ENV_NO_PIPELINE_PLUGINS

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
    parser.add_argument("--version", action=_Version,
                        help="show the version and where each flexkit distribution was installed from, and exit")
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
    p.add_argument("--for", dest="host", metavar="HOST", default=None,
                   help="also refuse what this host would not honour ([sample], [sample.refill], [replay], a guard "
                   "that needs evaluations): run (flexkit run with the [trainer], the default when there is one), "
                   "sampler (the torch FlexkitSampler in your own loop), or an installed adapter's name (trl, verl, "
                   "verl-legacy, trinity, ray)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE,...",
                   help="override keys of every FILE before checking it, as flexkit run --set does (repeatable)")
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
                   help="seeds per setting: N means 0..N-1, or a list such as 0,3,7 (one seed: 7,) (default 3; "
                   "at most 1000); replaces [run] seed")
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

    p = sub.add_parser("plot", help="draw a run's metrics: accuracy per level, task mix, pass rates, filtering, replay",
                       description="Write PNG plots of a flexkit run folder's metrics.jsonl into RUN_DIR/plots/ "
                       "(or --out), each when the run has data for it: overview.png, accuracy.png (test and "
                       "validation accuracy per level against steps and rollouts), mix.png (taskset and level mix "
                       "of the drawn tasks), pass_rates.png (the selectors' predicted pass rates of the drawn "
                       "tasks against the pool's), filtering.png (kept fraction, filter rounds; with a [sample] "
                       "stage) and replay.png (groups [replay] trained on again). Given compare results instead "
                       "(results.json files or compare folders, one or more), draw all their settings together: "
                       "accuracy.png and levels.png, as compare draws one comparison's, into plots/ beside the "
                       "first (or --out). Needs matplotlib: pip install \"flexkit-rft[plot]\".")
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="+",
                   help="a run folder written by flexkit run (or by compare); or compare results: results.json "
                        "files or compare folders")
    p.add_argument("--out", metavar="DIR", help="where to write the PNGs (default RUN_DIR/plots)")
    p.add_argument("--dpi", type=int, default=100, help="resolution of the PNGs (default 100)")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("preview", help="show what a pipeline would draw, step by step",
                       description="Run a pipeline's scheduler without a trainer and print each step's taskset "
                       "mix, its level mix (rows with a level), each taskset's mix over its selector's grouping "
                       "column (a label, or the selector's bins of a number; else the first categorical column), "
                       "bins of the --feedback FIELD, and the indices, "
                       "optionally feeding simulated rewards back to the selectors, to debug a curriculum. With "
                       "[sample.refill] and --feedback, each task's group is drawn from its simulated reward, the "
                       "pipeline's filter drops groups and the refill rounds are shown.")
    p.add_argument("file", metavar="FILE", help="pipeline TOML file")
    p.add_argument("--steps", type=int, default=10, help="number of steps to show (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object per step")
    p.add_argument("--feedback", default="none", metavar="none|random|FIELD",
                   help="simulated feedback after each step: none (default), uniform random rewards, or the "
                   "value of a numeric FIELD of each task row (e.g. a reference pass rate)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE,...",
                   help="override keys of FILE, as flexkit run --set does (repeatable)")
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
