"""flexkit's overhead inside a training step of the embedded trainer (``plugins/flexkit-rft-toyrl``).

    python benchmarks/overhead.py             # the levels 1-4 embedded run (PIPELINE), 60 timed steps after 10 warm-up
    python benchmarks/overhead.py --quick     # a tiny model and batch, a few steps (the CI smoke mode)

Each step is timed part by part, the way ``flexkit run`` drives it: flexkit's parts on the step's critical path
are ``scheduler.read()``, the sample stage (scorer, actuator, token weights; the pipeline gets a
``group_solve_rate`` + ``threshold_band`` stage so there is one to time) and the wait for ``pipeline.feedback()``
(pass-rate calculator, selector update and the next batch's selection), which runs in a thread alongside the
trainer's update; the trainer's parts are rollout, advantages and update. It prints the median of each part
and flexkit's share of the step, computed per step and then the median. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
#: flexkit's parts on the step's critical path (``feedback_wait``: the time the step waits for the feedback after
#: the update, which ran alongside it); ``feedback_thread`` is the feedback's own duration in its thread, shown
#: but not counted.
FLEXKIT_PARTS = ("read", "sample_stage", "feedback_wait")
TRAINER_PARTS = ("rollout", "advantages", "update")
OFF_PATH_PARTS = ("feedback_thread",)
SAMPLE = {"mechanism": "select", "scorer": {"type": "group_solve_rate"},
          "actuator": {"type": "threshold_band", "low": 0.0, "high": 1.0}}
QUICK_TRAINER = {"type": "toyrl", "d_model": 16, "n_heads": 2, "group_size": 4, "warmup_steps": 2,
                 "eval_tasks_per_level": 5}
#: The measured pipeline: the embedded run of levels 1-4 that docs/performance.md's figures were taken on (one
#: generation round per step, so a step's share is comparable across versions).
PIPELINE = {
    "run": {"batch_size": 64, "seed": 0, "total_steps": 600, "eval_every": 50, "checkpoint_every": 100},
    "tasksets": [{"name": "addition", "storage_type": "arithmetic", "size": 20000, "levels": [1, 2, 3, 4],
                  "selector": {"type": "difficulty_based", "feature_keys": ["weak_pass_rate", "strong_pass_rate"],
                               "m": 8, "target_reward": 0.5, "tau": 0.1}}],
    "trainer": {"type": "toyrl", "group_size": 8, "num_threads": 0},
}


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and its duration in seconds."""
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def run(*, quick: bool = False, steps: int = 60, warmup: int = 10, sample: bool = True,
        prefetch: bool | None = None) -> dict[str, Any]:
    """Time ``steps`` training steps after ``warmup`` untimed ones; returns per-part medians in ms. Without
    ``sample`` the pipeline is :data:`PIPELINE` as written (no sample stage); ``prefetch`` sets ``[run]
    prefetch`` (``None``: the pipeline's default)."""
    import copy

    from flexkit import pipeline_from_dict
    from flexkit.run._runner import trainer_seed

    data = copy.deepcopy(PIPELINE)
    if sample:
        data["sample"] = SAMPLE
    if prefetch is not None:
        data["run"]["prefetch"] = prefetch
    if quick:
        data["run"].update(batch_size=8, total_steps=20)
        data["tasksets"][0]["size"] = 400
        data["trainer"] = QUICK_TRAINER
        steps, warmup = 5, 2
    pipe = pipeline_from_dict(data, base_dir=ROOT / "examples")
    cfg = pipe.config
    trainer = pipe.plugins.component("trainer", cfg.trainer.type).build(cfg.trainer.config,
                                                                         seed=trainer_seed(cfg.run.seed))
    trainer.setup(pipe)
    trainer.evaluate(step=0)  # includes the warm start, which is not part of a step
    parts: dict[str, list[float]] = {name: [] for name in (*FLEXKIT_PARTS, *TRAINER_PARTS, *OFF_PATH_PARTS)}
    shares: list[float] = []
    background = ThreadPoolExecutor(max_workers=1)
    try:
        for step in range(warmup + steps):
            t: dict[str, float] = {}
            t0 = time.perf_counter()
            tasks = pipe.scheduler.read()
            t1 = time.perf_counter()
            rollout = trainer.rollout(tasks, step=step)
            experiences = rollout.feedback_experiences()  # taken before the stage and advantages, as flexkit run
            t2 = time.perf_counter()
            if sample:
                pipe.apply_sample_stage(rollout.batch, step=step, timing="post_reward")
            t3 = time.perf_counter()
            trainer.compute_advantages(rollout.batch, step=step)
            t4 = time.perf_counter()
            weights = None
            if sample:
                pipe.apply_sample_stage(rollout.batch, step=step, timing="post_advantage")
                weights = pipe.sample_stage.token_weights(rollout.batch, step=step)
            t5 = time.perf_counter()
            pending = background.submit(_timed, pipe.feedback, experiences)
            trainer.update(rollout.batch, weights, step=step)
            t6 = time.perf_counter()
            _result, feedback_s = pending.result()  # as flexkit run: the feedback runs alongside the update
            t7 = time.perf_counter()
            t = {"read": t1 - t0, "rollout": t2 - t1, "sample_stage": (t3 - t2) + (t5 - t4), "advantages": t4 - t3,
                 "update": t6 - t5, "feedback_wait": t7 - t6, "feedback_thread": feedback_s}
            if step >= warmup:
                for name, seconds in t.items():
                    parts[name].append(seconds * 1e3)
                shares.append(sum(t[p] for p in FLEXKIT_PARTS) / (t7 - t0))
    finally:
        background.shutdown(wait=True)
        pipe.scheduler.close()
    return {
        "steps": steps,
        "batch": f"{cfg.run.batch_size} tasks x {cfg.trainer.config.group_size} samples",
        "sample_stage": sample,
        "prefetch": pipe.scheduler.prefetch,
        "median_ms": {name: statistics.median(v) for name, v in parts.items()},
        "flexkit_share_median": statistics.median(shares),
        "flexkit_share_max": max(shares),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny model and batch, a few steps (CI smoke)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps (default 60)")
    parser.add_argument("--no-sample", action="store_true", help="PIPELINE as written, no sample stage")
    parser.add_argument("--prefetch", choices=("default", "true", "false"), default="default",
                        help="[run] prefetch (default: the pipeline's default)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    args = parser.parse_args(argv)
    prefetch = None if args.prefetch == "default" else args.prefetch == "true"
    result = run(quick=args.quick, steps=args.steps, sample=not args.no_sample, prefetch=prefetch)
    stage = "with a group_solve_rate + threshold_band stage" if result["sample_stage"] else "no sample stage"
    print(f"embedded trainer step ({result['batch']}, {stage}, prefetch {result['prefetch']}), median of "
          f"{result['steps']} steps:")
    for name, ms in result["median_ms"].items():
        owner = "flexkit" if name in FLEXKIT_PARTS else "(thread)" if name in OFF_PATH_PARTS else "trainer"
        print(f"  {owner:<8}{name:<14}{ms:>10.3f} ms")
    print(f"flexkit share of a step: median {result['flexkit_share_median']:.2%}, "
          f"max {result['flexkit_share_max']:.2%}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
