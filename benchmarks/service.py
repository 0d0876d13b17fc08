"""Capacity of the flexkit-rft-ray scheduler actor: how many rollout workers one actor serves.

    python benchmarks/service.py                    # 1, 8, 32, 64 workers; 3 repetitions of a 5 s window each
    python benchmarks/service.py --quick            # 1 and 2 workers, one 1 s window (CI smoke mode)
    python benchmarks/service.py --json out.json    # also write the rows and the machine description as JSON

One local Ray runtime (loopback, no dashboard) and one scheduler actor (``flexkit_ray.SchedulerActor``'s class,
plus a ``pid()`` method for the measurement) on a ``difficulty_based`` pipeline over ``--tasks`` JSONL rows,
asynchronous mode (``max_staleness=None``), ``lease_timeout=600``. Each simulated rollout worker loops:
``lease`` a batch of ``--batch`` tasks, wait ``--gen-ms`` (default 0: no generation, so the actor's ceiling is
measured), then ``feedback_experiences`` with ``--responses`` rewards per task, exactly as ``run_worker`` does.

Workers are coroutines, not processes: W workers are spread round-robin over ``min(W, --clients)`` client
actors (async Ray actors, one process each), so 64 workers need 4 processes, not 64. Every worker has at most
one call in flight, so the actor sees W concurrent callers. Latencies are client-side (call to result). The
actor's CPU is its process's user + system CPU time over the window divided by the window (psutil on its pid):
near 100% means the actor is the bottleneck. The clients' CPU is reported the same way (summed over them).
``ledger alone`` times the same lease + feedback on a :class:`~flexkit.distributed.BatchLedger` in this process:
the actor's cost without Ray. Each setting is warmed up for ``--warmup`` s, then timed over ``--window`` s;
figures are medians over ``--reps`` repetitions. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info

from flexkit import pipeline_from_dict
from flexkit.distributed import BatchLedger

FULL_WORKERS = (1, 8, 32, 64)
QUICK_WORKERS = (1, 2)
#: A step time the capacity statement is given for (generation + feedback of one batch), seconds.
STEP_S = 10.0
LEASE_TIMEOUT_S = 600.0


# -- the pipeline ------------------------------------------------------------------------------------------


def write_tasks(path: Path, n: int, seed: int = 0) -> None:
    """``n`` JSONL rows with a prompt and two reference pass rates ``f0 <= f1``."""
    rng = np.random.default_rng(seed)
    f0 = rng.uniform(0, 0.6, n)
    f1 = np.minimum(f0 + rng.uniform(0, 0.4, n), 1.0)
    with path.open("w") as out:
        for i in range(n):
            out.write(json.dumps({"prompt": f"task {i}: " + "x" * 64, "f0": round(float(f0[i]), 4),
                                  "f1": round(float(f1[i]), 4)}) + "\n")


def pipeline_data(batch: int) -> dict[str, Any]:
    """A ``difficulty_based`` pipeline over ``tasks.jsonl`` with a run long enough never to end here."""
    return {
        "run": {"batch_size": batch, "seed": 0, "total_steps": 10**8},
        "tasksets": [{"name": "math", "path": "tasks.jsonl",
                      "selector": {"type": "difficulty_based", "feature_keys": ["f0", "f1"], "target_reward": 0.5,
                                   "tau": 1.0}}],
    }


def rollout(tasks: Sequence[Any], batch_id: int, responses: int) -> list[dict[str, Any]]:
    """``responses`` experiences per task with a made-up 0/1 reward, as a rollout worker reports them."""
    return [{"taskset_id": t.taskset_id, "index": t.index, "reward": float((t.index + batch_id + k) % 3 == 0)}
            for t in tasks for k in range(responses)]


def ledger_alone(root: Path, batch: int, responses: int, seconds: float) -> dict[str, float]:
    """Microseconds per lease and per feedback on a ledger in this process (the actor's work without Ray)."""
    ledger = BatchLedger(pipeline_from_dict(pipeline_data(batch), base_dir=root), lease_timeout=LEASE_TIMEOUT_S)
    leases, feeds = [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(leases) < 5:
        t0 = time.perf_counter()
        lease = ledger.lease("w")
        t1 = time.perf_counter()
        exps = rollout(lease.tasks, lease.batch_id, responses)
        t2 = time.perf_counter()
        ledger.feedback_experiences(lease.batch_id, exps)
        t3 = time.perf_counter()
        leases.append(t1 - t0)
        feeds.append(t3 - t2)
    return {"lease_us": statistics.median(leases) * 1e6, "feedback_us": statistics.median(feeds) * 1e6,
            "calls": len(leases)}


# -- Ray: the actor and the simulated workers ----------------------------------------------------------------


def actor_classes() -> tuple[Any, Any]:
    """The scheduler actor (SchedulerService with ``pid()``) and the client actor, as Ray actor classes."""
    import ray
    from flexkit_ray import SchedulerService

    class MeasuredService(SchedulerService):
        """The flexkit-rft-ray scheduler service, plus its process id for CPU accounting."""

        async def pid(self) -> int:
            """This actor's process id."""
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Clients:
        """An async actor running several simulated rollout workers as coroutines."""

        async def pid(self) -> int:
            """This actor's process id."""
            return os.getpid()

        async def run(self, scheduler: Any, names: list[str], warm_end: float, end: float, gen_s: float,
                      responses: int) -> dict[str, list[tuple[float, float]]]:
            """Run one worker loop per name until ``end`` (wall clock); (start, finish) of every call."""
            calls: dict[str, list[tuple[float, float]]] = {"lease": [], "feedback": []}
            await asyncio.gather(*(_worker(scheduler, n, end, gen_s, responses, calls) for n in names))
            return calls

    return ray.remote(num_cpus=0)(MeasuredService), Clients


async def _worker(scheduler: Any, name: str, end: float, gen_s: float, responses: int,
                  calls: dict[str, list[tuple[float, float]]]) -> None:
    """lease -> (generation) -> feedback until ``end``; a started step always feeds back (no lease left open)."""
    while time.time() < end:
        t0 = time.time()
        lease = await scheduler.lease.remote(name)
        t1 = time.time()
        calls["lease"].append((t0, t1))
        if gen_s > 0:
            await asyncio.sleep(gen_s)
        exps = rollout(lease.tasks, lease.batch_id, responses)
        t2 = time.time()
        await scheduler.feedback_experiences.remote(lease.batch_id, exps)
        calls["feedback"].append((t2, time.time()))


def _cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds used so far by the processes ``pids``."""
    import psutil

    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def _window_stats(spans: list[tuple[float, float]], start: float, end: float) -> dict[str, float]:
    """Calls finished inside [start, end] per second, and p50/p99 latency (ms) of the calls started in it."""
    done = sum(1 for _t0, t1 in spans if start <= t1 <= end)
    lat = [t1 - t0 for t0, t1 in spans if t0 >= start and t1 <= end]
    p50, p99 = (float(np.percentile(lat, q)) * 1e3 for q in (50, 99)) if lat else (float("nan"),) * 2
    return {"per_s": done / (end - start), "p50_ms": p50, "p99_ms": p99, "calls": done}


def measure_once(scheduler: Any, scheduler_pid: int, clients: Sequence[Any], client_pids: Sequence[int],
                 workers: int, warmup: float, window: float, gen_s: float, responses: int) -> dict[str, float]:
    """One timed window with ``workers`` concurrent simulated workers spread over ``clients``."""
    import ray

    names = [f"w{i}" for i in range(workers)]
    used = clients[: min(len(clients), workers)]
    start = time.time() + 0.05
    warm_end, end = start + warmup, start + warmup + window
    refs = [c.run.remote(scheduler, names[i::len(used)], warm_end, end, gen_s, responses) for i, c in enumerate(used)]
    _sleep_until(warm_end)
    cpu0, ccpu0, t0 = _cpu_seconds([scheduler_pid]), _cpu_seconds(client_pids[: len(used)]), time.time()
    _sleep_until(end)
    cpu1, ccpu1, t1 = _cpu_seconds([scheduler_pid]), _cpu_seconds(client_pids[: len(used)]), time.time()
    results = ray.get(refs)
    spans = {kind: [s for r in results for s in r[kind]] for kind in ("lease", "feedback")}
    lease, feed = _window_stats(spans["lease"], warm_end, end), _window_stats(spans["feedback"], warm_end, end)
    return {
        "leases_per_s": lease["per_s"], "feedbacks_per_s": feed["per_s"],
        "lease_p50_ms": lease["p50_ms"], "lease_p99_ms": lease["p99_ms"],
        "feedback_p50_ms": feed["p50_ms"], "feedback_p99_ms": feed["p99_ms"],
        "leases": lease["calls"], "feedbacks": feed["calls"],
        "actor_cpu": (cpu1 - cpu0) / (t1 - t0), "clients_cpu": (ccpu1 - ccpu0) / (t1 - t0),
    }


def measure(scheduler: Any, scheduler_pid: int, clients: Sequence[Any], client_pids: Sequence[int], workers: int,
            *, reps: int, warmup: float, window: float, gen_s: float, responses: int) -> dict[str, Any]:
    """A row for ``workers``: the median of every figure over ``reps`` windows (and the per-rep lease rates)."""
    runs = [measure_once(scheduler, scheduler_pid, clients, client_pids, workers, warmup, window, gen_s, responses)
            for _ in range(reps)]
    row: dict[str, Any] = {"workers": workers, "client_actors": min(len(clients), workers), "reps": reps}
    for key in runs[0]:
        row[key] = statistics.median(r[key] for r in runs)
    row["leases_per_s_reps"] = [r["leases_per_s"] for r in runs]
    return row


@contextmanager
def ray_runtime(num_cpus: int) -> Iterator[None]:
    """A local Ray runtime for the benchmark (reused if one is up); built-in flexkit plugins only in workers."""
    from flexkit_ray import local_runtime

    with local_runtime(num_cpus, namespace="flexkit-bench"):
        yield


def _pickle_this_module_by_value() -> None:
    """Ray workers cannot import this file by name when a test loaded it: ship its classes by value."""
    from ray import cloudpickle

    if __name__ != "__main__" and __name__ in sys.modules:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- the suite -----------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The machine and Ray's version."""
    import ray

    return machine_info(ray=ray.__version__)


def run_suite(*, quick: bool = False, workers: Sequence[int] | None = None, tasks: int | None = None,
              batch: int = 32, responses: int = 4, gen_ms: float = 0.0, reps: int | None = None,
              warmup: float | None = None, window: float | None = None, clients: int = 4) -> dict[str, Any]:
    """Measure every worker count; returns ``{"machine", "settings", "ledger_alone", "rows", "capacity"}``."""
    workers = tuple(workers or (QUICK_WORKERS if quick else FULL_WORKERS))
    tasks = tasks or (2_000 if quick else 100_000)
    reps = reps or (1 if quick else 3)
    warmup = warmup if warmup is not None else (0.5 if quick else 2.0)
    window = window if window is not None else (1.0 if quick else 5.0)
    settings = {"workers": list(workers), "tasks": tasks, "batch": batch, "responses": responses, "gen_ms": gen_ms,
                "reps": reps, "warmup_s": warmup, "window_s": window, "max_client_actors": clients,
                "max_staleness": None, "lease_timeout_s": LEASE_TIMEOUT_S}
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tasks(root / "tasks.jsonl", tasks)
        alone = ledger_alone(root, batch, responses, 0.3 if quick else 1.0)
        with ray_runtime(num_cpus=max(2, os.cpu_count() or 2)):
            _pickle_this_module_by_value()
            rows = _measure_all(root, workers, batch, responses, gen_ms / 1e3, reps, warmup, window, clients)
    result = {"machine": machine(), "settings": settings, "ledger_alone": alone, "rows": rows}
    result["machine"]["load_average_before"] = load_before
    result["capacity"] = capacity(rows)
    return result


def _measure_all(root: Path, workers: Sequence[int], batch: int, responses: int, gen_s: float, reps: int,
                 warmup: float, window: float, clients: int) -> list[dict[str, Any]]:
    """Start the scheduler and client actors, then one row per worker count."""
    import ray

    service, client_cls = actor_classes()
    scheduler = service.remote(pipeline_data(batch), base_dir=str(root), lease_timeout=LEASE_TIMEOUT_S)
    scheduler_pid = ray.get(scheduler.pid.remote())
    # one lease and feedback before any window: the actor's first call imports what the scheduler needs (torch
    # among it, seconds on a loaded machine), a one-time cost no worker count should be charged for
    first = ray.get(scheduler.lease.remote("warm-up"))
    ray.get(scheduler.feedback_experiences.remote(first.batch_id, rollout(first.tasks, first.batch_id, responses)))
    pool = [client_cls.remote() for _ in range(min(clients, max(workers)))]
    pool_pids = ray.get([c.pid.remote() for c in pool])
    # and a short untimed loop on every client actor, so none pays its first calls to the scheduler inside a window
    ray.get([c.run.remote(scheduler, [f"warm-up-{i}"], 0.0, time.time() + 1.0, 0.0, responses)
             for i, c in enumerate(pool)])
    rows = [measure(scheduler, scheduler_pid, pool, pool_pids, w, reps=reps, warmup=warmup, window=window,
                    gen_s=gen_s, responses=responses) for w in workers]
    stats = ray.get(scheduler.stats.remote())
    if stats["open"] or stats["applied"] != stats["batches"]:
        raise RuntimeError(f"the ledger did not end clean: {stats}")
    for handle in (*pool, scheduler):
        ray.kill(handle)
    return rows


def capacity(rows: Sequence[Mapping[str, Any]], step_s: float = STEP_S) -> dict[str, float]:
    """One actor's ceiling (the best lease rate measured) and the workers it serves at a ``step_s`` step."""
    best = max(rows, key=lambda r: r["leases_per_s"])
    return {"max_leases_per_s": best["leases_per_s"], "at_workers": best["workers"], "step_s": step_s,
            "workers_served": best["leases_per_s"] * step_s}


def format_table(result: Mapping[str, Any]) -> str:
    """The printed table."""
    m, s, alone, cap = result["machine"], result["settings"], result["ledger_alone"], result["capacity"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu_model']}; python {m['python']}, ray {m['ray']}; load average "
        f"{m['load_average_before'][0]:.2f} before, {m['load_average'][0]:.2f} after",
        f"difficulty_based over {s['tasks']:,d} JSONL tasks, batch {s['batch']}, {s['responses']} responses per "
        f"task, generation {s['gen_ms']:g} ms; median of {s['reps']} x {s['window_s']:g} s windows after "
        f"{s['warmup_s']:g} s warm-up",
        f"ledger alone (no Ray): lease {alone['lease_us']:.0f} us, feedback {alone['feedback_us']:.0f} us",
        "",
        f"{'workers':>7s} {'clients':>7s} {'leases/s':>9s} {'feedbk/s':>9s} {'lease p50':>9s} {'p99 ms':>8s} "
        f"{'feedbk p50':>10s} {'p99 ms':>8s} {'actor CPU':>9s} {'clients CPU':>11s}",
    ]
    for r in result["rows"]:
        lines.append(
            f"{r['workers']:7d} {r['client_actors']:7d} {r['leases_per_s']:9.0f} {r['feedbacks_per_s']:9.0f} "
            f"{r['lease_p50_ms']:9.2f} {r['lease_p99_ms']:8.2f} {r['feedback_p50_ms']:10.2f} "
            f"{r['feedback_p99_ms']:8.2f} {r['actor_cpu']:9.0%} {r['clients_cpu']:11.0%}")
    lines += ["", f"one actor: {cap['max_leases_per_s']:.0f} leases/s (+ as many feedbacks) at {cap['at_workers']} "
                  f"workers -> serves about {cap['workers_served']:,.0f} workers at a {cap['step_s']:g} s step"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 2 workers, 2,000 tasks, one 1 s window")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument("--workers", help="comma-separated worker counts (default 1,8,32,64)")
    parser.add_argument("--tasks", type=int, help="tasks in the JSONL taskset (default 100,000)")
    parser.add_argument("--batch", type=int, default=32, help="tasks per lease (default 32)")
    parser.add_argument("--responses", type=int, default=4, help="rewards per task fed back (default 4)")
    parser.add_argument("--gen-ms", type=float, default=0.0, help="simulated generation per batch (default 0)")
    parser.add_argument("--reps", type=int, help="timed windows per worker count (default 3, quick 1)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up per window (default 2)")
    parser.add_argument("--window", type=float, help="seconds per timed window (default 5)")
    parser.add_argument("--clients", type=int, default=4, help="most client actors the workers run in (default 4)")
    args = parser.parse_args(argv)
    workers = tuple(int(w) for w in args.workers.split(",")) if args.workers else None
    result = run_suite(quick=args.quick, workers=workers, tasks=args.tasks, batch=args.batch,
                       responses=args.responses, gen_ms=args.gen_ms, reps=args.reps, warmup=args.warmup,
                       window=args.window, clients=args.clients)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
