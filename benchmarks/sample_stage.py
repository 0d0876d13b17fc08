"""Sample-stage benchmark: group scorers + actuator + token weights against a per-group Python loop.

    python benchmarks/sample_stage.py            # 4,096 groups x 16 samples x 1,024 tokens (about a minute)
    python benchmarks/sample_stage.py --quick    # 256 groups x 16 x 128 (the CI smoke mode, seconds)

The reference is the per-group loop DataFlex-RL's selector guide describes for ``group_solve_rate`` (for
every uid: find its rows, take the mean success), written by us; both sides include the O(B*T) per-sequence
reward sum. The full stage is ``group_solve_rate`` -> ``threshold_band`` -> per-token weights multiplied into
existing weights. Median of several repetitions; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flexkit.sample import (
    GroupSolveRateScorer,
    RolloutBatch,
    SampleStage,
    ThresholdBandConfig,
    ThresholdBandFilter,
)


def loop_solve_rate(scores: torch.Tensor, mask: torch.Tensor, uid: np.ndarray, threshold: float = 0.5) -> torch.Tensor:
    """The per-group Python loop: every member gets its group's success fraction."""
    per_seq = (scores * mask).sum(-1)
    success = (per_seq > threshold).float()
    out = torch.zeros_like(per_seq)
    for g in np.unique(uid):
        idx = np.where(uid == g)[0]
        out[idx] = success[idx].mean()
    return out


def loop_stage(scores: torch.Tensor, mask: torch.Tensor, uid: np.ndarray, existing: torch.Tensor) -> torch.Tensor:
    """Loop scorer, then keep scores strictly inside (0.2, 0.8), then 0/1 per token times existing weights."""
    rate = loop_solve_rate(scores, mask, uid)
    keep = ((rate > 0.2) & (rate < 0.8)).float()
    return existing * keep[:, None] * mask


def median_ms(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """Median wall time of ``reps`` calls (after one warm-up) and the last result."""
    fn()
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, out


def make_batch(groups: int, per_group: int, length: int, seed: int = 0) -> dict[str, Any]:
    """Random rewards at the last response token, ragged response lengths, shuffled uuid-like group ids."""
    rng = np.random.default_rng(seed)
    b = groups * per_group
    lengths = torch.from_numpy(rng.integers(1, length + 1, size=b))
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.int64)
    scores = torch.zeros(b, length)
    scores[torch.arange(b), lengths - 1] = torch.from_numpy(rng.random(b).astype(np.float32))
    order = rng.permutation(np.repeat(np.arange(groups), per_group))
    uid = np.array([f"{i:08x}-4e1a-9c3b-{i:012x}" for i in order], dtype=object)
    return {"token_level_scores": scores, "response_mask": mask, "uid": uid,
            "rollout_is_weights": torch.full((b, length), 0.5)}


def measure(data: dict[str, Any], mask_name: str, mask: torch.Tensor, reps: int) -> list[dict[str, Any]]:
    """The scorer alone and the whole stage, flexkit vs the loop, for one response-mask dtype."""
    scores, uid, existing = data["token_level_scores"], data["uid"], data["rollout_is_weights"]
    scorer = GroupSolveRateScorer()
    fast_ms, fast = median_ms(lambda: scorer(RolloutBatch.from_dict(
        {"token_level_scores": scores, "response_mask": mask, "uid": uid}), step=0), reps)
    slow_ms, slow = median_ms(lambda: loop_solve_rate(scores, mask, uid), reps)
    assert torch.allclose(fast, slow)
    rows = [{"case": "group_solve_rate", "mask": mask_name, "flexkit_ms": fast_ms, "loop_ms": slow_ms}]
    band = ThresholdBandFilter(ThresholdBandConfig(low=0.2, high=0.8))
    stage = SampleStage(GroupSolveRateScorer(), band, mechanism="select", estimator="grpo")
    fast_ms, fast = median_ms(
        lambda: stage.token_weights(RolloutBatch.from_dict({**data, "response_mask": mask}), step=0), reps)
    slow_ms, slow = median_ms(lambda: loop_stage(scores, mask, uid, existing), reps)
    assert torch.allclose(fast, slow.to(fast.dtype))
    rows.append({"case": "stage: solve rate + band + token weights", "mask": mask_name,
                 "flexkit_ms": fast_ms, "loop_ms": slow_ms})
    return rows


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Measure every case; return one row per case."""
    groups, per_group, length, reps = (256, 16, 128, 3) if quick else (4096, 16, 1024, 5)
    data = make_batch(groups, per_group, length)
    rows = []
    for mask_name, mask in (("int64", data["response_mask"]), ("bool", data["response_mask"].bool())):
        rows += measure(data, mask_name, mask, reps)
    for row in rows:
        row.update(groups=groups, per_group=per_group, tokens=length, ratio=row["loop_ms"] / row["flexkit_ms"])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions (CI smoke mode)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick)
    first = rows[0]
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads); {first['groups']} groups x "
          f"{first['per_group']} samples x {first['tokens']} tokens; median of repetitions")
    print(f"{'case':<42}{'mask':>6}{'flexkit ms':>12}{'loop ms':>11}{'ratio':>8}")
    for row in rows:
        print(f"{row['case']:<42}{row['mask']:>6}{row['flexkit_ms']:>12.1f}{row['loop_ms']:>11.1f}"
              f"{row['ratio']:>7.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
