"""``flexkit compare``: run one pipeline under several settings and seeds, and report with intervals.

A **setting** is a name plus overrides of the pipeline's TOML data, written on the command line as::

    --set NAME:KEY=VALUE[,KEY=VALUE...]        e.g.  --set random:tasksets.0.selector={type="random"}
    --set NAME:                                (no overrides: the file as it is)

``KEY`` is a dotted path into the TOML data; a number indexes an array (``tasksets.0.selector.tau``;
``tasksets[0]`` is accepted too). Missing tables on the way are created; an array index must exist (or be
the array's length, which appends). ``VALUE`` is a TOML value: ``0.5``, ``true``, ``"text"``, ``[1, 2]``, or
an inline table ``{type = "random"}``, which replaces the whole table (it is not merged). A bare word that
is not otherwise valid TOML (``random``) is taken as a string, so shells that strip quotes do no harm.
Commas inside arrays, inline tables and strings do not separate overrides.

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
``pip install "flexkit[plot]"``, and is skipped with a note without it).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from flexkit.config.loader import read_toml_file
from flexkit.errors import ConfigError, ConfigIssue, FlexkitError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Fraction of the way from the initial to the best final accuracy that the default target sits at.
TARGET_FRACTION = 0.9
#: Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30, then selected larger df.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
_T975_LARGE = ((120, 1.9799), (60, 2.0003), (40, 2.0211), (30, 2.0423))

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


@attrs.frozen
class Override:
    """One ``KEY=VALUE`` of a setting: the key as typed, its path segments and the parsed value."""

    key: str
    parts: tuple[str, ...]
    value: Any


@attrs.frozen
class Setting:
    """A named set of overrides; ``spec`` is the ``--set`` text it came from."""

    name: str
    overrides: tuple[Override, ...] = ()
    spec: str = ""

    @property
    def label(self) -> str:
        """``--set SPEC``, for error reports."""
        return f"--set {self.spec or self.name + ':'}"


# --------------------------------------------------------------------------------------------- parsing


def t_quantile(df: int) -> float:
    """The two-sided 95% Student-t quantile t_{0.975, df} (tabulated; conservative between table rows)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    if df > 1000:
        return 1.96
    return next(t for d, t in _T975_LARGE if df >= d)


def mean_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and half-width of the 95% Student-t interval (``None`` for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t_quantile(n - 1) * math.sqrt(var / n)


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside strings, arrays and inline tables."""
    parts, depth, start, quote, i = [], 0, 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _parse_key(key: str) -> tuple[str, ...]:
    """``tasksets.0.selector`` or ``tasksets[0].selector`` -> ``("tasksets", "0", "selector")``."""
    normalised = re.sub(r"\[(\d+)\]", r".\1", key.strip())
    parts = tuple(normalised.split("."))
    if not parts or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise ValueError(f"bad key {key.strip()!r}: expected a dotted path such as tasksets.0.selector.type")
    return parts


def parse_value(text: str) -> Any:
    """A TOML value (a bare word that is not valid TOML is a string); raises ``ValueError``."""
    text = text.strip()
    if not text:
        raise ValueError("empty value (write \"\" for an empty string)")
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if _BARE_WORD.fullmatch(text):
            return text
        raise ValueError(f"{text!r} is not a TOML value ({exc})") from None


def parse_setting(spec: str) -> Setting:
    """Parse ``NAME:KEY=VALUE[,KEY=VALUE...]``; raises :class:`~flexkit.ConfigError` naming the ``--set``."""
    label = f"--set {spec}"

    def fail(message: str) -> ConfigError:
        return ConfigError([ConfigIssue(label, message)])

    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep:
        raise fail("expected NAME:KEY=VALUE[,KEY=VALUE...] (or NAME: for no overrides)")
    if not _NAME.fullmatch(name):
        raise fail(f"bad setting name {name!r}: use letters, digits, '_', '-', '.' (it names a folder)")
    overrides: list[Override] = []
    if rest.strip():
        for item in _split_top_level(rest):
            key, eq, value = item.partition("=")
            if not eq:
                raise fail(f"{item.strip()!r}: expected KEY=VALUE")
            try:
                overrides.append(Override(key.strip(), _parse_key(key), parse_value(value)))
            except ValueError as exc:
                raise fail(str(exc)) from None
    return Setting(name, tuple(overrides), spec)


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``N`` (seeds 0..N-1) or a comma-separated list (``0,3,7``); raises ``ValueError``."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise ValueError(f"--seeds {text}: expected a count N or a list such as 0,3,7") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text}: give at least one seed, each >= 0 and distinct")
    return seeds


def apply_overrides(data: dict[str, Any], setting: Setting) -> dict[str, Any]:
    """A deep copy of ``data`` with ``setting``'s overrides applied; a bad path is a ConfigError."""
    out = copy.deepcopy(data)
    for ov in setting.overrides:
        node: Any = out
        where: list[str] = []
        for i, part in enumerate(ov.parts):
            last = i == len(ov.parts) - 1
            here = ".".join(where) or "the top level"
            if isinstance(node, list):
                if not part.isdigit():
                    raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: {here} is an array; "
                                                   f"expected an index, got {part!r}")])
                index = int(part)
                if index > len(node) or (index == len(node) and not last):
                    raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: index {index} out of range "
                                                   f"({here} has {len(node)} entries)")])
                if last:
                    value = copy.deepcopy(ov.value)
                    node[index:index + 1] = [value]
                else:
                    node = node[index]
            elif isinstance(node, dict):
                if last:
                    node[part] = copy.deepcopy(ov.value)
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError([ConfigIssue(setting.label, f"{ov.key}: {here} is a {type(node).__name__} "
                                               f"value ({node!r}), not a table or array")])
            where.append(part)
    return out


