"""``flexkit compare`` orchestration: check the settings, run every (setting, seed) pair (in order or in worker
processes), read their evaluation curves, fix the target accuracy and write the reports."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from flexkit.compare.overrides import Setting, apply_overrides, command_line
from flexkit.compare.report import say, write_reports
from flexkit.compare.results import Comparison, ReportInfo, RunOutcome, SettingResult
from flexkit.compare.statistics import accuracy_at, default_budget, default_target, steps_to
from flexkit.config.loader import read_toml_file
from flexkit.errors import ConfigError, ConfigIssue, FlexkitError

__all__ = ["compare"]

#: What one finished run hands back: its setting, seed, first and last evaluations and seconds taken.
_Finished = tuple[SettingResult, int, dict[str, float], dict[str, float], float]


def compare(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target_accuracy: float | None = None,
    *,
    budget: int | None = None,
    plugins: Sequence[str] = (),
    command: str | None = None,
    progress: IO[str] | None = sys.stderr,
    jobs: int = 1,
    plots: bool = True,
) -> Comparison:
    """Run the pipeline at ``path`` under every setting and seed into ``out_dir``; write the reports.

    With ``jobs > 1`` that many runs go in parallel, each in its own process with ``cpu_count // jobs``
    threads (numpy-only trainers give identical results whatever ``jobs``; torch's numerics can differ with
    the thread count, so compare runs made with the same ``jobs``). Every setting is validated before the
    first run; an invalid one raises :class:`~flexkit.ConfigError` naming its ``--set``. ``budget`` is the
    rollout budget for "accuracy at the budget" (default: the fewest rollouts any run generated). With ``plots``
    (and matplotlib), each run gets ``plots/overview.png`` (:func:`flexkit.plot.plot_run`), linked from
    ``results.md``. Raises :class:`~flexkit.FlexkitError` when a run folder already exists.
    """
    _check_arguments(settings, seeds)
    seeds = list(seeds)
    plan = _Plan(path=path, data=read_toml_file(path), base_dir=Path(path).resolve().parent,
                 out_dir=Path(out_dir), plugins=plugins)
    if jobs < 1:
        raise ConfigError([ConfigIssue("--jobs", f"must be >= 1, got {jobs}")])
    results = _validate(plan, settings, seeds)

    total, started = len(settings) * len(seeds), time.monotonic()
    say(progress, f"compare: {len(settings)} setting(s) x {len(seeds)} seed(s) = {total} runs of {path} "
                  f"into {plan.out_dir}")
    finished = _run_in_order(plan, results, seeds) if jobs == 1 else _run_in_parallel(plan, results, seeds, jobs)
    for done, (result, seed, first_eval, last_eval, seconds) in enumerate(finished, 1):
        outcome = _record(plan, result, seed, first_eval, last_eval, seconds)
        first = f"{outcome.curve[0][1]:.3f} -> " if outcome.curve else ""
        say(progress, f"[{done}/{total}] {result.setting.name} seed {seed}: eval_accuracy "
                      f"{first}{outcome.final.get('eval_accuracy', float('nan')):.3f} ({seconds:.1f}s)")

    if plots:
        _plot_runs(results)
    target, rule = _fix_target(results, target_accuracy)
    requested_budget = budget
    budget, budget_rule = _fix_budget(results, budget)
    elapsed = time.monotonic() - started
    command = command or command_line(path, settings, seeds, plan.out_dir, target_accuracy, plugins,
                                      requested_budget)
    info = ReportInfo(target=target, rule=rule, budget=budget, budget_rule=budget_rule, command=command,
                      path=str(path), seeds=seeds, seconds=elapsed)
    markdown, plot = write_reports(results, plan.out_dir, info, progress=progress)
    say(progress, f"compare: {total} runs in {elapsed:.1f}s; results in {plan.out_dir / 'results.md'}")
    return Comparison(out_dir=plan.out_dir, target=target, target_rule=rule, budget=budget, budget_rule=budget_rule,
                      results=results, markdown=markdown, plot=plot)


@attrs.frozen(kw_only=True)
class _Plan:
    """The pipeline a comparison varies: its TOML data, where it lives, and where the runs go."""

    path: str | os.PathLike[str]
    data: dict[str, Any]
    base_dir: Path
    out_dir: Path
    plugins: Sequence[str]

    def run_dir(self, setting: Setting, seed: int) -> Path:
        """The folder of the (setting, seed) run."""
        return self.out_dir / setting.name / f"seed{seed}"

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

    def build(self, setting: Setting, seed: int) -> Any:
        """The pipeline of the (setting, seed) run."""
        from flexkit.pipeline import pipeline_from_dict

        return pipeline_from_dict(self.varied_data(setting, seed), base_dir=self.base_dir,
                                  source=self.source(setting), plugins=self.plugins)


def _check_arguments(settings: Sequence[Setting], seeds: Sequence[int]) -> None:
    """Raise :class:`~flexkit.ConfigError` without settings, with repeated names, or with bad seeds."""
    if not settings:
        raise ConfigError("compare needs at least one setting (--set NAME:... ; NAME: alone means no overrides)")
    names = [s.name for s in settings]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError([ConfigIssue("--set", f"setting names must be distinct; repeated: {', '.join(dupes)}")])
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError([ConfigIssue("--seeds", "give at least one seed, each >= 0 and distinct")])


def _validate(plan: _Plan, settings: Sequence[Setting], seeds: list[int]) -> list[SettingResult]:
    """Build every setting's pipeline before spending time on runs; one empty result per setting."""
    results: list[SettingResult] = []
    for setting in settings:
        pipe = plan.build(setting, seeds[0])
        cfg = pipe.config
        if cfg.trainer is None:
            raise ConfigError("flexkit compare needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
        if not cfg.run.eval_every:
            raise ConfigError([ConfigIssue("run.eval_every", "flexkit compare needs held-out evaluations; "
                                           "set it > 0")], pipe.source)
        group = getattr(cfg.trainer.config, "group_size", None)
        results.append(SettingResult(setting, cfg.run.batch_size * (int(group) if group else 1)))
        for seed in seeds:
            if plan.run_dir(setting, seed).exists():
                raise FlexkitError(f"{plan.run_dir(setting, seed)} already exists; choose another --out")
    return results


def _run_in_order(plan: _Plan, results: list[SettingResult], seeds: list[int]) -> Iterator[_Finished]:
    """Run every (setting, seed) pair in this process, one after another."""
    from flexkit.runner import run_pipeline

    for result in results:
        for seed in seeds:
            t0 = time.monotonic()
            run = run_pipeline(plan.build(result.setting, seed), run_dir=plan.run_dir(result.setting, seed),
                               progress=None)
            yield result, seed, run.first_eval, run.last_eval, time.monotonic() - t0


def _run_in_parallel(plan: _Plan, results: list[SettingResult], seeds: list[int], jobs: int) -> Iterator[_Finished]:
    """Run every (setting, seed) pair in ``jobs`` worker processes; yield them in (setting, seed) order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_limit_threads, initargs=(threads,)) as pool:
        futures = {(i, seed): pool.submit(_run_job, plan.varied_data(res.setting, seed), str(plan.base_dir),
                                          plan.source(res.setting), list(plan.plugins),
                                          str(plan.run_dir(res.setting, seed)))
                   for i, res in enumerate(results) for seed in seeds}
        for (i, seed), future in futures.items():  # in (setting, seed) order, whatever finishes first
            first_eval, last_eval, seconds = future.result()
            yield results[i], seed, first_eval, last_eval, seconds


def _limit_threads(threads: int) -> None:
    """Worker initializer: cap the math libraries' threads, so parallel runs do not oversubscribe the CPU."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def _run_job(data: dict[str, Any], base_dir: str, source: str, plugins: list[str],
             run_dir: str) -> tuple[dict[str, float], dict[str, float], float]:
    """One (setting, seed) run in a worker process; returns the first and last evaluations and the seconds."""
    from flexkit.pipeline import pipeline_from_dict
    from flexkit.runner import run_pipeline

    t0 = time.monotonic()
    pipe = pipeline_from_dict(data, base_dir=Path(base_dir), source=source, plugins=plugins)
    run = run_pipeline(pipe, run_dir=run_dir, progress=None)
    return dict(run.first_eval), dict(run.last_eval), time.monotonic() - t0


