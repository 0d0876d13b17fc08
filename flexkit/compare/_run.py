"""``flexkit compare`` orchestration: check the settings, reuse the runs a folder already finished, run the
others (in order, or each in a process of its own), survive the ones that fail, read their curves, fix the
targets and budgets and write the reports."""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from flexkit._state_problems import is_number
from flexkit.compare._execution import Job, JobResult, run_in_order, run_in_processes
from flexkit.compare._plot_parts import say
from flexkit.compare._records import read_run_records
from flexkit.compare._report import write_reports
from flexkit.compare._results import Comparison, ReportInfo, RunFailure, RunOutcome, SettingResult, Spent
from flexkit.compare._statistics import accuracy_at, default_budget, default_target, first_reaching, steps_to
from flexkit.config._loader import read_toml_file
from flexkit.config._overrides import Setting, apply_overrides, command_line, folder_name
from flexkit.errors import ConfigError, ConfigIssue, FlexkitError
from flexkit.plugins._contract import group_size_of
from flexkit.run._lock import LOCK_FILE, hold_folder

__all__ = ["compare"]

#: The file that marks a finished run of a comparison and says what it was.
SETTING_FILE = "setting.json"
#: Files a run folder may hold that a failed run's rerun may remove with it.
_RUN_FOLDER_FILES = {"metrics.jsonl", "resolved.json", "pipeline.toml", "checkpoint", "plots", "stderr.log",
                     "checkpoint.tmp", LOCK_FILE}
#: The files a comparison writes into its folder, which no setting may name (its runs' folder would take the name).
RESERVED_NAMES = ("results.json", "results.md", "accuracy.png", "levels.png")


def compare(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target_accuracy: float | Sequence[float] | None = None,
    *,
    budget: int | Sequence[int] | None = None,
    plugins: Sequence[str] = (),
    command: str | None = None,
    progress: IO[str] | None = sys.stderr,
    jobs: int = 1,
    plots: bool = True,
) -> Comparison:
    """Run the pipeline at ``path`` under every setting and seed into ``out_dir``; write the reports.

    ``target_accuracy`` is one target accuracy in [0, 1] or several (rollouts and steps to each are reported);
    ``budget`` one rollout budget or several (accuracy at each: the last evaluation at or before it; default: the
    fewest rollouts any run generated). Budgets do not stop runs: ``[run] max_rollouts`` does. Each is given once.

    With ``jobs == 1`` the runs go one after another in this process; with ``jobs > 1`` that many at a time,
    each in a process of its own with ``cpu_count // jobs`` threads (numpy-only trainers give identical results
    whatever ``jobs``; torch's numerics can differ with the thread count, so compare runs made with the same
    ``jobs``). Every setting is validated before the first run; an invalid one raises
    :class:`~flexkit.ConfigError` naming its ``--set``.

    **Failures and continuing.** A run that fails (an error, or its process killed) does not stop the others:
    every other run finishes, the reports cover the finished runs and list the failed ones (setting, seed,
    exit status, the end of stderr), and :attr:`Comparison.failures` names them. Calling again with the same
    arguments and ``out_dir`` reuses every finished run (each run folder's ``setting.json`` records what ran)
    and runs only the missing or failed ones again, from the start. A folder that holds a run of another
    pipeline, setting or seed is refused with :class:`~flexkit.FlexkitError`. On Ctrl-C the reports of the runs
    finished so far are written before the interrupt goes on.

    With ``plots`` (and matplotlib), each run gets ``plots/overview.png`` (:func:`flexkit.plot._figures.plot_run`),
    linked from ``results.md``.
    """
    _check_arguments(settings, seeds)
    seeds = list(seeds)
    targets = _as_list(target_accuracy, float, "--target")
    budgets = _as_list(budget, int, "--budget")
    plan = _Plan(path=path, data=read_toml_file(path), base_dir=Path(path).resolve().parent,
                 out_dir=Path(out_dir), plugins=plugins)
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral) or jobs < 1:
        raise ConfigError([ConfigIssue("--jobs", f"must be an integer >= 1, got {jobs!r}")])
    results = _validate(plan, settings, seeds)
    _make_folder(plan.out_dir)
    with hold_folder(plan.out_dir, "flexkit compare"):  # one comparison per folder: none clears another's runs
        reused, todo = _reusable(plan, results, seeds)

        total, started = len(settings) * len(seeds), time.monotonic()
        say(progress, f"compare: {len(settings)} setting(s) x {len(seeds)} seed(s) = {total} runs of {path} "
                      f"into {plan.out_dir}" + (f" ({len(reused)} finished before, reused)" if reused else ""))
        command = command or command_line(path, settings, seeds, plan.out_dir, target_accuracy, plugins, budget)
        done = 0
        try:
            for result, seed, finished in reused:
                done += 1
                outcome = _record(plan, result, seed, finished, write=False)
                say(progress, f"[{done}/{total}] {result.setting.name} seed {seed}: reused ({_accuracy_line(outcome)})")
            run = run_in_order if jobs == 1 else lambda js: run_in_processes(js, jobs, plan.out_dir)
            for job, outcome_or_failure in run(todo):
                done += 1
                result = results[job.index]
                if isinstance(outcome_or_failure, RunFailure):
                    result.failures.append(outcome_or_failure)
                    status = outcome_or_failure.exit_status
                    last = (outcome_or_failure.stderr_tail.strip().splitlines() or ["?"])[-1]
                    say(progress, f"[{done}/{total}] {result.setting.name} seed {job.seed}: FAILED (exit status "
                                  f"{'unknown' if status is None else status}): {last}")
                    continue
                outcome = _record(plan, result, job.seed, outcome_or_failure)
                say(progress, f"[{done}/{total}] {result.setting.name} seed {job.seed}: {_accuracy_line(outcome)}")
        finally:  # also on Ctrl-C: the reports of what finished
            _order(results, seeds)
            if plots:
                _plot_runs(results)
            comparison = _report(plan, results, seeds, targets, budgets, command, time.monotonic() - started, progress)
        failed = len(comparison.failures)
        runs = f"{total - failed} of {total} runs, {failed} FAILED (the same command runs them again)," if failed \
            else f"{total} runs"
        say(progress, f"compare: {runs} in {time.monotonic() - started:.1f}s; results in {plan.out_dir / 'results.md'}")
        return comparison


