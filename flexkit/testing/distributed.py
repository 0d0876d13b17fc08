"""A reference scenario for distributed schedulers (:mod:`flexkit.distributed`, a Ray service, your own): two
tasksets, deterministic rewards from rollout workers, and the sequential loop a staleness-bounded service must
reproduce batch for batch (:func:`reference`). flexkit's ledger tests and flexkit-rft-ray's tests share it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexkit.distributed import digest
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.testing._runs import write_jsonl_taskset

__all__ = ["TOTAL_STEPS", "experiences", "make_pipeline", "metrics_for", "pairs", "pipeline_data", "reference",
           "reward"]

#: Batches in the scenario.
TOTAL_STEPS = 10


def pipeline_data(*, steps: int = TOTAL_STEPS, prefetch: bool = True, batch_size: int = 5) -> dict[str, Any]:
    """Two tasksets (files ``a.jsonl``, ``b.jsonl``): an adaptive difficulty_based one and a shuffled one."""
    return {
        "run": {"batch_size": batch_size, "seed": 7, "total_steps": steps, "prefetch": prefetch},
        "tasksets": [
            {"name": "a", "path": "a.jsonl",
             "selector": {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5}},
            {"name": "b", "path": "b.jsonl", "selector": {"type": "shuffle"}},
        ],
    }


def make_pipeline(root: Path, *, steps: int = TOTAL_STEPS, prefetch: bool = True, batch_size: int = 5,
                  write: bool = True) -> Any:
    """:func:`pipeline_data`'s pipeline in ``root`` (files written unless ``write`` is false, for processes
    sharing ``root``)."""
    if write:
        write_jsonl_taskset(root / "a.jsonl", 24, seed=1)
        write_jsonl_taskset(root / "b.jsonl", 12, seed=2)
    return pipeline_from_dict(pipeline_data(steps=steps, prefetch=prefetch, batch_size=batch_size), base_dir=root)


def reward(taskset_id: int, index: int, batch_id: int) -> float:
    """A deterministic stand-in for a rollout's reward."""
    return ((taskset_id * 31 + index * 17 + batch_id * 7) % 11) / 10


def experiences(tasks: Any, batch_id: int) -> list[dict[str, Any]]:
    """Two responses per task, as a rollout worker would report them."""
    return [{"taskset_id": t.taskset_id, "index": t.index, "reward": reward(t.taskset_id, t.index, batch_id) * k / 2}
            for t in tasks for k in (1, 2)]


def metrics_for(pipe: Any, tasks: Any, batch_id: int) -> dict[str, Any]:
    """The feedback operator's selector metrics for :func:`experiences` of ``tasks``."""
    metrics: dict[str, Any] = pipe.feedback_operator.process(experiences(tasks, batch_id))[1]
    return metrics


def reference(pipe: Any, staleness: int, abandoned: frozenset[int] = frozenset()) -> tuple[list[Any], str]:
    """The sequential loop a staleness-bounded ledger must equal: feed batches <= j-1-s, then read batch j."""
    sched = pipe.scheduler
    batches: list[Any] = []
    fed = 0

    def feed_until(limit: int) -> None:
        nonlocal fed
        while fed <= limit:
            if fed not in abandoned:
                sched.feedback(metrics_for(pipe, batches[fed], fed))
            fed += 1

    for j in range(sched.total_steps):
        feed_until(j - 1 - staleness)
        batches.append(sched.read())
    feed_until(len(batches) - 1)
    return [pairs(b) for b in batches], digest(sched.state_dict())


def pairs(tasks: Any) -> list[tuple[int, int]]:
    """``(taskset_id, index)`` of each task: a batch as comparable data."""
    return [(t.taskset_id, t.index) for t in tasks]
