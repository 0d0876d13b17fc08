"""flexkit's selector benchmark: ``get_indices(256)`` + ``feedback(256)`` per step, every built-in selector,
side by side in one process, against a straightforward torch formulation of ``difficulty_based``.

Usage (from the repository root)::

    python benchmarks/run.py                  # N = 10^4 .. 10^7 (+ 10^8 for difficulty_based if memory allows)
    python benchmarks/run.py --quick          # N = 10^4, 10^5, 3 repetitions (the CI smoke mode)
    python benchmarks/run.py --json out.json  # also write the rows and the machine description as JSON

For each N every selector is built once, warmed up, then timed in rounds: each round runs one step of every
selector in turn, so a slow moment of a noisy machine hits all of them alike; the table shows the median (and
the minimum) over the rounds. The reference (``reference_difficulty.py``) runs in the same rounds up to
N = 10^6; ``ratio`` is reference median / flexkit median for the same ``tau``. ``state B/task`` is the sum of
``nbytes`` of the arrays in ``state_dict()`` divided by N. N = 10^8 runs in a child process so that its peak
memory (``ru_maxrss``) can be reported beyond the feature arrays. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":  # before torch starts OpenMP: its idle threads must not spin beside the other cases
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _machine import machine_info  # noqa: E402
from reference_difficulty import MULTINOMIAL_MAX, ReferenceDifficulty  # noqa: E402

import flexkit  # noqa: E402

BATCH = 256
FULL_SIZES = (10**4, 10**5, 10**6, 10**7)
QUICK_SIZES = (10**4, 10**5)
HUGE = 10**8
REFERENCE_MAX = 10**6
#: (label, registered name, parameters, feature columns)
CASES: tuple[tuple[str, str, dict[str, Any], tuple[str, ...]], ...] = (
    ("sequential", "sequential", {}, ()),
    ("shuffle", "shuffle", {}, ()),
    ("random", "random", {}, ()),
    ("offline_easy2hard", "offline_easy2hard", {}, ("f0",)),
    ("difficulty_based tau=1", "difficulty_based", {"tau": 1.0}, ("f0", "f1")),
    ("difficulty_based tau=0", "difficulty_based", {"tau": 0.0}, ("f0", "f1")),
    ("difficulty_based tau=0 correlated", "difficulty_based", {"tau": 0.0, "feature_keys": ("f0", "f1c")},
     ("f0", "f1c")),
    ("learnability", "learnability", {}, ()),
    ("thompson_target", "thompson_target", {}, ()),
    ("zero_variance_skip", "zero_variance_skip", {}, ()),
    ("target_difficulty", "target_difficulty", {"harder": "lower"}, ("f0",)),
    ("prioritized_replay", "prioritized_replay", {}, ()),
)
REFERENCE_CASES = (("reference difficulty tau=1", 1.0), ("reference difficulty tau=0", 0.0))
#: The N = 10^8 cases, each in its own process: label -> (parameters, feature dtype, feature columns).
HUGE_CASES: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
    "difficulty_based tau=1": ({"tau": 1.0}, "float64", ("f0", "f1")),
    "difficulty_based tau=0.5": ({"tau": 0.5}, "float64", ("f0", "f1")),
    "difficulty_based tau=0": ({"tau": 0.0}, "float64", ("f0", "f1")),
    "difficulty_based tau=0 correlated": ({"tau": 0.0, "feature_keys": ("f0", "f1c")}, "float64", ("f0", "f1c")),
    "difficulty_based tau=1 float32": ({"tau": 1.0}, "float32", ("f0", "f1")),
    "difficulty_based tau=0.5 float32": ({"tau": 0.5}, "float32", ("f0", "f1")),
    "difficulty_based tau=0 float32": ({"tau": 0.0}, "float32", ("f0", "f1")),
    "difficulty_based tau=0 float32 correlated": (
        {"tau": 0.0, "feature_keys": ("f0", "f1c")}, "float32", ("f0", "f1c")
    ),
}


def make_features(
    n: int, seed: int = 12345, *, dtype: str = "float64", columns: Iterable[str] = ("f0", "f1", "f1c")
) -> dict[str, np.ndarray]:
    """Reference pass rates in [0, 1], filled in chunks (no N-sized temporaries at N = 10^8): ``f0`` and an
    independent ``f1 ≥ f0``, and ``f1c = min(f0 + 0.2, 1)``, strongly correlated with ``f0`` (as two policies' pass
    rates often are). Only ``columns`` are kept; the values do not depend on which are."""
    rng = np.random.default_rng(seed)
    out = {c: np.empty(n, dtype=dtype) for c in columns}
    step = 1 << 22
    for start in range(0, n, step):
        stop = min(start + step, n)
        a = rng.random(stop - start) * 0.6
        b = np.minimum(a + rng.random(stop - start) * 0.4, 1.0)
        for name, values in (("f0", a), ("f1", b), ("f1c", np.minimum(a + 0.2, 1.0))):
            if name in out:
                out[name][start:stop] = values
    return out


def state_bytes(state: Any) -> int:
    """Sum of ``nbytes`` over the numpy arrays in a (nested) state dict."""
    if isinstance(state, np.ndarray):
        return int(state.nbytes)
    if isinstance(state, Mapping):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def build(name: str, params: Mapping[str, Any], columns: Iterable[str], n: int, features: Mapping[str, np.ndarray]):
    cols = {c: features[c] for c in columns}
    return flexkit.make_selector(name, size=n, seed=0, features=cols or None, **params)


def _time_rounds(steps: dict[str, Callable[[int], None]], reps: int, warmup: int) -> dict[str, list[float]]:
    """Run ``warmup`` then ``reps`` rounds of one step per case (in turn); seconds per step and case."""
    for w in range(warmup):
        for step in steps.values():
            step(w)
    times: dict[str, list[float]] = {label: [] for label in steps}
    gc.collect()
    gc.disable()
    try:
        for r in range(reps):
            for label, step in steps.items():
                t0 = time.perf_counter()
                step(warmup + r)
                times[label].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return times


def _stepper(sel: Any, values: np.ndarray) -> Callable[[int], None]:
    def step(i: int) -> None:
        idx = np.asarray(sel.get_indices(BATCH))
        if isinstance(sel, flexkit.Selector) and np.unique(idx).size != idx.size:
            # a batch that spans an epoch boundary (shuffle) can hold a task twice: one value per task
            idx = np.unique(idx)
        sel.feedback(idx, values[i % len(values)][: idx.size])

    return step


def bench_size(n: int, reps: int, warmup: int, *, cases=CASES, reference: bool = True) -> list[dict[str, Any]]:
    """One row per case (and reference) at ``n`` tasks."""
    features = make_features(n)
    values = np.random.default_rng(7).random((reps + warmup, BATCH))
    selectors, rows = {}, {}
    for label, name, params, columns in cases:
        t0 = time.perf_counter()
        selectors[label] = build(name, params, columns, n, features)
        rows[label] = {"selector": label, "n": n, "build_s": time.perf_counter() - t0}
    steps = {label: _stepper(sel, values) for label, sel in selectors.items()}
    if reference and n <= REFERENCE_MAX:
        for label, tau in REFERENCE_CASES:
            if tau > 0 and n > MULTINOMIAL_MAX:
                continue
            ref = ReferenceDifficulty(features["f0"], features["f1"], tau=tau, seed=0)
            steps[label] = _stepper(ref, values)
            rows[label] = {"selector": label, "n": n, "build_s": 0.0, "state_bytes_per_task": ref.state_bytes() / n}
    times = _time_rounds(steps, reps, warmup)
    for label, ts in times.items():
        rows[label].update(median_ms=statistics.median(ts) * 1e3, min_ms=min(ts) * 1e3, reps=len(ts))
    for label, step in steps.items():  # then each case alone, back to back (warm caches)
        alone = _time_rounds({label: step}, reps, 1)[label]
        rows[label]["alone_ms"] = statistics.median(alone) * 1e3
    for label, sel in selectors.items():
        rows[label]["state_bytes_per_task"] = state_bytes(sel.state_dict()) / n
    for label, tau in REFERENCE_CASES:
        mine = f"difficulty_based tau={tau:g}"
        if label in rows and mine in rows:
            rows[mine]["reference_ms"] = rows[label]["median_ms"]
            rows[mine]["ratio"] = rows[label]["median_ms"] / rows[mine]["median_ms"]
    return list(rows.values())


# -- N = 10^8 in a child process (clean peak memory) ---------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # kilobytes on Linux


def child(label: str, n: int, reps: int, warmup: int) -> dict[str, Any]:
    """Time one difficulty_based case of :data:`HUGE_CASES` at ``n`` and measure its memory beyond the features
    (child process)."""
    params, dtype, columns = HUGE_CASES[label]
    features = make_features(n, dtype=dtype, columns=columns)
    gc.collect()
    base = _rss_bytes()
    t0 = time.perf_counter()
    sel = build("difficulty_based", params, columns, n, features)
    build_s = time.perf_counter() - t0
    values = np.random.default_rng(7).random((reps + warmup, BATCH))
    step = _stepper(sel, values)
    cpu: list[float] = []

    def timed(i: int) -> None:  # the step's CPU time too: on a busy machine its wall time includes waiting for a core
        c0 = time.process_time()
        step(i)
        cpu.append(time.process_time() - c0)

    times = _time_rounds({label: timed}, reps, warmup)[label]  # alone: one case per process
    cpu = cpu[warmup:]
    peak = _peak_rss_bytes()
    load = os.getloadavg()[0]
    row = {
        "selector": label,
        "n": n,
        "build_s": build_s,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "median_cpu_ms": statistics.median(cpu) * 1e3,
        "load_average": load,
        "alone_ms": statistics.median(times) * 1e3,
        "reps": len(times),
        "features_dtype": dtype,
        "features_bytes": sum(int(a.nbytes) for a in features.values()),
        "rss_after_features_bytes": base,
        "peak_rss_bytes": peak,
        "peak_beyond_features_bytes": peak - base,
    }
    row["state_bytes_per_task"] = state_bytes(sel.state_dict()) / n  # after the peak was read: it copies
    return row


def _mem_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def bench_huge(n: int, reps: int, warmup: int) -> list[dict[str, Any]]:
    """difficulty_based at ``n`` (:data:`HUGE_CASES`: tau 1, 0.5, 0; float64 and float32 features; independent and
    correlated), each in a child process, when the memory is there."""
    rows = []
    for label, (_, dtype, _) in HUGE_CASES.items():
        need = n * (np.dtype(dtype).itemsize * 2 + 12)  # features, store slot, greedy index and slack
        available = _mem_available_bytes()
        if available < need:
            rows.append(
                {
                    "selector": label,
                    "n": n,
                    "skipped": f"needs ~{need / 2**30:.1f} GiB, {available / 2**30:.1f} available",
                }
            )
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", label, "--size", str(n), "--reps", str(reps)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            rows.append({"selector": label, "n": n, "skipped": f"child failed: {out.stderr.strip()[-300:]}"})
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


# -- the suite ---------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The machine, numpy and torch (with its thread count and BLAS/OpenMP settings)."""
    import torch

    return machine_info(numpy=np.__version__, torch=torch.__version__, torch_threads=torch.get_num_threads(),
                        env={k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "OMP_", "MKL_"))})


