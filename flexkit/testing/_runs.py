"""Small helpers for tests that run pipelines: a taskset file, a run's metrics, a run that crashes at a step."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flexkit._metric_names import RUN_SECONDS
from flexkit.plugins._hookspecs import hookimpl

__all__ = ["Crash", "CrashAt", "crash_run", "jsonl_pipeline", "read_metrics", "without_clock", "without_clock_text",
           "write_jsonl_taskset"]

#: ``flexkit/run/seconds`` as ``json.dumps`` writes it into a record, with its value.
_CLOCK = re.compile(r', "' + re.escape(RUN_SECONDS) + r'": [-+.0-9eE]+')


def write_jsonl_taskset(path: str | Path, n: int, seed: int = 0) -> Path:
    """Write ``n`` tasks to the JSONL file ``path``: ``{"id": i, "f0": ..., "f1": ...}`` with ``f0`` drawn from
    [0, 0.5) and ``f1`` from [0.5, 1) (the two feature columns ``difficulty_based`` reads), fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "f0": float(rng.uniform(0, 0.5)), "f1": float(rng.uniform(0.5, 1))}) + "\n")
    return path


def jsonl_pipeline(directory: str | Path, sizes: Sequence[int], run: dict[str, Any], *,
                   selector: str = "difficulty_based", sample: dict[str, Any] | None = None) -> Any:
    """A pipeline over JSONL tasksets ``t0``, ``t1``, ... of ``sizes`` rows (:func:`write_jsonl_taskset`, seeds
    0, 1, ...; written into ``directory`` unless there), each with a ``shuffle`` or a ``difficulty_based`` selector;
    ``run`` is its ``[run]`` table and ``sample``, if given, its ``[sample]`` table."""
    from flexkit.pipeline._pipeline import pipeline_from_dict

    directory = Path(directory)
    for i, n in enumerate(sizes):
        path = directory / f"t{i}.jsonl"
        if not path.exists():
            write_jsonl_taskset(path, n, seed=i)
    sel = {"type": "shuffle"} if selector == "shuffle" else {
        "type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5}
    data: dict[str, Any] = {
        "run": run, "tasksets": [{"name": f"t{i}", "path": f"t{i}.jsonl", "selector": sel} for i in range(len(sizes))]}
    if sample is not None:
        data["sample"] = sample
    return pipeline_from_dict(data, base_dir=directory)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (``flexkit run``'s output), in order (the first, ``"step": -1``,
    is the evaluation before training)."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def without_clock(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``records`` without their wall clock (``flexkit/run/seconds``): the one value in which the records of two
    identical runs (an uninterrupted one and a resumed one, say) differ."""
    return [{key: value for key, value in record.items() if key != RUN_SECONDS} for record in records]


def without_clock_text(text: str) -> str:
    """A ``metrics.jsonl`` text without its records' ``flexkit/run/seconds`` (see :func:`without_clock`), every
    other byte as written."""
    return _CLOCK.sub("", text)


class Crash(BaseException):
    """The failure :class:`CrashAt` injects: a ``BaseException``, like the ``KeyboardInterrupt`` of a stopped run,
    so it ends the run where an observer's ordinary exception would only be logged
    (:func:`flexkit.scheduler._observers.notify`)."""


class CrashAt:
    """A plugin that crashes the run when the scheduler hands out the batch of ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    @hookimpl
    def flexkit_on_select(self, step: int, tasks: Any) -> None:
        """Raise :class:`Crash` at the batch of :attr:`step`."""
        if step == self.step:
            raise Crash(f"injected crash at step {step}")


def crash_run(pipeline: Any, run_dir: str | Path, step: int) -> None:
    """Run ``pipeline`` with :func:`flexkit.run_pipeline` into ``run_dir`` until the scheduler hands out the batch
    of ``step``, where it must crash (:class:`CrashAt`, unregistered afterwards: the plugin host is shared).
    Raises ``AssertionError`` if the run ends without crashing; resume it with ``run_pipeline(..., resume=True)``."""
    from flexkit.run._runner import run_pipeline

    crasher = CrashAt(step)
    pipeline.plugins.pm.register(crasher)
    try:
        run_pipeline(pipeline, run_dir=Path(run_dir), progress=None)
    except Crash:
        return
    finally:
        pipeline.plugins.pm.unregister(crasher)
    raise AssertionError(f"the run did not reach step {step}")
