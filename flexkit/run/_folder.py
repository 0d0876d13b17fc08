"""The run folder of ``flexkit run``: starting one, resuming one, and reading its metrics file.

Every state a crash (even a SIGKILL) can leave a run folder in continues from the command line:

* no committed ``checkpoint/state.json`` (the run died before, or during, its first checkpoint): ``--resume``
  says so and ``--out`` on the same folder starts it again (leftovers of the interrupted save are removed by
  the next save);
* a committed checkpoint: ``--resume`` continues from it; ``metrics.jsonl`` is cut back to the checkpoint's
  step (a line torn by the crash, or by a full disk, is dropped), so the run ends with exactly the metrics of
  an uninterrupted one (but for its wall clock, ``flexkit/run/seconds``);
* a finished run: ``--resume`` trains nothing and prints the same summary as the run did.

The first record of ``metrics.jsonl`` (with ``[run] eval_every``) is the evaluation before any training, with
``"step": -1`` (:data:`INITIAL_STEP`): a record's evaluation is taken after ``step + 1`` steps, so this one
after none. ``--resume`` keeps it like every record before the checkpoint. :func:`read_metrics` reads records
under the current names (:mod:`flexkit._metric_names`), those of run folders written before them included.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

import attrs
import structlog

from flexkit._metric_names import upgrade_record
from flexkit._state_problems import add_problem, is_count
from flexkit.errors import CheckpointError, FlexkitError
from flexkit.pipeline._checkpoint import STATE_FILE, remove_leftovers
from flexkit.pipeline._fingerprint import differences
from flexkit.pipeline._pipeline import Pipeline
from flexkit.pipeline._state import EXTRA_KEY, TRAINER_KEY
from flexkit.plugins._contract import TrainerLike
from flexkit.run._counters import RUNNER_KEY, RunCounters
from flexkit.run._schema_line import copy_pipeline_file
from flexkit.sample._replay import REPLAY_KEY, ReplayBuffer

log = structlog.get_logger("flexkit.runner")

CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"
#: The file that makes a folder a run folder (the validated config the run started with).
RESOLVED_FILE = "resolved.json"
#: What a run folder may hold: its own files, the plots, the trackers' folders, ``flexkit compare``'s record of a
#: finished run and its worker's stderr, and the folder lock; a folder holding anything else is not a run's.
RUN_FOLDER_ENTRIES = frozenset({"pipeline.toml", RESOLVED_FILE, METRICS_FILE, CHECKPOINT_DIR, "plots", "tensorboard",
                                "wandb", "setting.json", "setting.json.tmp", "stderr.log", ".flexkit.lock"})
#: The file a ``flexkit compare`` folder's report is written to.
COMPARE_RESULTS = "results.json"
#: The ``step`` of the metrics record holding the evaluation before the first training step.
INITIAL_STEP = -1

__all__ = ["CHECKPOINT_DIR", "INITIAL_STEP", "METRICS_FILE", "Resumed", "read_metrics", "resume_run_folder",
           "start_run_folder"]


@attrs.define
class Resumed:
    """Where a run continues: its counters and evaluations (``counters.step`` is the next step), the last
    metrics record, and whether the run had already finished (all steps done, or ``[run] max_rollouts``
    spent)."""

    counters: RunCounters = attrs.field(factory=RunCounters)
    last_record: dict[str, Any] = attrs.field(factory=dict)
    finished: bool = False

    @property
    def start(self) -> int:
        """The step the run continues from."""
        return self.counters.step


def _reason(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _is_pipeline_file(source: str | None) -> TypeGuard[str]:
    """Whether ``source`` names a pipeline file (it may instead describe one with overrides, ``FILE [--set
    ...]``, which can be longer than a file name may be)."""
    if not source:
        return False
    try:
        return Path(source).is_file()
    except (OSError, ValueError):  # too long a name, or a NUL byte: not a file
        return False


def foreign_entries(run_dir: Path) -> list[str]:
    """The entries of ``run_dir`` that no run folder holds (none when it does not exist)."""
    try:
        return sorted(entry.name for entry in run_dir.iterdir() if entry.name not in RUN_FOLDER_ENTRIES)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _holds_seed_runs(folder: Path) -> bool:
    """Whether ``folder`` is a ``flexkit compare`` setting's folder (it holds ``seed<N>`` run folders)."""
    try:
        return folder.is_dir() and any(e.name.startswith("seed") and e.name[4:].isdigit() for e in folder.iterdir())
    except OSError:
        return False


