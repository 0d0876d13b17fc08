"""One ``flexkit compare`` run in a process of its own (``--jobs`` > 1): ``python -m flexkit.compare._worker JOB``.

``JOB`` is a JSON file: the pipeline's varied TOML data, its base folder, source, plugins, run folder and the
file to write the run's first and last evaluations and seconds into. Exit status 0 when the run finished, 1 on
a flexkit error (its message on stderr) and 1 with a traceback on any other error, as ``flexkit run`` does; a
run killed by a signal ends with that signal, which the comparison reports. The math libraries' thread count
comes with the environment (``OMP_NUM_THREADS`` and its kin).

A worker whose parent (the ``compare`` command) is gone ends too, within a second, with status
:data:`ORPHANED_EXIT`: a ``compare`` killed by a signal it cannot catch would otherwise leave its runs going on,
and running the same command again, which clears and reruns unfinished runs, would share their folders with them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ORPHANED_EXIT", "compared_evaluation", "exit_with_parent", "main", "run_job"]

#: Exit status of a worker that ended because its parent was gone.
ORPHANED_EXIT = 75


def exit_with_parent(parent: int, interval: float = 1.0) -> threading.Thread:
    """Watch, every ``interval`` seconds, whether this process's parent is still ``parent``; when it is not (the
    parent died and the process was handed to another), end this process at once (status
    :data:`ORPHANED_EXIT`). Returns the watching (daemon) thread."""

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(ORPHANED_EXIT)

    thread = threading.Thread(target=watch, name="flexkit-compare-parent-watch", daemon=True)
    thread.start()
    return thread


def run_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """Run the job's pipeline into its run folder; return its first and last evaluations and seconds taken.
    ``job`` is JSON data (the job file's, or :class:`~flexkit.compare._execution.Job` as a dict)."""
    from flexkit.pipeline._pipeline import pipeline_from_dict
    from flexkit.run._runner import run_pipeline

    t0 = time.monotonic()
    pipe = pipeline_from_dict(job["data"], base_dir=Path(str(job["base_dir"])), source=str(job["source"]),
                              plugins=list(job["plugins"]))
    run = run_pipeline(pipe, run_dir=str(job["run_dir"]), progress=None)
    return {"first_eval": compared_evaluation(run.first_eval, "first"),
            "last_eval": compared_evaluation(run.last_eval, "last"), "seconds": time.monotonic() - t0}


def compared_evaluation(evaluation: Mapping[str, Any], which: str) -> dict[str, float]:
    """The finite numbers of a run's ``which`` (first or last) evaluation, what ``compare`` reports; a value
    that is not one (``None``, NaN, text) is left out. Raises :class:`~flexkit.errors.ComponentError` when
    ``eval_accuracy``, the accuracy every report is about, is missing or not a finite number."""
    from flexkit._metric_names import TRAINER_EVAL_ACCURACY as EVAL_ACCURACY
    from flexkit._state_problems import is_number, short
    from flexkit.errors import ComponentError

    accuracy = evaluation.get(EVAL_ACCURACY)
    if not is_number(accuracy):
        got = short(accuracy) if EVAL_ACCURACY in evaluation else f"no such key (keys: {short(sorted(evaluation))})"
        raise ComponentError(f"flexkit compare reads the trainer's held-out accuracy as {EVAL_ACCURACY!r}, a finite "
                             f"number, and the run's {which} evaluation has {got}: make the trainer's evaluate() "
                             f"return it (a value in [0, 1])")
    return {key: float(value) for key, value in evaluation.items() if is_number(value)}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the job in ``argv[0]`` and write its result file; returns the exit status."""
    from flexkit.errors import ConfigError, FlexkitError

    job_file = Path((argv if argv is not None else sys.argv[1:])[0])
    job = json.loads(job_file.read_text(encoding="utf-8"))
    if argv is None:  # run as its own process by the comparison (not called in-process)
        exit_with_parent(os.getppid())
    try:
        result = run_job(job)
    except FlexkitError as exc:
        print(exc.report() if isinstance(exc, ConfigError) else f"error: {exc}", file=sys.stderr)
        return 1
    Path(job["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a subprocess
    sys.exit(main())
