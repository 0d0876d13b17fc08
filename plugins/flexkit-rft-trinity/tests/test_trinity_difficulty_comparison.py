"""Trinity-RFT's built-in ``difficulty_based`` and flexkit's, fed the same outcomes through Trinity-RFT's
TasksetScheduler: what is the same (the greedy picks and the posteriors) and what differs (documented in
docs/integrations/trinity.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("trinity", reason="the Trinity-RFT adapter's tests need trinity-rft (the test extra)")

import numpy as np
from trinity.buffer.task_scheduler import get_taskset_scheduler
from trinity_testkit import checked, config_yaml, taskset, write_taskset

PARAMS = {"m": 8, "lamb": 0.2, "rho": 0.2, "target_reward": 0.5, "tau": 0.0}
CAPABILITY = 0.6


def schedulers(tmp_path: Path, n: int) -> tuple:
    data = write_taskset(tmp_path / "tasks", n, seed=3)
    keys = ["weak", "strong"]
    trinity = checked(config_yaml(tmp_path / "t", [taskset("math", data, selector_type="difficulty_based",
                                                           feature_keys=keys, **PARAMS)], batch_size=16))
    flexkit = checked(config_yaml(tmp_path / "f", [taskset("math", data, feature_keys=keys,
                                                           selector="difficulty_based", **PARAMS)], batch_size=16))
    return get_taskset_scheduler({}, trinity), get_taskset_scheduler({}, flexkit), data


def test_greedy_picks_the_same_tasks_as_trinitys_formulation(tmp_path: Path) -> None:
    """Both see the outcomes of Trinity's picks (a pass rate between the reference models', distinct per task, so
    no exact ties). After the first feedback every batch is the same set: flexkit's guards (c clipped to [0, 1],
    no 1e-6 in the capability denominator) change the posteriors by less than 1e-6 here, far below the score gaps
    at the k-th task. The first batch differs: before any feedback every task is Beta(1, 1), a 300-way tie that
    torch.topk (Trinity) and flexkit (lowest indices) break differently."""
    trin, flex, _ = schedulers(tmp_path, 300)
    t_sel, f_sel = trin.tasksets[0].reader.selector, flex.tasksets[0].reader.selector
    weak, strong = (t_sel.diff_estimator.features[:, k] for k in (0, 1))
    rates = weak + CAPABILITY * (strong - weak)

    async def steps() -> list[tuple[set, set, float]]:
        out = []
        for _ in range(15):
            t_batch, f_batch = await trin.read(), await flex.read()
            t_idx = [t.index["index"] for t in t_batch]
            out.append(({t.index["index"] for t in t_batch}, {t.index["index"] for t in f_batch},
                        _max_gap(t_sel, f_sel)))
            payload = {0: {"indices": t_idx, "values": rates[t_idx].tolist()}}
            trin.feedback({"selector_metric": payload})
            flex.feedback({"selector_metric": {0: {k: list(v) for k, v in payload[0].items()}}})
        return out

    results = asyncio.run(steps())
    first_t, first_f, _ = results[0]
    assert first_f == set(range(16)) and first_t != first_f  # the all-tied first batch
    assert all(t == f for t, f, _ in results[1:])
    assert max(gap for _, _, gap in results) < 1e-6


def _max_gap(t_sel, f_sel) -> float:
    """Largest difference between the two selectors' predicted pass rates (posterior means)."""
    est = t_sel.diff_estimator
    trinity = est.alphas / (est.alphas + est.betas)
    alpha, beta = f_sel.selector.posterior()
    return float(np.max(np.abs(trinity - np.asarray(alpha) / (np.asarray(alpha) + np.asarray(beta)))))
