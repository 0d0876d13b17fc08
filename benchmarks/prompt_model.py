"""Cost of ``frontier``'s pass-rate model over prompts (``text_key``): building it, a step, and scoring the pool.

    python benchmarks/prompt_model.py                 # N = 10^4, 10^5, 10^6 (about a minute)
    python benchmarks/prompt_model.py --quick         # N = 10^4 (the smoke mode, seconds)
    python benchmarks/prompt_model.py --json out.json # also write the rows as JSON

Prompts are the ``arithmetic`` storage's no-label ones (``"000047+000005="``, 14 bytes) and, with ``--long``, 200
bytes of digits each. A *step* is what a run does per batch: ``get_indices(64)`` (256 candidates scored, and the
4,096 reference tasks when the model has changed) then ``feedback`` of their 64 pass rates (one Laplace update).
``build`` is the selector's construction (reading the texts, hashing them once when the features fit the cache);
``pool score`` is every task's prediction (``predicted_pass_rates``, what the run records per step where the
features are kept: the model hashes on demand above that, and reports none). Memory: the prompts' bytes, the
kept features, and the ``state_dict`` (the model and the group posteriors). Medians over the rounds; nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flexkit
from flexkit.selectors.frontier import FrontierSelector

SIZES = (10**4, 10**5, 10**6)
QUICK_SIZES = (10**4,)
BATCH = 64


def prompts(size: int, long: bool, seed: int = 0) -> np.ndarray:
    """``size`` zero-padded addition prompts (levels 1-6), or 200-byte digit strings with ``long``."""
    rng = np.random.default_rng(seed)
    if long:
        digits = rng.integers(0, 10, size=(size, 200)).astype(np.uint8) + ord("0")
        return np.array([row.tobytes().decode() for row in digits])
    levels = np.arange(size) % 6 + 1
    high, low = 10**levels, np.where(levels > 1, 10 ** (levels - 1), 0)
    a = low + (rng.random(size) * (high - low)).astype(np.int64)
    b = (rng.random(size) * high).astype(np.int64)
    return np.array([f"{x:06d}+{y:06d}=" for x, y in zip(a.tolist(), b.tolist(), strict=True)])


def state_bytes(state: Any) -> int:
    """Bytes of the arrays in a state (nested)."""
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    return int(state.nbytes) if isinstance(state, np.ndarray) else 0


def measure(size: int, long: bool, rounds: int) -> dict[str, Any]:
    texts = prompts(size, long)
    start = time.perf_counter()
    sel = flexkit.make_selector("frontier", size=size, seed=0, features={"prompt": texts}, text_key="prompt", bins=8)
    build = time.perf_counter() - start
    assert isinstance(sel, FrontierSelector) and sel.model is not None
    rng = np.random.default_rng(1)
    select, feedback = [], []
    for _ in range(rounds + 2):  # two warm-up rounds
        t0 = time.perf_counter()
        idx = np.asarray(sel.get_indices(BATCH))
        t1 = time.perf_counter()
        sel.feedback(idx, rng.binomial(8, 0.4, size=BATCH) / 8)
        t2 = time.perf_counter()
        select.append(t1 - t0)
        feedback.append(t2 - t1)
    t0 = time.perf_counter()
    sel.model.predict(np.arange(size, dtype=np.int64))
    pool = time.perf_counter() - t0
    features = sel.model.features
    return {"n": size, "prompt_bytes": 200 if long else 14, "build_s": build,
            "select_ms": 1e3 * statistics.median(select[2:]), "feedback_ms": 1e3 * statistics.median(feedback[2:]),
            "pool_score_s": pool, "features_kept": features.cached, "text_mb": features.texts.nbytes() / 2**20,
            "features_mb": features.nbytes() / 2**20, "state_kb": state_bytes(sel.state_dict()) / 2**10}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^4 only, 3 rounds")
    parser.add_argument("--long", action="store_true", help="also 200-byte prompts (N = 10^4 and 10^5)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    sizes, rounds = (QUICK_SIZES, 3) if args.quick else (SIZES, 9)
    cases = [(n, False) for n in sizes] + ([(n, True) for n in sizes if n <= 10**5] if args.long else [])
    rows = [measure(n, long, rounds) for n, long in cases]
    header = ("N", "bytes", "build s", "select ms", "feedback ms", "pool score s", "kept", "text MB", "features MB",
              "state KB")
    print(" | ".join(header))
    for r in rows:
        print(f"{r['n']:,d} | {r['prompt_bytes']} | {r['build_s']:.2f} | {r['select_ms']:.1f} | "
              f"{r['feedback_ms']:.1f} | {r['pool_score_s']:.2f} | {'yes' if r['features_kept'] else 'no'} | "
              f"{r['text_mb']:.1f} | {r['features_mb']:.1f} | {r['state_kb']:.0f}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
