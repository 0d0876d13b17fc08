"""``flexkit run``, ``flexkit annotate`` and ``flexkit plot``: train with a pipeline's ``[trainer]`` (and say how
to resume after Ctrl-C), measure the trainer policy's pass rates, and draw what a run wrote."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flexkit._log import say
from flexkit.cli._signals import exit_status

if TYPE_CHECKING:
    from flexkit.pipeline._pipeline import Pipeline
    from flexkit.run._runner import RunInterrupted

__all__ = ["cmd_annotate", "cmd_plot", "cmd_run", "resume_command"]


def cmd_run(args: argparse.Namespace) -> int:
    """``flexkit run``: drive the pipeline's trainer to the end; print the before/after summary."""
    from flexkit.run._runner import RunInterrupted, default_run_dir, run_pipeline, summary_lines

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        say("error", "error: give --resume RUN_DIR or --out DIR, not both", level="error")
        return 2
    pipe = _load_with_overrides(args.file, args.overrides, args.plugin)
    run_dir = Path(args.resume) if args.resume else Path(args.out) if args.out else default_run_dir(
        name=Path(args.file).stem)
    trackers = None
    if args.tensorboard or args.wandb:
        import attrs

        from flexkit.cli._trackers import Trackers

        config = json.loads(json.dumps(attrs.asdict(pipe.config), default=str))
        trackers = Trackers(run_dir, tensorboard=args.tensorboard, wandb=args.wandb, config=config)
    try:
        result = run_pipeline(pipe, run_dir=run_dir, resume=bool(args.resume),
                              progress=None if args.quiet else sys.stderr, trackers=trackers)
    except RunInterrupted as stop:
        _say_interrupted(args, stop)
        return exit_status(stop)
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


def _say_interrupted(args: argparse.Namespace, stop: RunInterrupted) -> None:
    """After Ctrl-C: the last checkpoint's step and the command that continues from it."""
    run_dir, step = stop.run_dir, stop.checkpoint_step
    if step is None:
        say("run_interrupted", f"\ninterrupted before the first checkpoint of {run_dir}: nothing to resume; start "
            f"again with --out {run_dir} (it reuses the folder)", level="warning", run_dir=str(run_dir),
            checkpoint_step=None)
        return
    command = resume_command(args, run_dir)
    say("run_interrupted", f"\ninterrupted; the last checkpoint is at step {step} in {run_dir}\n"
        f"continue with: {command}", level="warning", run_dir=str(run_dir), checkpoint_step=step,
        resume_command=command)


def _load_with_overrides(path: str, overrides: Sequence[str], plugins: Sequence[str]) -> Pipeline:
    """The pipeline at ``path`` with ``--set`` overrides applied (error reports name the file and the
    overrides)."""
    from flexkit.pipeline._pipeline import load_pipeline

    return load_pipeline(path, plugins=plugins, overrides=overrides)


def cmd_annotate(args: argparse.Namespace) -> int:
    """``flexkit annotate``: write the taskset with the trainer policy's measured pass rate per task."""
    from flexkit.annotate._command import annotate
    from flexkit.pipeline._pipeline import load_pipeline

    if args.samples < 1 or (args.chunk is not None and args.chunk < 1):
        say("error", "error: --samples and --chunk must be >= 1", level="error")
        return 2
    pipe = load_pipeline(args.file, plugins=args.plugin)
    out = annotate(pipe, out=args.out, samples=args.samples, column=args.column, taskset=args.taskset,
                   checkpoint=args.checkpoint, chunk=args.chunk, overwrite=args.overwrite,
                   progress=None if args.quiet else sys.stderr)
    print(f"wrote {out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """``flexkit plot``: write a run folder's PNGs; print their paths."""
    from flexkit.compare._saved import is_results_path, plot_saved
    from flexkit.plot._figures import plot_run
    from flexkit.run._folder import METRICS_FILE

    if args.dpi < 10:
        say("error", "error: --dpi must be >= 10", level="error")
        return 2
    paths = [Path(p) for p in args.run_dir]
    first = paths[0]
    one_run = len(paths) == 1 and not first.is_file() and ((first / METRICS_FILE).is_file()
                                                             or not is_results_path(first))
    if not one_run:
        wrong = [str(p) for p in paths if not is_results_path(p)]
        if wrong:
            say("error", f"error: not compare results (a results.json file or a compare folder): {', '.join(wrong)}; "
                "flexkit plot draws one run folder, or one or more compare results together", level="error")
            return 1
        for path in plot_saved(paths, args.out, dpi=args.dpi):
            print(path)
        return 0
    if not first.is_dir():
        say("error", f"error: no run folder {first}", level="error")
        return 1
    def note(text: str) -> None:
        print(f"note: not drawn: {text}", file=sys.stderr)

    for path in plot_run(first, args.out, dpi=args.dpi, on_skip=note):
        print(path)
    return 0
