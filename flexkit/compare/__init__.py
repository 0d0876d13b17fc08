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

Each (setting, seed) pair is one ``flexkit run`` into ``OUT/<setting>/seed<k>/``; the seed replaces
``run.seed``. Runs are sequential. From the held-out evaluations (``[run] eval_every``) it reports, per
setting and over seeds, the mean and a 95% Student-t interval (none for one seed) of:

* the final ``eval_accuracy``, overall and per level;
* steps to the target accuracy: the first evaluated step whose accuracy reaches it (resolution:
  ``eval_every``), over the seeds that reached it, with "k/n reached" when not all did;
* rollouts to the target: steps × batch_size × group_size (× 1 when the trainer has no ``group_size``).

The default target is **90% of the way from the initial accuracy to the best final accuracy**:
``initial + 0.9·(best − initial)``, where ``initial`` is the mean first evaluation (step 0) over all runs
and ``best`` the highest per-setting mean final accuracy. (A plain fraction of the best accuracy would
already be met at step 0 whenever the learner starts high.) ``--target`` sets it explicitly.

``OUT`` receives ``results.md`` (table, exact command, pipeline, seeds), ``results.json`` (every number and
every run's curve) and ``accuracy.png`` (mean accuracy vs step with a shaded 95% band; needs matplotlib,
``pip install "flexkit-rft[plot]"``, and is skipped with a note without it).

Modules, by reader: :mod:`~flexkit.compare.overrides` (``--set``/``--seeds`` parsing and overrides),
:mod:`~flexkit.compare.statistics` (intervals, curves, the target), :mod:`~flexkit.compare.report` (table,
``results.md``/``results.json``, plot), :mod:`~flexkit.compare.results` (the records) and
:mod:`~flexkit.compare.run` (:func:`compare` itself).
"""

from __future__ import annotations

from flexkit.compare.overrides import (
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
from flexkit.compare.report import render_markdown, render_table, summary_rows, write_plot
from flexkit.compare.results import Comparison, ReportInfo, RunOutcome, SettingResult
from flexkit.compare.run import compare
from flexkit.compare.statistics import TARGET_FRACTION, mean_curve, mean_interval, steps_to, t_quantile

__all__ = [
    "TARGET_FRACTION",
    "Comparison",
    "Override",
    "ReportInfo",
    "RunOutcome",
    "Setting",
    "SettingResult",
    "apply_overrides",
    "command_line",
    "compare",
    "mean_curve",
    "mean_interval",
    "parse_overrides",
    "parse_seeds",
    "parse_setting",
    "parse_value",
    "render_markdown",
    "render_table",
    "run_setting",
    "steps_to",
    "summary_rows",
    "t_quantile",
    "write_plot",
]
