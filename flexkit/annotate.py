"""``flexkit annotate``: measure a policy's pass rate on every task and write it next to the task's row.

Difficulty-aware selectors such as ``difficulty_based`` (after Trinity-RFT's selector) read per-task feature
columns as the pass rates of a weaker and a stronger reference model. Idealised columns are no substitute for
the real thing: this command runs the pipeline's ``[trainer]`` backend's current policy ``K`` times over a
taskset (through the trainer's own ``rollout``) and writes a copy of the taskset with the measured pass rate
per task, so the selector's features describe the model that will be trained.

The workflow (docs/annotate.md): annotate with the starting policy (``--column start_pass_rate``), and with a
stronger reference policy where one exists (``--checkpoint RUN_DIR`` loads the trainer state of a run folder,
``--column strong_pass_rate``), then name both columns as the selector's ``feature_keys``. Writing is
incremental: rows are appended to ``OUT.partial`` as their chunk finishes, and running the same command again
continues after the last finished chunk. Parquet output needs ``flexkit-rft[parquet]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from flexkit.checkpoint import CheckpointError, load_state
from flexkit.errors import ConfigError, FlexkitError
from flexkit.feedback import task_triples
from flexkit.pipeline import Pipeline
from flexkit.runner import CHECKPOINT_DIR, trainer_seed
from flexkit.scheduler import Task


def build_trainer(pipe: Pipeline, checkpoint: str | os.PathLike[str] | None = None) -> Any:
    """The pipeline's trainer, set up, with the trainer state of a run folder's checkpoint when given."""
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("flexkit annotate needs a [trainer] table whose backend implements rollout", pipe.source)
    trainer = pipe.plugins.component("trainer", cfg.trainer.type).build(cfg.trainer.config,
                                                                         seed=trainer_seed(cfg.run.seed))
    trainer.setup(pipe)
    if checkpoint is not None:
        folder = Path(checkpoint)
        if (folder / CHECKPOINT_DIR).is_dir():
            folder = folder / CHECKPOINT_DIR
        state, _meta = load_state(folder)
        extra = state.get("extra") if isinstance(state, Mapping) else None
        if not isinstance(extra, Mapping) or "trainer" not in extra:
            raise CheckpointError(f"{folder} holds no trainer state (is it a flexkit run's checkpoint?)")
        try:
            trainer.load_state_dict(extra["trainer"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"the trainer state in {folder} does not fit this pipeline's [trainer]: "
                                  f"{type(exc).__name__}: {exc}") from None
    return trainer


def annotate(
    pipe: Pipeline,
    *,
    out: str | os.PathLike[str],
    samples: int,
    column: str = "pass_rate",
    taskset: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    chunk: int | None = None,
    progress: IO[str] | None = sys.stderr,
) -> Path:
    """Write ``out``: every row of ``taskset`` with ``column`` = the trainer policy's mean reward over at least
    ``samples`` responses (whole rollouts of the trainer's group size). Returns the path written.

    ``chunk`` tasks are rolled out together (default: the pipeline's batch size). Continues a previous,
    interrupted call with the same arguments from ``out.partial``.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    out = Path(out)
    fmt = "parquet" if out.suffix == ".parquet" else "jsonl"
    if fmt == "jsonl" and out.suffix not in (".jsonl", ".json"):
        raise ConfigError(f"--out must end in .jsonl or .parquet, got {out.name!r}")
    tid = _taskset_id(pipe, taskset)
    entry = pipe.scheduler.entries[tid]
    size = entry.size
    chunk = int(chunk or pipe.config.run.batch_size)
    trainer = build_trainer(pipe, checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    header = {"flexkit_annotate": {"taskset": entry.name, "size": size, "samples": samples, "column": column,
                                   "checkpoint": str(checkpoint) if checkpoint else None}}
    done = _resume_count(partial, header)
    started = time.monotonic()
    with partial.open("a", encoding="utf-8") as sink:
        if done == 0:
            sink.write(json.dumps(header) + "\n")
        for start in range(done, size, chunk):
            indices = list(range(start, min(size, start + chunk)))
            rows = entry.taskset.read(indices)
            tasks = [Task(taskset_id=tid, taskset=entry.name, index=i, data=row)
                     for i, row in zip(indices, rows, strict=True)]
            rates = _pass_rates(trainer, tasks, samples)
            for row, rate in zip(rows, rates, strict=True):
                sink.write(json.dumps({**row, column: rate}) + "\n")
            sink.flush()
            _report(progress, start + len(indices), size, started)
    _finish(partial, out, fmt)
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


def _pass_rates(trainer: Any, tasks: list[Task], samples: int) -> list[float]:
    """Mean reward per task over rollouts repeated until each task has at least ``samples`` responses."""
    total = np.zeros(len(tasks))
    responses = np.zeros(len(tasks))
    position = {(t.taskset_id, t.index): i for i, t in enumerate(tasks)}
    while responses.min() < samples:
        before = responses.copy()
        for tid, index, reward in task_triples(trainer.rollout(tasks, step=0).experiences):
            i = position[(int(tid), int(index))]
            total[i] += float(reward)
            responses[i] += 1
        if (responses == before).any():
            missing = [tasks[i].index for i in np.flatnonzero(responses == before)[:5]]
            raise FlexkitError(f"the trainer's rollout returned no experiences for tasks {missing}")
    return (total / responses).tolist()


def _resume_count(partial: Path, header: Mapping[str, Any]) -> int:
    """Rows already written by an interrupted call with the same arguments (a torn last line is dropped)."""
    if not partial.exists():
        return 0
    lines = partial.read_text(encoding="utf-8").split("\n")
    complete = lines[:-1]  # the text after the last newline is a torn line, or empty
    try:
        first = json.loads(complete[0]) if complete else None
    except json.JSONDecodeError:
        first = None
    if first != json.loads(json.dumps(header)):
        raise FlexkitError(f"{partial} is from an annotate call with other arguments ({first}); remove it to "
                           "start again")
    if lines[-1]:
        partial.write_text("\n".join(complete) + "\n", encoding="utf-8")
    return len(complete) - 1


def _report(stream: IO[str] | None, done: int, size: int, started: float) -> None:
    if stream is None:
        return
    elapsed = time.monotonic() - started
    stream.write(f"annotated {done:,}/{size:,} tasks ({100 * done / size:.0f}%) {elapsed:.1f}s\n")
    stream.flush()


def _finish(partial: Path, out: Path, fmt: str) -> None:
    """Turn the finished ``partial`` file into ``out`` (atomically), then remove it."""
    rows = [json.loads(line) for line in partial.read_text(encoding="utf-8").splitlines()[1:]]
    tmp = out.with_name(out.name + ".tmp")
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise FlexkitError("Parquet output needs pyarrow: pip install \"flexkit-rft[parquet]\"") from None
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, out)
    partial.unlink()