def _record(plan: _Plan, result: SettingResult, seed: int, first_eval: dict[str, float],
            last_eval: dict[str, float], seconds: float) -> RunOutcome:
    """Write the run's ``setting.json``, read its curve, and add its outcome to ``result``."""
    run_dir = plan.run_dir(result.setting, seed)
    (run_dir / "setting.json").write_text(json.dumps({
        "pipeline": str(plan.path), "setting": result.setting.name, "spec": result.setting.spec,
        "overrides": {ov.key: ov.value for ov in result.setting.overrides}, "seed": seed,
    }, indent=2, default=str) + "\n", encoding="utf-8")
    curve, rollout_curve = _read_curves(run_dir, first_eval, result.rollouts_per_step)
    final = {k: float(v) for k, v in last_eval.items() if k.startswith("eval_accuracy")}
    outcome = RunOutcome(seed, run_dir, curve, final, seconds, rollout_curve=rollout_curve)
    result.runs.append(outcome)
    return outcome


def _read_curves(run_dir: Path, first: dict[str, float],
                 rollouts_per_step: int) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(steps done, eval_accuracy)`` and ``(rollouts so far, eval_accuracy)`` pairs of every evaluation record:
    steps done is ``step + 1``, so the ``"step": -1`` record is the evaluation before training (step 0). A run
    folder from before that record existed gets ``first`` (the runner's first evaluation) as its step-0 point.
    Rollouts are the run's own cumulative count (``steps × rollouts_per_step`` for records without one)."""
    from flexkit.run_folder import INITIAL_STEP, METRICS_FILE, read_metrics

    records = [record for _line, record in read_metrics(run_dir / METRICS_FILE)]
    curve: list[tuple[int, float]] = []
    rollout_curve: list[tuple[int, float]] = []
    if "eval_accuracy" in first and not any(r["step"] == INITIAL_STEP for r in records):
        curve, rollout_curve = [(0, float(first["eval_accuracy"]))], [(0, float(first["eval_accuracy"]))]
    for record in records:
        if record.get("eval_accuracy") is not None:
            steps, acc = int(record["step"]) + 1, float(record["eval_accuracy"])
            curve.append((steps, acc))
            rollouts = record.get("rollouts")
            rollout_curve.append((int(rollouts) if rollouts is not None else steps * rollouts_per_step, acc))
    return curve, rollout_curve


def _plot_runs(results: list[SettingResult]) -> None:
    """Each run's ``plots/overview.png``; nothing without matplotlib (the comparison's own plot notes it)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return
    from flexkit.plot import plot_run

    for res in results:
        for run in res.runs:
            plot_run(run.run_dir, files=("overview.png",), dpi=80)


def _fix_target(results: list[SettingResult], target_accuracy: float | None) -> tuple[float, str]:
    """The target accuracy (given, or :func:`default_target`) and its rule; sets each run's steps to it."""
    if target_accuracy is None:
        target, rule = default_target(results)
    else:
        target, rule = float(target_accuracy), f"{float(target_accuracy):.3f} (--target)"
    for res in results:
        for r in res.runs:
            r.steps_to_target = steps_to(r.curve, target)
            r.rollouts_to_target = steps_to(r.rollout_curve, target)
    return target, rule


def _fix_budget(results: list[SettingResult], budget: int | None) -> tuple[int, str]:
    """The rollout budget (given, or :func:`default_budget`) and its rule; sets each run's accuracy there."""
    if budget is None:
        budget, rule = default_budget(results)
    else:
        rule = f"{budget:,} rollouts (--budget)"
    for res in results:
        for r in res.runs:
            r.accuracy_at_budget = accuracy_at(r.rollout_curve, budget)
    return budget, rule
