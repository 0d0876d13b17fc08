"""``flexkit annotate``: measure a policy's pass rate on every task and write it next to the task's row.

Difficulty-aware selectors such as ``difficulty_based`` (after Trinity-RFT's selector) read per-task feature
columns as the pass rates of a weaker and a stronger reference model. Idealised columns are no substitute for
the real thing: this command runs the pipeline's ``[trainer]`` backend's current policy ``K`` times over a
taskset (through the trainer's own ``rollout``) and writes a copy of the taskset with the measured pass rate
per task, so the selector's features describe the model that will be trained.

The workflow (docs/annotate.md): annotate with the starting policy (``--column start_pass_rate``), and with a
stronger reference policy where one exists (``--checkpoint RUN_DIR`` loads the trainer state of a run folder,
``--column strong_pass_rate``), then name both columns as the selector's ``feature_keys``. Writing is
incremental and crash-safe: each finished chunk is committed to ``OUT.partial`` with the trainer's state
(:mod:`flexkit.annotate._partial`), and running the same command again continues after the last committed chunk,
giving the file an uninterrupted call writes. What can be refused is refused before the first rollout: the output
suffix, the column name, values the output cannot hold (:mod:`flexkit.annotate._output`), a checkpoint of another
pipeline, a damaged partial file or one of another call. Parquet output needs ``flexkit-rft[parquet]``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from flexkit._files import require_regular_file
from flexkit.annotate._output import output_format, row_lines, scan_rows, write_output
from flexkit.annotate._partial import IDENTITY_VERSION, PartialOutput
from flexkit.errors import CheckpointError, ConfigError, FlexkitError, TasksetError
from flexkit.pipeline._checkpoint import STATE_FILE, load_state
from flexkit.pipeline._fingerprint import differences
from flexkit.pipeline._pipeline import Pipeline
from flexkit.pipeline._state import EXTRA_KEY, TRAINER_KEY
from flexkit.plugins._contract import TrainerLike
from flexkit.run._runner import CHECKPOINT_DIR, new_trainer
from flexkit.scheduler._scheduler import Task
from flexkit.scheduler.feedback import task_triples
from flexkit.tasksets._base import path_of

#: Most responses per task ``annotate`` draws (``--samples``): a pass rate needs no more.
MAX_SAMPLES = 1_000_000


def load_reference(pipe: Pipeline, checkpoint: str | os.PathLike[str]) -> tuple[Mapping[str, Any], str]:
    """The trainer state of a run folder's checkpoint (``RUN_DIR`` or ``RUN_DIR/checkpoint``) and the digest of
    the checkpoint's content (``sha256:...`` of its ``state.json``, which holds the arrays file's SHA-256).

    The checkpoint must come from a run of the same trainer type over the same tasksets (names and sizes, in
    order; an annotated copy of a taskset's rows qualifies): a trainer's state may be kept per task (the
    simulator's memorisation is), so another taskset's state would describe other tasks. Anything else raises
    :class:`CheckpointError` before any rollout.
    """
    folder = Path(checkpoint)
    if (folder / CHECKPOINT_DIR).is_dir():
        folder = folder / CHECKPOINT_DIR
    before = _file_digest(folder / STATE_FILE)
    state, meta = load_state(folder)
    if _file_digest(folder / STATE_FILE) != before:
        raise CheckpointError(f"the checkpoint in {folder} changed while it was read (is a run still writing it?); "
                              "try again once it is finished")
    extra = state.get(EXTRA_KEY) if isinstance(state, Mapping) else None
    fingerprint = meta.get("fingerprint") if isinstance(meta, Mapping) else None
    if not isinstance(extra, Mapping) or TRAINER_KEY not in extra or not isinstance(fingerprint, Mapping):
        raise CheckpointError(f"{folder} holds no trainer state (is it a flexkit run's checkpoint?)")
    diffs = differences(_reference_identity(fingerprint), _reference_identity(pipe.fingerprint()))
    if diffs:
        raise CheckpointError(f"the checkpoint in {folder} is from a run of another pipeline: " + "; ".join(diffs)
                              + ". --checkpoint needs a run of the same [trainer] type over the same tasksets "
                              "(names and sizes)")
    return extra[TRAINER_KEY], before


def _reference_identity(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a pipeline fingerprint a trainer state depends on: the trainer type, the tasksets' names and
    sizes."""
    trainer = fingerprint.get("trainer")
    tasksets = fingerprint.get("tasksets")
    return {"trainer": trainer.get("type") if isinstance(trainer, Mapping) else trainer,
            "tasksets": [{"name": t.get("name"), "size": t.get("size")} if isinstance(t, Mapping) else t
                         for t in (tasksets if isinstance(tasksets, list) else [])]}


def _file_digest(path: Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint in {path.parent} (missing {path.name})") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None


def build_trainer(pipe: Pipeline, checkpoint: str | os.PathLike[str] | None = None) -> TrainerLike:
    """The pipeline's trainer, set up, with the trainer state of a run folder's checkpoint when given (checked
    with :func:`load_reference`)."""
    state = load_reference(pipe, checkpoint)[0] if checkpoint is not None else None
    return _set_up_trainer(pipe, state, f"the checkpoint in {checkpoint}")


def _set_up_trainer(pipe: Pipeline, state: Mapping[str, Any] | None, where: str) -> TrainerLike:
    """The pipeline's trainer, set up, then loaded with ``state`` (from ``where``) when given."""
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("flexkit annotate needs a [trainer] table whose backend implements rollout", pipe.source)
    trainer: TrainerLike = new_trainer(pipe)  # checked against the trainer contract when built
    trainer.setup(pipe)
    if state is not None:
        _load_trainer_state(trainer, state, where, cfg.trainer.type)
    return trainer


def _load_trainer_state(trainer: TrainerLike, state: Mapping[str, Any], where: str, kind: str) -> None:
    try:
        trainer.load_state_dict(state)
    except Exception as exc:  # the trainer refusing its state: whatever it raises, named
        raise CheckpointError(f"the trainer state in {where} does not fit this pipeline's trainer {kind!r}: "
                              f"{type(exc).__name__}: {exc}") from None


def annotate(
    pipe: Pipeline,
    *,
    out: str | os.PathLike[str],
    samples: int,
    column: str = "pass_rate",
    taskset: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    chunk: int | None = None,
    overwrite: bool = False,
    progress: IO[str] | None = sys.stderr,
) -> Path:
    """Write ``out``: every row of ``taskset`` with ``column`` = the trainer policy's mean reward over at least
    ``samples`` responses (whole rollouts of the trainer's group size). Returns the path written.

    ``chunk`` tasks are rolled out together (default: the pipeline's batch size). Continues a previous,
    interrupted call with the same arguments from ``out.partial`` (:mod:`flexkit.annotate._partial`), giving the
    same file as an uninterrupted call. ``column`` must not be a column of the taskset unless ``overwrite``.
    Everything that can be checked is checked before the first rollout.
    """
    if not 1 <= samples <= MAX_SAMPLES:
        raise ConfigError(f"samples must be between 1 and {MAX_SAMPLES:,} responses per task, got {samples}")
    out = Path(out)
    fmt = output_format(out)
    require_regular_file(out, "--out", ConfigError)  # a folder or a FIFO there would fail only after every rollout
    if not column.strip():
        raise ConfigError("--column must name the new column, got an empty name")
    tid = _taskset_id(pipe, taskset)
    entry = pipe.scheduler.entries[tid]
    size = entry.size
    chunk = int(chunk or pipe.config.run.batch_size)
    if pipe.config.trainer is None:
        raise ConfigError("flexkit annotate needs a [trainer] table whose backend implements rollout", pipe.source)
    reference, checkpoint_digest = load_reference(pipe, checkpoint) if checkpoint is not None else (None, None)
    scan = scan_rows(entry.taskset, size=size, chunk=chunk, column=column, overwrite=overwrite, fmt=fmt)
    identity = {"version": IDENTITY_VERSION, "taskset": entry.name, "size": size, "rows": scan.digest,
                "checkpoint": checkpoint_digest, "samples": samples, "column": column, "overwrite": overwrite,
                "chunk": chunk, "seed": pipe.config.run.seed, "trainer": pipe.fingerprint()["trainer"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = PartialOutput.open(out.with_name(out.name + ".partial"), identity)
    trainer = _set_up_trainer(pipe, reference, f"the checkpoint in {checkpoint}")
    if partial.committed:
        _load_trainer_state(trainer, partial.trainer_state, f"{partial.path}'s commit record",
                            pipe.config.trainer.type)
    else:
        partial.commit(b"", 0, trainer.state_dict())  # checks now that the trainer's state can be saved
    started = time.monotonic()
    for start in range(partial.rows, size, chunk):
        indices = list(range(start, min(size, start + chunk)))
        rows = entry.taskset.read(indices)
        if hashlib.sha256(row_lines(rows, start, entry.taskset)).hexdigest() != scan.chunk_digests[start // chunk]:
            raise TasksetError(f"rows {start}..{indices[-1]} changed while they were being annotated: restore the "
                               "file and run the command again", taskset=entry.name,
                               path=path_of(entry.taskset))
        tasks = [Task(taskset_id=tid, taskset=entry.name, index=i, data=row)
                 for i, row in zip(indices, rows, strict=True)]
        rates = _pass_rates(trainer, tasks, samples)
        data = row_lines([{**row, column: rate} for row, rate in zip(rows, rates, strict=True)], start,
                         entry.taskset)
        partial.commit(data, len(rows), trainer.state_dict())
        _report(progress, start + len(indices), size, started)
    write_output(out, fmt, partial.body())
    partial.remove()
    return out


def _taskset_id(pipe: Pipeline, name: str | None) -> int:
    names = pipe.scheduler.names
    if name is None:
        if len(names) > 1:
            raise ConfigError(f"the pipeline has {len(names)} tasksets; name one with --taskset "
                              f"({', '.join(names)})")
        return 0
    if name not in names:
        raise ConfigError(f"no taskset {name!r}; tasksets: {', '.join(names)}")
    return names.index(name)


def _pass_rates(trainer: TrainerLike, tasks: list[Task], samples: int) -> list[float]:
    """Mean reward per task over rollouts repeated until each task has at least ``samples`` responses."""
    total = np.zeros(len(tasks))
    responses = np.zeros(len(tasks))
    position = {(t.taskset_id, t.index): i for i, t in enumerate(tasks)}
    while responses.min() < samples:
        before = responses.copy()
        for tid, index, reward in task_triples(trainer.rollout(tasks, step=0).feedback_experiences()):
            i = position[(int(tid), int(index))]
            total[i] += float(reward)
            responses[i] += 1
        if (responses == before).any():
            missing = [tasks[i].index for i in np.flatnonzero(responses == before)[:5]]
            raise FlexkitError(f"the trainer's rollout returned no experiences for tasks {missing}")
    rates: list[float] = (total / responses).tolist()
    return rates


def _report(stream: IO[str] | None, done: int, size: int, started: float) -> None:
    if stream is None:
        return
    elapsed = time.monotonic() - started
    stream.write(f"annotated {done:,}/{size:,} tasks ({100 * done / size:.0f}%) {elapsed:.1f}s\n")
    stream.flush()