def _accuracy_line(outcome: RunOutcome) -> str:
    first = f"{outcome.curve[0][1]:.3f} -> " if outcome.curve else ""
    return f"eval_accuracy {first}{outcome.final.get('eval_accuracy', float('nan')):.3f} ({outcome.seconds:.1f}s)"


def _as_list(value: Any, kind: type, option: str) -> list[Any]:
    """One value or several as a list (empty for ``None``): targets are accuracies in [0, 1], budgets integers
    >= 1, each given once; raises :class:`~flexkit.ConfigError`."""
    if value is None:
        return []
    given = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else [value]
    if not given:
        raise ConfigError([ConfigIssue(option, "give at least one value")])
    for v in given:
        if not _valid(v, kind):
            expected = "integers >= 1" if kind is int else "accuracies between 0 and 1"
            raise ConfigError([ConfigIssue(option, f"expected {expected}, got {v!r}")])
    values = [kind(v) for v in given]
    if len(set(values)) != len(values):
        raise ConfigError([ConfigIssue(option, f"give each value once, got {values}")])
    return values


def _valid(value: Any, kind: type) -> bool:
    """Whether ``value`` is a target (``kind`` float: in [0, 1]) or a budget (``kind`` int: a whole number >= 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    number: Any = value  # numbers.Real declares no comparisons
    if kind is float:
        return bool(0 <= number <= 1)  # False for NaN
    whole = isinstance(number, numbers.Integral) or (isinstance(number, float) and number.is_integer())
    return bool(whole and number >= 1)


@attrs.frozen(kw_only=True)
class _Plan:
    """The pipeline a comparison varies: its TOML data, where it lives, and where the runs go."""

    path: str | os.PathLike[str]
    data: dict[str, Any]
    base_dir: Path
    out_dir: Path
    plugins: Sequence[str]

    def run_dir(self, setting: Setting, seed: int) -> Path:
        """The folder of the (setting, seed) run (a long setting name is shortened, see
        :func:`~flexkit.config._overrides.folder_name`)."""
        return self.out_dir / folder_name(setting.name) / f"seed{seed}"

    def source(self, setting: Setting) -> str:
        """How error messages name the pipeline under ``setting``."""
        return f"{self.path} [{setting.label}]"

    def varied_data(self, setting: Setting, seed: int) -> dict[str, Any]:
        """The pipeline's TOML data with ``setting``'s overrides applied and ``run.seed = seed``."""
        if any(ov.parts == ("run", "seed") for ov in setting.overrides):
            raise ConfigError([ConfigIssue(setting.label, "run.seed is set by --seeds; do not override it")])
        varied = apply_overrides(self.data, setting)
        run = varied.setdefault("run", {})
        if not isinstance(run, dict):
            raise ConfigError([ConfigIssue("run", "expected a table")], str(self.path))
        run["seed"] = seed
        return varied

    def identity(self, setting: Setting, seed: int) -> str:
        """A digest of what the (setting, seed) run runs: its varied data and the plugins."""
        text = json.dumps([self.varied_data(setting, seed), list(self.plugins)], sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def build(self, setting: Setting, seed: int) -> Any:
        """The pipeline of the (setting, seed) run."""
        from flexkit.pipeline._pipeline import pipeline_from_dict

        return pipeline_from_dict(self.varied_data(setting, seed), base_dir=self.base_dir,
                                  source=self.source(setting), plugins=self.plugins)

    def job(self, index: int, setting: Setting, seed: int) -> Job:
        """What a worker needs to run the (setting, seed) run."""
        return Job(index=index, seed=seed, data=self.varied_data(setting, seed), base_dir=str(self.base_dir),
                   source=self.source(setting), plugins=list(self.plugins),
                   run_dir=str(self.run_dir(setting, seed)))


def _check_arguments(settings: Sequence[Setting], seeds: Sequence[int]) -> None:
    """Raise :class:`~flexkit.ConfigError` without settings, with repeated or reserved names
    (:data:`RESERVED_NAMES`), or with bad seeds."""
    from flexkit.config._overrides import MAX_SEED, MAX_SEEDS

    if not settings:
        raise ConfigError("compare needs at least one setting (--set NAME:... ; NAME: alone means no overrides)")
    names = [s.name for s in settings]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError([ConfigIssue("--set", f"setting names must be distinct; repeated: {', '.join(dupes)}")])
    reserved = {name.casefold() for name in RESERVED_NAMES}  # casefold: a case-insensitive filesystem too
    for setting in settings:
        if folder_name(setting.name).casefold() in reserved:
            raise ConfigError([ConfigIssue(setting.label, f"the setting name {setting.name!r} is reserved: the "
                                                          f"comparison writes {', '.join(RESERVED_NAMES)} into its "
                                                          "folder; choose another name")])
    if len(seeds) > MAX_SEEDS:
        raise ConfigError([ConfigIssue("--seeds", f"at most {MAX_SEEDS} seeds, got {len(seeds):,}")])
    if not seeds or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and 0 <= s <= MAX_SEED
                            for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError([ConfigIssue("--seeds", f"give at least one seed, each an integer in 0..{MAX_SEED} "
                                                  "and distinct")])


def _validate(plan: _Plan, settings: Sequence[Setting], seeds: list[int]) -> list[SettingResult]:
    """Build every setting's pipeline before spending time on runs, and refuse what its runs would refuse (a
    part its trainer does not honour, :func:`~flexkit.run._runner.check_run_support`); one empty result per
    setting."""
    from flexkit.run._runner import RUN_TIMINGS, check_run_support, new_trainer
    from flexkit.sample._stage_checks import check_stage_timing

    results: list[SettingResult] = []
    for setting in settings:
        pipe = plan.build(setting, seeds[0])
        cfg = pipe.config
        if cfg.trainer is None:
            raise ConfigError("flexkit compare needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
        if not cfg.run.eval_every:
            raise ConfigError([ConfigIssue("run.eval_every", "flexkit compare needs held-out evaluations; "
                                           "set it > 0")], pipe.source)
        if pipe.has_sample_stage:
            check_stage_timing(pipe.sample_stage, RUN_TIMINGS, driver="flexkit run", source=pipe.source)
        check_run_support(pipe, new_trainer(pipe))  # building a trainer is cheap; setting it up is not done here
        group = group_size_of(cfg.trainer.config)
        results.append(SettingResult(setting, cfg.run.batch_size * (int(group) if group else 1)))
    return results


def _make_folder(out_dir: Path) -> None:
    """Create the comparison's folder (and its parents); raises :class:`~flexkit.FlexkitError` when it cannot."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise FlexkitError(f"cannot write the comparison folder {out_dir}: {exc.strerror or exc}{where}") from None


