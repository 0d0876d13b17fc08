"""``flexkit compare``: run one pipeline under several settings and seeds, and report with intervals.

A **setting** is a name plus overrides of the pipeline's TOML data, written on the command line as::

    --set NAME:KEY=VALUE[,KEY=VALUE...]        e.g.  --set random:tasksets.0.selector={type="random"}
    --set NAME:                                (no overrides: the file as it is)

``KEY`` is a dotted path into the TOML data; a number indexes an array (``tasksets.0.selector.tau``;
``tasksets[0]`` is accepted too). Missing tables on the way are created; an array index must exist (or be
the array's length, which appends). ``VALUE`` is a TOML value: ``0.5``, ``true``, ``"text"``, ``[1, 2]``, or
an inline table ``{type = "random"}``, which replaces the whole table (it is not merged). Setting a table's
``type`` to another component (``tasksets.0.selector.type=random``) drops the old component's parameters from
that table, except the keys the same setting sets (``flexkit run --set`` parses and applies overrides the same
way). A bare word that is not otherwise valid TOML (``random``) is taken as a string, so shells that strip
quotes do no harm. Commas inside arrays, inline tables and strings do not separate overrides.

Each (setting, seed) pair is one ``flexkit run`` into ``OUT/<setting>/seed<k>/`` (a setting name longer than 64
characters gets a shortened folder name with a hash); the seed replaces ``run.seed``. Runs go one after another,
or ``--jobs`` at a time, each in a process of its own. From the held-out evaluations (``[run] eval_every``) it
reports, per setting and over seeds, the mean and a 95% Student-t interval of:

* the final ``eval_accuracy``, overall and per level;
* steps to each target accuracy (``--target 0.3,0.4,0.5``; one target is fine): the first evaluated step
  whose accuracy reaches it (resolution: ``eval_every``), over the seeds that reached it, with "k/n reached"
  when not all did, and "not reached (0/n)" when none did;
* rollouts to each target: the run's own count of responses generated (refills included) at that evaluation;
* accuracy at each rollout budget (``--budget 200000,400000``): the last evaluation at or before it;
* the cost per run: steps, optimizer steps, trained samples (responses that entered the loss), rollouts and
  wall seconds, read from ``metrics.jsonl``, and the trained samples per rollout;
* the compute to each target: the rollouts, trained samples, optimizer steps and wall seconds
  (``flexkit/run/seconds``) at the first evaluation reaching it.

An interval is printed only from :data:`MIN_INTERVAL_VALUES` (3) values on; with fewer, the mean and ``n``
(``results.json`` keeps every value and writes ``ci95: null``).

The default target is **90% of the way from the initial accuracy to the best final accuracy**:
``initial + 0.9·(best − initial)``, where ``initial`` is the mean first evaluation (step 0) over all runs
and ``best`` the highest per-setting mean final accuracy. (A plain fraction of the best accuracy would
already be met at step 0 whenever the learner starts high.) ``--target`` sets it explicitly.

**Failures.** A run that fails or is killed does not stop the comparison: the other runs finish, the reports
cover the finished runs and list the failed ones (setting, seed, exit status, the end of stderr), and the
command exits 1. The same command continues the folder: finished runs are reused, failed or missing ones run
again from the start.

``OUT`` receives ``results.md`` (tables, exact command, pipeline, seeds, failed runs), ``results.json`` (every
number and every run's curves), ``accuracy.png`` (mean accuracy vs step and vs rollouts with a shaded 95% band)
and ``levels.png`` (one panel per level); the plots need matplotlib, ``pip install "flexkit-rft[plot]"``, and
are skipped with a note without it.

Modules, by reader: :mod:`~flexkit.config._overrides` (``--set``/``--seeds`` parsing and overrides),
:mod:`~flexkit.compare._statistics` (intervals, curves, the target), :mod:`~flexkit.compare._records` (what a run's
``metrics.jsonl`` says), :mod:`~flexkit.compare._report` (tables, ``results.md``/``results.json``, accuracy plot),
:mod:`~flexkit.compare._level_plot` (``levels.png``), :mod:`~flexkit.compare._results` (the records),
:mod:`~flexkit.compare._execution` and :mod:`~flexkit.compare._worker` (running the jobs) and
:mod:`~flexkit.compare._run` (:func:`compare` itself).
"""

from __future__ import annotations

from flexkit.compare._level_plot import write_level_plot
from flexkit.compare._report import (
    render_compute_table,
    render_cost_table,
    render_markdown,
    render_table,
    summary_rows,
    write_plot,
)
from flexkit.compare._results import Comparison, ReportInfo, RunFailure, RunOutcome, SettingResult, Spent
from flexkit.compare._run import compare
from flexkit.compare._statistics import (
    MIN_INTERVAL_VALUES,
    TARGET_FRACTION,
    mean_curve,
    mean_interval,
    reported_interval,
    steps_to,
    t_quantile,
)
from flexkit.config._overrides import (
    Override,
    Setting,
    apply_overrides,
    command_line,
    parse_overrides,
    parse_seeds,
    parse_setting,
    parse_value,
    run_setting,
)

__all__ = [
    "MIN_INTERVAL_VALUES",
    "TARGET_FRACTION",
    "Comparison",
    "Override",
    "ReportInfo",
    "RunFailure",
    "RunOutcome",
    "Setting",
    "SettingResult",
    "Spent",
    "apply_overrides",
    "command_line",
    "compare",
    "mean_curve",
    "mean_interval",
    "parse_overrides",
    "parse_seeds",
    "parse_setting",
    "parse_value",
    "render_compute_table",
    "render_cost_table",
    "render_markdown",
    "render_table",
    "reported_interval",
    "run_setting",
    "steps_to",
    "summary_rows",
    "t_quantile",
    "write_level_plot",
    "write_plot",
]
