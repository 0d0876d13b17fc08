"""Trinity-RFT's built-in ``difficulty_based`` and flexkit's, side by side, through Trinity-RFT's own classes.

Each config (``trinity_difficulty.yaml``, ``flexkit_difficulty.yaml``) is loaded and checked by Trinity-RFT
(``load_config`` + ``check_and_update``); its ``TasksetScheduler`` then reads batches while simulated feedback
(each task's hidden pass rate, ``m`` Bernoulli rollouts) goes back through ``scheduler.feedback``, as Trinity's
explorer does. Every run is done twice: straight through, and cut after ``--cut`` steps, saved with Trinity-RFT's
``StateManager.save_explorer`` (the JSON explorer checkpoint), reloaded and resumed in a new scheduler. The script
prints where the resumed run's batches differ from the straight one.

Run from the repository root, in an environment with trinity-rft and flexkit-rft-trinity (CPU, a few seconds)::

    python examples/trinity/side_by_side.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the taskset is local: never ask the Hub

import numpy as np
from trinity.buffer.task_scheduler import get_taskset_scheduler
from trinity.common.config import Config, load_config
from trinity.manager.state_manager import StateManager

HERE = Path(__file__).resolve().parent
CONFIGS = {"trinity difficulty_based": HERE / "trinity_difficulty.yaml",
           "flexkit difficulty_based": HERE / "flexkit_difficulty.yaml"}
#: The policy's hidden capability: its true pass rate on a task lies this far from the weak to the strong reference.
CAPABILITY = 0.6


def load(path: Path, workdir: Path, **buffer: Any) -> Config:
    """A checked Trinity-RFT config from ``path``, with the taskset and checkpoints resolved for this machine."""
    config = load_config(str(path))
    config.checkpoint_root_dir = str(workdir)
    for taskset in config.buffer.explorer_input.tasksets:
        taskset.path = str(HERE / "tasks")
    for key, value in buffer.items():
        setattr(config.buffer, key, value)
    return config.check_and_update()


def hidden_pass_rates() -> np.ndarray:
    """Each task's true pass rate for the simulated policy (between the two reference models' rates)."""
    rows = [json.loads(line) for line in (HERE / "tasks" / "train.jsonl").read_text().splitlines()]
    weak = np.array([r["weak_pass_rate"] for r in rows])
    strong = np.array([r["strong_pass_rate"] for r in rows])
    return np.clip(weak + CAPABILITY * (strong - weak), 0.0, 1.0)


def feedback_for(tasks: list, step: int, rates: np.ndarray, m: int = 8) -> dict:
    """Trinity-RFT's ``selector_metric`` payload for one step: each task's mean reward over ``m`` rollouts, drawn
    from a generator seeded by (step, task) so that a resumed run sees the same outcomes."""
    payload: dict[int, dict[str, list]] = {}
    for task in tasks:
        tid, index = task.index["taskset_id"], task.index["index"]
        wins = np.random.default_rng([step, tid, index]).binomial(m, rates[index])
        part = payload.setdefault(tid, {"indices": [], "values": []})
        part["indices"].append(index)
        part["values"].append(wins / m)
    return {"selector_metric": payload}


async def run(config: Config, steps: range, rates: np.ndarray, state: dict | None = None) -> tuple[list, Any]:
    """Read ``steps`` batches through Trinity-RFT's scheduler built from ``state`` (an explorer checkpoint),
    feeding each back; returns the batches (task indices) and the scheduler."""
    scheduler = get_taskset_scheduler(explorer_state=dict(state or {}), config=config)
    batches = []
    for step in steps:
        tasks = await scheduler.read()
        batches.append(sorted(t.index["index"] for t in tasks))
        scheduler.feedback(feedback_for(tasks, step, rates))
    return batches, scheduler


async def compare(config: Config, steps: int, cut: int, rates: np.ndarray) -> dict[str, Any]:
    """Straight run vs a run cut at ``cut``, checkpointed through Trinity-RFT's StateManager and resumed."""
    straight, _ = await run(config, range(steps), rates)
    first, scheduler = await run(config, range(cut), rates)
    manager = StateManager(path=config.checkpoint_job_dir, explorer_name=config.explorer.name)
    manager.save_explorer(current_step=cut, taskset_states=scheduler.state_dict())
    saved = Path(manager.explorer_state_path).stat().st_size
    rest, _ = await run(config, range(cut, steps), rates, state=manager.load_explorer())
    differ = [step + 1 for step, (a, b) in enumerate(zip(straight, first + rest, strict=True)) if a != b]
    return {"straight": straight, "resumed": first + rest, "differ": differ, "checkpoint_bytes": saved,
            "state_keys": sorted(scheduler.state_dict()[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--cut", type=int, default=6)
    args = parser.parse_args(argv)
    rates = hidden_pass_rates()
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for label, path in CONFIGS.items():
            config = load(path, Path(tmp) / label.split()[0])
            results[label] = asyncio.run(compare(config, args.steps, args.cut, rates))
    for label, result in results.items():
        picked = [float(rates[result["straight"][s]].mean()) for s in range(args.steps)]
        print(f"{label}: checkpoint {result['checkpoint_bytes']} bytes, taskset state keys {result['state_keys']}")
        print(f"  mean hidden pass rate of the picked tasks, steps 1-{args.steps}: "
              + " ".join(f"{p:.2f}" for p in picked))
        if result["differ"]:
            print(f"  resumed after step {args.cut}: batches differ from the straight run at steps {result['differ']}")
        else:
            print(f"  resumed after step {args.cut}: identical to the straight run")
    same = sum(a == b for a, b in zip(*(r["straight"] for r in results.values()), strict=True))
    print(f"straight runs: the two selectors picked the same batch at {same} of {args.steps} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
