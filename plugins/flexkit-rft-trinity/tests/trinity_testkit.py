"""Shared setup of the flexkit-rft-trinity tests: Trinity-RFT configs written as YAML and checked by Trinity-RFT,
its real TasksetScheduler driven with simulated feedback, and its real explorer checkpoint (StateManager)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local tasksets only: never ask the Hub

from trinity.buffer.task_scheduler import get_taskset_scheduler
from trinity.common.config import Config, load_config
from trinity.manager.state_manager import StateManager

FLEXKIT = "flexkit_trinity.FlexkitSelector"


def write_taskset(folder: Path, n: int, seed: int = 0) -> Path:
    """A Trinity-RFT taskset folder (``train.jsonl``) of ``n`` rows with two reference pass-rate columns and a
    ``level`` label (1-4)."""
    rng = np.random.default_rng(seed)
    weak = rng.random(n) * 0.6
    strong = np.minimum(weak + rng.random(n) * 0.4, 1.0)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"q{i}", "answer": str(i), "weak": float(weak[i]), "strong": float(strong[i]),
             "level": i % 4 + 1} for i in range(n)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def taskset(name: str, path: Path, selector_type: str = FLEXKIT, feature_keys: list[str] | None = None,
            seed: int = 42, **kwargs: Any) -> dict[str, Any]:
    """One entry of ``buffer.explorer_input.tasksets``."""
    return {"name": name, "path": str(path), "format": {"prompt_key": "question", "response_key": "answer"},
            "data_selector": {"selector_type": selector_type, "seed": seed, "feature_keys": feature_keys or [],
                              "kwargs": kwargs}}


def config_yaml(tmp: Path, tasksets: list[dict[str, Any]], *, batch_size: int = 4, total_epochs: int = 3,
                **top: Any) -> Path:
    """A whole Trinity-RFT YAML config (explore mode, no GPU or Ray needed to check it)."""
    data = {"mode": "explore", "project": "flexkit", "name": "test", "checkpoint_root_dir": str(tmp / "ckpt"),
            "model": {"model_path": "unused-model", "max_model_len": 2048, "max_response_tokens": 512},
            "cluster": {"node_num": 1, "gpu_per_node": 1},
            "buffer": {"batch_size": batch_size, "total_epochs": total_epochs,
                       "explorer_input": {"default_workflow_type": "math_workflow", "tasksets": tasksets}},
            **top}
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def checked(path: Path) -> Config:
    """Trinity-RFT's ``load_config`` + ``check_and_update``."""
    return load_config(str(path)).check_and_update()


def outcomes(step: int, tasks: list, m: int = 8) -> dict[str, Any]:
    """Trinity-RFT's ``selector_metric`` payload for ``tasks``: a mean reward per task, drawn from a generator
    seeded by (step, taskset, index), so a resumed run sees the same outcomes as a straight one."""
    payload: dict[int, dict[str, list]] = {}
    for task in tasks:
        tid, index = task.index["taskset_id"], task.index["index"]
        rate = (index % 10) / 10
        part = payload.setdefault(tid, {"indices": [], "values": []})
        part["indices"].append(index)
        part["values"].append(np.random.default_rng([step, tid, index]).binomial(m, rate) / m)
    return {"selector_metric": payload}


async def drive(config: Config, steps: range, state: dict | None = None) -> tuple[list, Any]:
    """Read ``steps`` batches through Trinity-RFT's scheduler (built from an explorer checkpoint ``state``),
    feeding each back as the explorer does; returns ``[(taskset_id, index), ...]`` per step and the scheduler."""
    scheduler = get_taskset_scheduler(explorer_state=dict(state or {}), config=config)
    batches = []
    for step in steps:
        tasks = await scheduler.read()
        batches.append(sorted((t.index["taskset_id"], t.index["index"]) for t in tasks))
        scheduler.feedback(outcomes(step, tasks))
    return batches, scheduler


def run(config: Config, steps: range, state: dict | None = None) -> tuple[list, Any]:
    """:func:`drive` from synchronous code."""
    return asyncio.run(drive(config, steps, state))


def checkpoint(config: Config, step: int, scheduler: Any) -> dict:
    """Save the scheduler's state as Trinity-RFT's explorer does (JSON, ``StateManager.save_explorer``) and read
    it back as a restarted explorer does (``load_explorer``)."""
    manager = StateManager(path=config.checkpoint_job_dir, explorer_name=config.explorer.name)
    manager.save_explorer(current_step=step, taskset_states=scheduler.state_dict())
    return manager.load_explorer()