def run_suite(*, quick: bool = False, reps: int | None = None, huge: bool | None = None) -> dict[str, Any]:
    """Measure everything; returns ``{"machine", "settings", "rows"}``."""
    sizes = QUICK_SIZES if quick else FULL_SIZES
    reps = reps if reps is not None else (3 if quick else 9)
    warmup = 1 if quick else 2
    huge = (not quick) if huge is None else huge
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rows += bench_size(n, reps, warmup)
    if huge:
        rows += bench_huge(HUGE, reps, warmup)
    settings = {"batch": BATCH, "sizes": list(sizes) + ([HUGE] if huge else []), "reps": reps, "warmup": warmup}
    return {"machine": machine(), "settings": settings, "rows": rows}


def format_table(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"machine: {m['cores']} cores, {m['cpu_model']}; numpy {m['numpy']}, torch {m['torch']} "
        f"({m['torch_threads']} threads), python {m['python']}",
        f"step = get_indices({BATCH}) + feedback({BATCH}); median and min over {result['settings']['reps']} rounds "
        "of all cases in turn; 'alone': median of the case run back to back",
        "",
        f"{'selector':28s} {'N':>11s} {'median ms':>10s} {'min ms':>9s} {'alone ms':>9s} {'state B/task':>12s} "
        f"{'ref ms':>9s} {'ratio':>7s}  notes",
    ]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"{row['selector']:28s} {row['n']:>11,d}  skipped: {row['skipped']}")
            continue
        ref = f"{row['reference_ms']:9.2f}" if "reference_ms" in row else f"{'':9s}"
        ratio = f"{row['ratio']:6.1f}x" if "ratio" in row else f"{'':7s}"
        notes = ""
        if "peak_beyond_features_bytes" in row:
            notes = (
                f"peak RSS {row['peak_rss_bytes'] / 2**30:.2f} GiB, "
                f"{row['peak_beyond_features_bytes'] / 2**30:.2f} GiB beyond the features"
                f" ({row['features_dtype']}); CPU {row['median_cpu_ms']:.1f} ms/step, load {row['load_average']:.1f}"
            )
        alone = f"{row['alone_ms']:9.3f}" if "alone_ms" in row else f"{'':9s}"
        lines.append(
            f"{row['selector']:28s} {row['n']:>11,d} {row['median_ms']:10.3f} {row['min_ms']:9.3f} {alone} "
            f"{row.get('state_bytes_per_task', 0.0):12.1f} {ref} {ratio}  {notes}".rstrip()
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^4 and 10^5 only, 3 repetitions (CI smoke)")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument("--reps", type=int, help="timed rounds per size (default 9, quick 3)")
    parser.add_argument("--no-huge", action="store_true", help="skip N = 10^8")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.size, args.reps or 9, 2)))
        return 0
    result = run_suite(quick=args.quick, reps=args.reps, huge=False if args.no_huge else None)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