# --------------------------------------------------------------------------------------------- running


@attrs.define
class RunOutcome:
    """One (setting, seed) run: its folder, evaluation curve and what it reached."""

    seed: int
    run_dir: Path
    curve: list[tuple[int, float]]
    final: dict[str, float]
    seconds: float
    steps_to_target: int | None = None


@attrs.define
class SettingResult:
    """All runs of one setting and what a step costs in rollouts."""

    setting: Setting
    rollouts_per_step: int
    runs: list[RunOutcome] = attrs.field(factory=list)


@attrs.define
class Comparison:
    """What :func:`compare` produced."""

    out_dir: Path
    target: float
    target_rule: str
    results: list[SettingResult]
    markdown: str
    plot: Path | None


def _read_curve(run_dir: Path, first: dict[str, float]) -> list[tuple[int, float]]:
    """``(steps done, eval_accuracy)`` pairs: the step-0 evaluation, then every evaluation record."""
    from flexkit.runner import METRICS_FILE

    curve = [(0, float(first["eval_accuracy"]))] if "eval_accuracy" in first else []
    with (run_dir / METRICS_FILE).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                if record.get("eval_accuracy") is not None:
                    curve.append((int(record["step"]) + 1, float(record["eval_accuracy"])))
    return curve


def _steps_to(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((step for step, acc in curve if acc >= target), None)


def command_line(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target: float | None = None,
    plugins: Sequence[str] = (),
) -> str:
    """The ``flexkit compare`` command that reproduces a comparison."""
    args = ["flexkit", "compare", str(path)]
    for s in settings:
        args += ["--set", s.spec or f"{s.name}:"]
    args += ["--seeds", str(len(seeds)) if list(seeds) == list(range(len(seeds))) else ",".join(map(str, seeds))]
    if target is not None:
        args += ["--target", repr(target)]
    for p in plugins:
        args += ["--plugin", p]
    args += ["--out", str(out_dir)]
    return shlex.join(args)


def compare(
    path: str | os.PathLike[str],
    settings: Sequence[Setting],
    seeds: Sequence[int],
    out_dir: str | os.PathLike[str],
    target_accuracy: float | None = None,
    *,
    plugins: Sequence[str] = (),
    command: str | None = None,
    progress: IO[str] | None = sys.stderr,
    jobs: int = 1,
) -> Comparison:
    """Run the pipeline at ``path`` under every setting and seed into ``out_dir``; write the reports.

    With ``jobs > 1`` that many runs go in parallel, each in its own process with ``cpu_count // jobs``
    threads (numpy-only trainers give identical results whatever ``jobs``; torch's numerics can differ with
    the thread count, so compare runs made with the same ``jobs``). Every setting is validated before the
    first run; an invalid one raises :class:`~flexkit.ConfigError` naming its ``--set``. Raises
    :class:`~flexkit.FlexkitError` when a run folder already exists.
    """
    from flexkit.pipeline import pipeline_from_dict
    from flexkit.runner import run_pipeline

    if not settings:
        raise ConfigError("compare needs at least one setting (--set NAME:... ; NAME: alone means no overrides)")
    names = [s.name for s in settings]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError([ConfigIssue("--set", f"setting names must be distinct; repeated: {', '.join(dupes)}")])
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError([ConfigIssue("--seeds", "give at least one seed, each >= 0 and distinct")])
    seeds = list(seeds)
    out_dir = Path(out_dir)
    base_dir = Path(path).resolve().parent
    data = read_toml_file(path)

    if jobs < 1:
        raise ConfigError([ConfigIssue("--jobs", f"must be >= 1, got {jobs}")])

    def varied_data(setting: Setting, seed: int) -> dict[str, Any]:
        if any(ov.parts == ("run", "seed") for ov in setting.overrides):
            raise ConfigError([ConfigIssue(setting.label, "run.seed is set by --seeds; do not override it")])
        varied = apply_overrides(data, setting)
        run = varied.setdefault("run", {})
        if not isinstance(run, dict):
            raise ConfigError([ConfigIssue("run", "expected a table")], str(path))
        run["seed"] = seed
        return varied

    def build(setting: Setting, seed: int) -> Any:
        return pipeline_from_dict(varied_data(setting, seed), base_dir=base_dir, source=f"{path} [{setting.label}]",
                                  plugins=plugins)

    results: list[SettingResult] = []
    for setting in settings:  # validate everything before spending time on runs
        pipe = build(setting, seeds[0])
        cfg = pipe.config
        if cfg.trainer is None:
            raise ConfigError("flexkit compare needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
        if not cfg.run.eval_every:
            raise ConfigError([ConfigIssue("run.eval_every", "flexkit compare needs held-out evaluations; "
                                           "set it > 0")], pipe.source)
        group = getattr(cfg.trainer.config, "group_size", None)
        results.append(SettingResult(setting, cfg.run.batch_size * (int(group) if group else 1)))
        for seed in seeds:
            if (out_dir / setting.name / f"seed{seed}").exists():
                raise FlexkitError(f"{out_dir / setting.name / f'seed{seed}'} already exists; choose another --out")

    total, done, started = len(settings) * len(seeds), 0, time.monotonic()
    _say(progress, f"compare: {len(settings)} setting(s) x {len(seeds)} seed(s) = {total} runs of {path} "
                   f"into {out_dir}")
    def record(result: SettingResult, seed: int, first_eval: dict[str, float], last_eval: dict[str, float],
               seconds: float) -> None:
        nonlocal done
        run_dir = out_dir / result.setting.name / f"seed{seed}"
        (run_dir / "setting.json").write_text(json.dumps({
            "pipeline": str(path), "setting": result.setting.name, "spec": result.setting.spec,
            "overrides": {ov.key: ov.value for ov in result.setting.overrides}, "seed": seed,
        }, indent=2, default=str) + "\n", encoding="utf-8")
        curve = _read_curve(run_dir, first_eval)
        final = {k: float(v) for k, v in last_eval.items() if k.startswith("eval_accuracy")}
        result.runs.append(RunOutcome(seed, run_dir, curve, final, seconds))
        done += 1
        first = f"{curve[0][1]:.3f} -> " if curve else ""
        _say(progress, f"[{done}/{total}] {result.setting.name} seed {seed}: eval_accuracy "
                       f"{first}{final.get('eval_accuracy', float('nan')):.3f} ({seconds:.1f}s)")

    if jobs == 1:
        for result in results:
            for seed in seeds:
                t0 = time.monotonic()
                run = run_pipeline(build(result.setting, seed), run_dir=out_dir / result.setting.name / f"seed{seed}",
                                   progress=None)
                record(result, seed, run.first_eval, run.last_eval, time.monotonic() - t0)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        threads = max(1, (os.cpu_count() or 1) // jobs)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_limit_threads, initargs=(threads,)) as pool:
            futures = {(i, seed): pool.submit(_run_job, varied_data(res.setting, seed), str(base_dir),
                                              f"{path} [{res.setting.label}]", list(plugins),
                                              str(out_dir / res.setting.name / f"seed{seed}"))
                       for i, res in enumerate(results) for seed in seeds}
            for (i, seed), future in futures.items():  # in (setting, seed) order, whatever finishes first
                first_eval, last_eval, seconds = future.result()
                record(results[i], seed, first_eval, last_eval, seconds)

    if target_accuracy is None:
        initial = [r.curve[0][1] for res in results for r in res.runs if r.curve and r.curve[0][0] == 0]
        best_name, best = max(((res.setting.name, mean_interval([r.final["eval_accuracy"] for r in res.runs])[0])
                               for res in results), key=lambda x: x[1])
        start = math.fsum(initial) / len(initial) if initial else 0.0
        target = start + TARGET_FRACTION * (best - start)
        rule = (f"{target:.3f} = initial {start:.3f} + {TARGET_FRACTION:.0%} of the way to the best final mean "
                f"{best:.3f} ({best_name})")
    else:
        target, rule = float(target_accuracy), f"{float(target_accuracy):.3f} (--target)"
    for res in results:
        for r in res.runs:
            r.steps_to_target = _steps_to(r.curve, target)

    elapsed = time.monotonic() - started
    command = command or command_line(path, settings, seeds, out_dir, target_accuracy, plugins)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = write_plot(results, target, out_dir / "accuracy.png", title=Path(path).name, progress=progress)
    markdown = render_markdown(results, target=target, rule=rule, command=command, path=str(path), seeds=seeds,
                               plot=plot, seconds=elapsed)
    (out_dir / "results.md").write_text(markdown, encoding="utf-8")
    (out_dir / "results.json").write_text(json.dumps(
        _json_results(results, target=target, rule=rule, command=command, path=str(path), seeds=seeds,
                      seconds=elapsed), indent=2) + "\n", encoding="utf-8")
    _say(progress, f"compare: {total} runs in {elapsed:.1f}s; results in {out_dir / 'results.md'}")
    return Comparison(out_dir=out_dir, target=target, target_rule=rule, results=results, markdown=markdown,
                      plot=plot)


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


def _say(stream: IO[str] | None, text: str) -> None:
    if stream is not None:
        stream.write(text + "\n")
        stream.flush()


# --------------------------------------------------------------------------------------------- reporting


def _fmt(values: Sequence[float], digits: int = 3, thousands: bool = False) -> str:
    mean, half = mean_interval(values)
    spec = f",.{digits}f" if thousands else f".{digits}f"
    return f"{mean:{spec}}" if half is None else f"{mean:{spec}} ± {half:{spec}}"


def _levels(results: Sequence[SettingResult]) -> list[str]:
    keys: list[str] = []
    for res in results:
        for r in res.runs:
            keys += [k for k in r.final if k.startswith("eval_accuracy/") and k not in keys]
    return keys


def _reached(res: SettingResult) -> tuple[list[int], str]:
    steps = [r.steps_to_target for r in res.runs if r.steps_to_target is not None]
    n = len(res.runs)
    return steps, "" if len(steps) == n else f" ({len(steps)}/{n} reached)"


def summary_rows(results: Sequence[SettingResult]) -> tuple[list[str], list[list[str]]]:
    """The results table: header and one row per setting (strings)."""
    levels = _levels(results)
    header = ["setting", "final accuracy", "steps to target", "rollouts to target",
              *[f"level {k.split('/', 1)[1]}" for k in levels]]
    rows = []
    for res in results:
        steps, note = _reached(res)
        if steps:
            step_text = _fmt(steps, 0) + note
            roll_text = _fmt([s * res.rollouts_per_step for s in steps], 0, thousands=True) + note
        else:
            step_text = roll_text = f"not reached (0/{len(res.runs)})"
        row = [res.setting.name, _fmt([r.final["eval_accuracy"] for r in res.runs]), step_text, roll_text]
        for key in levels:
            values = [r.final[key] for r in res.runs if key in r.final]
            row.append(_fmt(values) if values else "–")
        rows.append(row)
    return header, rows


def render_table(results: Sequence[SettingResult]) -> str:
    """The results as a markdown table."""
    header, rows = summary_rows(results)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(
    results: Sequence[SettingResult],
    *,
    target: float,
    rule: str,
    command: str,
    path: str,
    seeds: Sequence[int],
    plot: Path | None,
    seconds: float,
) -> str:
    """``results.md``: command, pipeline, seeds, target, the table, the settings' overrides and the plot."""
    n = len(seeds)
    lines = [
        f"# flexkit compare: {Path(path).name}", "",
        "```sh", command, "```", "",
        f"- pipeline: `{path}`",
        f"- seeds: {', '.join(map(str, seeds))} ({n} per setting; {len(results) * n} runs, {seconds:.0f} s)",
        f"- target eval accuracy: {rule}",
        "- cells: mean ± half-width of the 95% Student-t interval over seeds" + (" (one seed: no interval)"
                                                                                  if n == 1 else ""),
        "- steps to target: first evaluated step at or above the target (resolution: `[run] eval_every`); "
        "rollouts = steps × batch_size × group_size", "",
        render_table(results), "",
        "Settings:", "",
    ]
    for res in results:
        ovs = ", ".join(f"`{ov.key} = {_toml(ov.value)}`" for ov in res.setting.overrides) or "the file as is"
        lines.append(f"- **{res.setting.name}**: {ovs}")
    if plot is not None:
        lines += ["", f"![eval accuracy vs step]({plot.name})"]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """A TOML rendering of an override value, for display."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _json_results(results: Sequence[SettingResult], **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {**meta, "settings": []}
    for res in results:
        steps, _ = _reached(res)

        def summary(values: Sequence[float]) -> dict[str, Any] | None:
            if not values:
                return None
            mean, half = mean_interval(values)
            return {"mean": mean, "ci95": half, "n": len(values)}

        finals = {key: summary([r.final[key] for r in res.runs if key in r.final])
                  for key in ["eval_accuracy", *_levels([res])]}
        out["settings"].append({
            "name": res.setting.name,
            "spec": res.setting.spec,
            "overrides": {ov.key: ov.value for ov in res.setting.overrides},
            "rollouts_per_step": res.rollouts_per_step,
            "final": finals,
            "steps_to_target": summary(steps),
            "rollouts_to_target": summary([s * res.rollouts_per_step for s in steps]),
            "reached": f"{len(steps)}/{len(res.runs)}",
            "runs": [{"seed": r.seed, "run_dir": str(r.run_dir), "seconds": r.seconds, "final": r.final,
                      "steps_to_target": r.steps_to_target, "curve": r.curve} for r in res.runs],
        })
    return out


def mean_curve(runs: Sequence[RunOutcome]) -> tuple[list[int], list[float], list[float | None]]:
    """Steps evaluated in every run, with the mean accuracy and 95% half-width at each."""
    common = set.intersection(*(set(s for s, _ in r.curve) for r in runs)) if runs else set()
    steps = sorted(common)
    means, halves = [], []
    for step in steps:
        mean, half = mean_interval([dict(r.curve)[step] for r in runs])
        means.append(mean)
        halves.append(half)
    return steps, means, halves


def write_plot(
    results: Sequence[SettingResult],
    target: float,
    path: Path,
    *,
    title: str = "",
    progress: IO[str] | None = sys.stderr,
) -> Path | None:
    """Plot mean eval accuracy vs step per setting with a 95% band; ``None`` (and a note) without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        _say(progress, 'note: accuracy.png skipped: matplotlib is not installed (pip install "flexkit[plot]")')
        return None
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for res in results:
        steps, means, halves = mean_curve(res.runs)
        (line,) = ax.plot(steps, means, label=f"{res.setting.name} (n={len(res.runs)})")
        if all(h is not None for h in halves) and steps:
            lo = [m - h for m, h in zip(means, halves, strict=True)]  # type: ignore[operator]
            hi = [m + h for m, h in zip(means, halves, strict=True)]  # type: ignore[operator]
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axhline(target, color="0.4", linestyle="--", linewidth=1, label=f"target {target:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out eval accuracy")
    ax.set_title(f"{title}: mean over seeds, shaded 95% interval" if title else "mean over seeds, 95% interval")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.savefig(path, dpi=120)
    return path