def _not_a_run_folder(run_dir: Path, doing: str) -> FlexkitError | None:
    """Why ``run_dir`` (an existing folder) cannot be a run folder, or ``None`` when it can."""
    others = foreign_entries(run_dir)
    if (run_dir / COMPARE_RESULTS).exists() or any(_holds_seed_runs(run_dir / name) for name in others):
        return FlexkitError(f"{run_dir} is a flexkit compare folder, not a run folder: {doing} would mix a run's "
                            "files with its settings' runs; continue it with the same flexkit compare command "
                            f"(--out {run_dir}), or give flexkit run a folder of its own")
    if others:
        shown = ", ".join(others[:5]) + (f", ... ({len(others)} in all)" if len(others) > 5 else "")
        return FlexkitError(f"{run_dir} is not a flexkit run folder (it holds {shown}): {doing} would mix a run's "
                            "files with them; give a new or empty folder")
    return None


def start_run_folder(pipe: Pipeline, run_dir: Path) -> None:
    """Create (or reuse) ``run_dir`` for a new run: copy the pipeline file, write ``resolved.json`` and an empty
    ``metrics.jsonl``. Refuses a folder that holds a committed checkpoint, a ``flexkit compare`` folder and one that
    holds files no run folder holds."""
    if (run_dir / CHECKPOINT_DIR / STATE_FILE).exists():
        raise FlexkitError(f"{run_dir} already holds a run; pass --resume to continue it or choose --out")
    refused = _not_a_run_folder(run_dir, "starting a run there")
    if refused is not None:
        raise refused
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if _is_pipeline_file(pipe.source):
            copy_pipeline_file(pipe.source, run_dir / "pipeline.toml")  # its #:schema path still valid
        (run_dir / RESOLVED_FILE).write_text(_resolved_text(pipe))
        (run_dir / METRICS_FILE).write_text("", encoding="utf-8")
    except OSError as exc:
        raise FlexkitError(f"cannot write the run folder {run_dir}: {_reason(exc)}") from None


def _resolved_text(pipe: Pipeline) -> str:
    """The validated config as ``resolved.json`` records it."""
    return json.dumps(attrs.asdict(pipe.config), indent=2, default=str) + "\n"


def update_resolved_config(pipe: Pipeline, run_dir: Path) -> list[str]:
    """On resume: the settings in which ``pipe`` differs from the config the run last ran with (its
    ``resolved.json``; only those a checkpoint allows to change get this far, such as ``[run] total_steps``), and
    ``resolved.json`` rewritten to the config that runs from now on. None when it is unchanged or unreadable."""
    path = run_dir / RESOLVED_FILE
    text = _resolved_text(pipe)
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        old = None
    changes = differences(old, json.loads(text), form="{path}: {old!r} → {new!r}") if isinstance(old, dict) else []
    if changes or old is None:
        try:
            path.write_text(text)
        except OSError as exc:
            raise FlexkitError(f"cannot write {path}: {_reason(exc)}") from None
    return changes