#: A run a folder finished before: its result, seed and what its ``setting.json`` recorded.
_Reused = tuple[SettingResult, int, dict[str, Any]]


def _reusable(plan: _Plan, results: list[SettingResult], seeds: list[int]) -> tuple[list[_Reused], list[Job]]:
    """Sort the (setting, seed) runs into those ``out_dir`` already finished (same identity) and those to run;
    clear the folders of unfinished or failed runs. Raises :class:`~flexkit.FlexkitError` for a folder that
    holds something else (another run, or files a run does not write)."""
    reused: list[_Reused] = []
    todo: list[Job] = []
    clear: list[Path] = []
    for index, result in enumerate(results):
        for seed in seeds:
            run_dir = plan.run_dir(result.setting, seed)
            if not run_dir.exists():
                todo.append(plan.job(index, result.setting, seed))
                continue
            meta = _read_setting_file(run_dir)
            if meta is not None:
                if meta.get("identity") != plan.identity(result.setting, seed) or "last_eval" not in meta:
                    raise FlexkitError(f"{run_dir} already holds a run of another pipeline, setting or seed "
                                       f"(its setting.json: setting {meta.get('setting')!r}, spec "
                                       f"{meta.get('spec')!r}); choose another --out")
                damage = _damage(meta)
                if damage:
                    raise FlexkitError(f"{run_dir / SETTING_FILE} is damaged ({damage}); delete {run_dir} to run it "
                                       "again")
                reused.append((result, seed, meta))
                continue
            unknown = sorted(p.name for p in run_dir.iterdir() if p.name not in _RUN_FOLDER_FILES) \
                if run_dir.is_dir() else ["(a file, not a folder)"]
            if unknown:
                raise FlexkitError(f"{run_dir} already exists and is not an unfinished run of this comparison "
                                   f"(it holds {', '.join(unknown[:5])}); choose another --out")
            clear.append(run_dir)
            todo.append(plan.job(index, result.setting, seed))
    for run_dir in clear:  # an unfinished or failed run: it runs again from the start
        shutil.rmtree(run_dir)
    return reused, todo


