"""Scheduler benchmark: 8 tasksets read from JSONL, prefetch on and off, with a stand-in training step.

    python benchmarks/scheduler.py            # 8 tasksets x 100,000 tasks, batch 256, 30 steps per mode
    python benchmarks/scheduler.py --quick    # 8 x 2,000 tasks, 10 steps (CI smoke mode)

Each step: ``read()`` a batch, "roll out and train" for ``--train-ms`` (a sleep, which releases the GIL as a real
GPU step would), then give per-task feedback. Reported per mode: the median time the trainer waits in ``read()`` and in
``feedback()`` — the scheduler's cost on the training loop's critical path. With prefetch, the next batch's
selection and row reads run during the training step. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flexkit import SELECTOR_METRIC, pipeline_from_dict

SELECTORS = [
    {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 1.0},
    {"type": "shuffle"},
    {"type": "random"},
    {"type": "offline_easy2hard", "feature_keys": ["f0"]},
]


def write_tasksets(root: Path, count: int, size: int) -> None:
    """``count`` JSONL files of ``size`` rows with a prompt and two reference pass rates."""
    rng = np.random.default_rng(0)
    for t in range(count):
        f0 = rng.uniform(0, 0.6, size)
        f1 = np.minimum(f0 + rng.uniform(0, 0.4, size), 1.0)
        with (root / f"t{t}.jsonl").open("w") as out:
            for i in range(size):
                out.write(json.dumps({"prompt": f"task {t}-{i}: " + "x" * 64, "f0": round(float(f0[i]), 4),
                                      "f1": round(float(f1[i]), 4)}) + "\n")


def measure(root: Path, count: int, steps: int, batch: int, train_ms: float, prefetch: bool) -> dict[str, Any]:
    """Median ms per step spent in read() and in feedback(), for one prefetch mode."""
    data = {
        "run": {"batch_size": batch, "seed": 0, "total_steps": steps + 2, "prefetch": prefetch},
        "tasksets": [{"name": f"t{t}", "path": f"t{t}.jsonl", "selector": SELECTORS[t % len(SELECTORS)]}
                     for t in range(count)],
    }
    sched = pipeline_from_dict(data, base_dir=root).scheduler
    rng = np.random.default_rng(1)
    reads, feeds = [], []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        tasks = sched.read()
        t1 = time.perf_counter()
        time.sleep(train_ms / 1e3)  # rollout + training: feedback arrives after it, as in a real loop
        metric: dict[int, dict[str, list[Any]]] = {}
        for task in tasks:
            part = metric.setdefault(task.taskset_id, {"indices": [], "values": []})
            if task.index not in part["indices"]:
                part["indices"].append(task.index)
                part["values"].append(float(rng.uniform()))
        t2 = time.perf_counter()
        sched.feedback({SELECTOR_METRIC: metric})
        t3 = time.perf_counter()
        reads.append((t1 - t0) * 1e3)
        feeds.append((t3 - t2) * 1e3)
    sched.close()
    return {"prefetch": prefetch, "read_ms": statistics.median(reads[2:]), "feedback_ms": statistics.median(feeds[2:])}


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small tasksets, 10 steps (CI smoke mode)")
    parser.add_argument("--train-ms", type=float, default=50.0, help="stand-in training step (default 50 ms)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    count, size, steps, batch = (8, 2_000, 10, 256) if args.quick else (8, 100_000, 30, 256)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tasksets(root, count, size)
        rows = [measure(root, count, steps, batch, args.train_ms, prefetch) for prefetch in (False, True)]
    print(f"{count} tasksets x {size:,} tasks (JSONL), batch {batch}, training step {args.train_ms:g} ms; "
          f"median over {steps} steps")
    print(f"{'prefetch':<10}{'read ms':>10}{'feedback ms':>13}")
    for row in rows:
        print(f"{'on' if row['prefetch'] else 'off':<10}{row['read_ms']:>10.2f}{row['feedback_ms']:>13.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