def read_metrics(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The records of a ``metrics.jsonl`` file as ``(line, record)`` pairs (none when the file is missing), each
    record under the current names (:func:`~flexkit._metric_names.upgrade_record`; the line as written).

    A last line that is not a JSON object (a write cut short by a crash or a full disk) is dropped with a
    warning; a damaged line before it raises :class:`~flexkit.errors.FlexkitError` with its line number.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise FlexkitError(f"cannot read {path}: {_reason(exc)}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[tuple[str, dict[str, Any]]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            text = raw.decode("utf-8")
        except ValueError as exc:
            record, text, why = None, "", str(exc)
        else:
            why = f"a JSON {type(record).__name__}, not an object"
        if not isinstance(record, dict) or not _is_step(record.get("step")):
            if number == len(lines):
                log.warning("dropping a torn last line of the metrics file", path=str(path), line=number)
                continue
            why = why if not isinstance(record, dict) else "no step number"
            raise FlexkitError(f"{path} line {number} is damaged ({why}); the checkpoint is not affected: repair "
                               "or remove that line, or move the file away to resume with metrics from the "
                               "checkpoint's step only")
        out.append((text, upgrade_record(record)))
    return out


def _is_step(value: Any) -> bool:
    """A record's step: a count, or :data:`INITIAL_STEP` (the evaluation before training)."""
    return is_count(value) or (type(value) is int and value == INITIAL_STEP)


def _runner_state(pipe: Pipeline, extra: Mapping[str, Any], ckpt: Path) -> Mapping[str, Any]:
    """The checkpoint's run counters (``extra.runner``) after checking them and the trainer state's presence."""
    problems: list[str] = []
    if not isinstance(extra.get(TRAINER_KEY), Mapping):
        add_problem(problems, (EXTRA_KEY, TRAINER_KEY), "missing, or not a table")
    refill = pipe.config.sample is not None and pipe.config.sample.refill is not None
    batches = None if refill else pipe.scheduler.step  # one read per step without refill
    RunCounters.check_state(extra.get(RUNNER_KEY), (EXTRA_KEY, RUNNER_KEY), problems, batches=batches)
    if problems:
        raise CheckpointError(f"checkpoint in {ckpt} holds an invalid state: " + "; ".join(problems))
    return extra[RUNNER_KEY]  # type: ignore[no-any-return]  # checked: a table


def resume_run_folder(pipe: Pipeline, trainer: TrainerLike, run_dir: Path, replay: ReplayBuffer | None = None
                      ) -> Resumed:
    """Load ``run_dir``'s checkpoint into ``pipe``, ``trainer`` and ``replay`` (``[replay]``'s buffer), restore
    the run's counters and evaluations and the last record, and cut ``metrics.jsonl`` back to the checkpoint's
    step."""
    cfg = pipe.config
    ckpt = run_dir / CHECKPOINT_DIR
    if not run_dir.is_dir():
        raise FlexkitError(f"no run folder {run_dir} to resume")
    if not (ckpt / STATE_FILE).exists():
        refused = _not_a_run_folder(run_dir, "resuming it")
        if refused is not None:
            raise refused
        raise FlexkitError(
            f"{run_dir} has no checkpoint yet: the run stopped before its first one ([run] checkpoint_every = "
            f"{cfg.run.checkpoint_every}); start it again without --resume (--out {run_dir} reuses the folder)")
    extra = pipe.load_checkpoint(ckpt)
    remove_leftovers(ckpt)  # a run killed inside its last save may never save again
    runner = _runner_state(pipe, extra, ckpt)
    try:
        trainer.load_state_dict(extra[TRAINER_KEY])
    except Exception as exc:  # the trainer refusing its state: whatever it raises, named
        kind = cfg.trainer.type if cfg.trainer is not None else "?"
        raise CheckpointError(f"checkpoint in {ckpt}: the state of trainer {kind!r} does not fit: "
                              f"{type(exc).__name__}: {exc}") from None
    if replay is not None:
        try:
            replay.load_state_dict(extra.get(REPLAY_KEY))
        except CheckpointError as exc:
            raise CheckpointError(f"checkpoint in {ckpt}: {exc}") from None
    start, total = RunCounters.step_of(runner), pipe.scheduler.total_steps
    if start > total:
        raise FlexkitError(
            f"the checkpoint in {ckpt} is at step {start}, past the {total} steps this pipeline now runs "
            f"([run] total_steps / total_epochs): set at least {start} to resume, or start a new run with --out")
    metrics_path = run_dir / METRICS_FILE
    kept = [(line, record) for line, record in read_metrics(metrics_path) if record["step"] < start]
    steps = [record for _line, record in kept if record["step"] != INITIAL_STEP]
    if [record["step"] for record in steps] != list(range(start)):
        log.warning("the metrics file lacks records before the checkpoint's step", path=str(metrics_path),
                    step=start, records=len(steps))
    last_record = dict(steps[-1]) if steps else {}
    counters = RunCounters.from_state(runner, [record for _line, record in kept])
    tmp = metrics_path.with_name(metrics_path.name + ".tmp")
    try:
        tmp.write_text("".join(line + "\n" for line, _record in kept), encoding="utf-8")
        os.replace(tmp, metrics_path)  # a crash here leaves the old metrics, never a truncated file
    except OSError as exc:
        raise FlexkitError(f"cannot rewrite {metrics_path}: {_reason(exc)}; nothing else was changed") from None
    budget = cfg.run.max_rollouts
    finished = start >= total or (budget is not None and counters.rollouts >= budget)
    return Resumed(counters=counters, last_record=last_record, finished=finished)