def _damage(meta: dict[str, Any]) -> str | None:
    """What makes a finished run's ``setting.json`` unusable (its evaluations or seconds are not finite numbers),
    or ``None``."""
    for key, table in (("first_eval", meta.get("first_eval") or {}), ("last_eval", meta["last_eval"])):
        if not isinstance(table, dict) or not all(is_number(v) for v in table.values()):
            return f"{key} is not a table of finite numbers"
    if not is_number(meta.get("seconds", 0.0)):
        return "seconds is not a finite number"
    return None


def _read_setting_file(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's ``setting.json`` (``None`` when there is none: the run did not finish)."""
    path = run_dir / SETTING_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _record(plan: _Plan, result: SettingResult, seed: int, finished: dict[str, Any] | JobResult, *,
            write: bool = True) -> RunOutcome:
    """Write the run's ``setting.json`` (unless reused), read its records, and add its outcome to ``result``."""
    run_dir = plan.run_dir(result.setting, seed)
    if isinstance(finished, JobResult):
        first_eval, last_eval, seconds = finished.first_eval, finished.last_eval, finished.seconds
    else:
        first_eval, last_eval = dict(finished.get("first_eval") or {}), dict(finished["last_eval"])
        seconds = float(finished.get("seconds", 0.0))
    if write:
        meta = {"pipeline": str(plan.path), "setting": result.setting.name, "spec": result.setting.spec,
                "overrides": {ov.key: ov.value for ov in result.setting.overrides}, "seed": seed,
                "identity": plan.identity(result.setting, seed), "first_eval": first_eval, "last_eval": last_eval,
                "seconds": seconds}
        tmp = run_dir / (SETTING_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, run_dir / SETTING_FILE)  # written last, whole: it marks a finished run
    records = read_run_records(run_dir, first_eval, result.rollouts_per_step)
    final = {k: float(v) for k, v in last_eval.items() if k.startswith("eval_accuracy")}
    outcome = RunOutcome(seed, run_dir, records.curve, final, seconds, rollout_curve=records.rollout_curve,
                         level_curves=records.level_curves, steps=records.steps,
                         optimizer_steps=records.optimizer_steps, trained_samples=records.trained_samples,
                         level_draws=records.level_draws, spent_curve=records.spent_curve)
    result.runs.append(outcome)
    return outcome


def _read_curves(run_dir: Path, first: dict[str, float],
                 rollouts_per_step: int) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(steps done, eval_accuracy)`` and ``(rollouts so far, eval_accuracy)`` pairs of every evaluation record
    (see :func:`~flexkit.compare._records.read_run_records`)."""
    records = read_run_records(run_dir, first, rollouts_per_step)
    return records.curve, records.rollout_curve


def _order(results: list[SettingResult], seeds: list[int]) -> None:
    """Each setting's runs and failures in ``seeds`` order, whatever order they finished in."""
    rank = {seed: i for i, seed in enumerate(seeds)}
    for res in results:
        res.runs.sort(key=lambda r: rank[r.seed])
        res.failures.sort(key=lambda f: rank[f.seed])


def _plot_runs(results: list[SettingResult]) -> None:
    """Each run's ``plots/overview.png``; nothing without matplotlib (the comparison's own plot notes it)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return
    from flexkit.plot._figures import plot_run

    for res in results:
        for run in res.runs:
            if not (run.run_dir / "plots" / "overview.png").is_file():
                plot_run(run.run_dir, files=("overview.png",), dpi=80)


def _report(plan: _Plan, results: list[SettingResult], seeds: list[int], targets: list[float], budgets: list[int],
            command: str, elapsed: float, progress: IO[str] | None) -> Comparison:
    """Fix the targets and budgets, measure every run against them and write the reports."""
    targets, rules = _fix_targets(results, targets)
    budgets, budget_rules = _fix_budgets(results, budgets)
    largest = max(budgets)
    budget_rule = budget_rules[0] if len(budgets) == 1 else f"{largest:,} rollouts (the largest --budget)"
    info = ReportInfo(target=targets[0], rule=rules[0], budget=largest, budget_rule=budget_rule, command=command,
                      path=str(plan.path), seeds=seeds, seconds=elapsed, targets=targets, budgets=budgets)
    markdown, plot, level_plot = write_reports(results, plan.out_dir, info, progress=progress)
    return Comparison(out_dir=plan.out_dir, target=targets[0], target_rule=rules[0], budget=largest,
                      budget_rule=budget_rule, results=results, markdown=markdown, plot=plot, targets=targets,
                      budgets=budgets, level_plot=level_plot)


def _fix_targets(results: list[SettingResult], targets: list[float]) -> tuple[list[float], list[str]]:
    """The target accuracies (given, or one :func:`default_target`) and their rules; sets each run's steps,
    rollouts, trained samples, optimizer steps and seconds to each (the first steps and rollouts also as
    ``steps_to_target`` / ``rollouts_to_target``)."""
    if targets:
        rules = [f"{t:.3f} (--target)" for t in targets]
    else:
        target, rule = default_target(results)
        targets, rules = [target], [rule]
    for res in results:
        for r in res.runs:
            r.steps_to_targets = [steps_to(r.curve, t) for t in targets]
            r.rollouts_to_targets = [steps_to(r.rollout_curve, t) for t in targets]
            r.steps_to_target, r.rollouts_to_target = r.steps_to_targets[0], r.rollouts_to_targets[0]
            spent = [_spent_at(r, first_reaching(r.curve, t)) for t in targets]
            r.trained_samples_to_targets = [s.trained_samples if s is not None else None for s in spent]
            r.optimizer_steps_to_targets = [s.optimizer_steps if s is not None else None for s in spent]
            r.seconds_to_targets = [s.seconds if s is not None else None for s in spent]
    return targets, rules


def _spent_at(run: RunOutcome, index: int | None) -> Spent | None:
    """What ``run`` had spent by its evaluation ``index`` (``None``: no such evaluation, or none recorded)."""
    return run.spent_curve[index] if index is not None and index < len(run.spent_curve) else None


def _fix_budgets(results: list[SettingResult], budgets: list[int]) -> tuple[list[int], list[str]]:
    """The rollout budgets (given, or one :func:`default_budget`) and their rules; sets each run's accuracy at
    each (at the largest also as ``accuracy_at_budget``)."""
    if budgets:
        rules = [f"{b:,} rollouts (--budget)" for b in budgets]
    else:
        budget, rule = default_budget(results)
        budgets, rules = [budget], [rule]
    largest = budgets.index(max(budgets))
    for res in results:
        for r in res.runs:
            r.accuracy_at_budgets = [accuracy_at(r.rollout_curve, b) for b in budgets]
            r.accuracy_at_budget = r.accuracy_at_budgets[largest]
    return budgets, rules
