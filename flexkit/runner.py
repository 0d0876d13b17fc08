"""``flexkit run``: drive a pipeline and its ``[trainer]`` backend end to end, with metrics and checkpoints.

A run folder holds ``pipeline.toml`` (a copy of the file), ``resolved.json`` (the validated config with every
default filled in), ``metrics.jsonl`` (one object per step, flushed every step; evaluation records carry
``eval_accuracy``) and ``checkpoint/`` (the latest checkpoint, written atomically every ``[run]
checkpoint_every`` steps and at the end). ``--resume`` continues from the checkpoint and truncates the metrics
to it, so a resumed run ends with exactly the metrics of an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np
import structlog

from flexkit.errors import ConfigError, FlexkitError
from flexkit.pipeline import Pipeline
from flexkit.sample.actuator import Mix

log = structlog.get_logger("flexkit.runner")

CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"


@attrs.define
class RunResult:
    """What a run produced: its folder, the number of steps done, and the first and last evaluations."""

    run_dir: Path
    steps: int
    first_eval: dict[str, float]
    last_eval: dict[str, float]
    last_metrics: dict[str, Any]


def trainer_seed(seed: int) -> np.random.SeedSequence:
    """The trainer's random stream, derived from the pipeline seed (spawn key 3)."""
    return np.random.SeedSequence(seed, spawn_key=(3,))


def default_run_dir(root: str | os.PathLike[str] = "runs", name: str = "run") -> Path:
    """A fresh dated folder under ``root`` (``runs/2026-11-29T20-15-03-quickstart``)."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%S")
    base = Path(root) / f"{stamp}-{name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = Path(f"{base}-{n}")
    return path


class _Progress:
    """A one-line progress display on a terminal; periodic plain lines elsewhere."""

    def __init__(self, total: int, stream: IO[str] | None) -> None:
        self.total, self.stream = total, stream
        self.tty = bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())
        self.started = time.monotonic()
        self.every = max(1, total // 10)

    def update(self, step: int, metrics: Mapping[str, Any], accuracy: float | None) -> None:
        if self.stream is None:
            return
        done = step + 1
        elapsed = time.monotonic() - self.started
        bar = "#" * int(20 * done / self.total)
        acc = f" eval {accuracy:.3f}" if accuracy is not None else ""
        reward = metrics.get("reward_mean")
        text = (f"[{bar:<20}] step {done}/{self.total} reward {reward:.3f}{acc} "
                f"{elapsed:.1f}s") if reward is not None else f"step {done}/{self.total}"
        if self.tty:
            self.stream.write("\r" + text)
            if done == self.total:
                self.stream.write("\n")
            self.stream.flush()
        elif done % self.every == 0 or done == self.total:
            self.stream.write(text + "\n")
            self.stream.flush()


def run_pipeline(
    pipe: Pipeline,
    *,
    run_dir: str | os.PathLike[str],
    resume: bool = False,
    progress: IO[str] | None = sys.stderr,
) -> RunResult:
    """Run ``pipe`` with its ``[trainer]`` to the end of its schedule, writing into ``run_dir``.

    With ``resume``, continue from ``run_dir/checkpoint``. Raises :class:`~flexkit.ConfigError` when the
    pipeline has no trainer.
    """
    cfg = pipe.config
    if cfg.trainer is None:
        raise ConfigError("flexkit run needs a [trainer] table (e.g. type = \"simulator\")", pipe.source)
    run_dir = Path(run_dir)
    trainer = pipe.plugins.component("trainer", cfg.trainer.type).build(cfg.trainer.config,
                                                                         seed=trainer_seed(cfg.run.seed))
    sched = pipe.scheduler
    trainer.setup(pipe)
    metrics_path = run_dir / METRICS_FILE
    start, first_eval = 0, None
    if resume:
        if not (run_dir / CHECKPOINT_DIR / "state.json").exists() and (run_dir / METRICS_FILE).exists():
            raise FlexkitError(
                f"{run_dir} has no checkpoint yet: the run stopped before its first one ([run] checkpoint_every = "
                f"{cfg.run.checkpoint_every}); start it again without --resume (--out {run_dir} reuses the folder)")
        extra = pipe.load_checkpoint(run_dir / CHECKPOINT_DIR)
        trainer.load_state_dict(extra["trainer"])
        start = int(extra["runner"]["step"])
        first_eval = extra["runner"].get("first_eval")
        kept = []
        if metrics_path.exists():
            kept = [line for line in metrics_path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("step", -1) < start]
        tmp = metrics_path.with_name(metrics_path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, metrics_path)  # a crash here leaves the old metrics, never a truncated file
    else:
        if (run_dir / CHECKPOINT_DIR).exists():
            raise FlexkitError(f"{run_dir} already holds a run; pass --resume to continue it or choose --out")
        run_dir.mkdir(parents=True, exist_ok=True)
        if pipe.source and Path(pipe.source).is_file():
            shutil.copyfile(pipe.source, run_dir / "pipeline.toml")
        (run_dir / "resolved.json").write_text(json.dumps(attrs.asdict(pipe.config), indent=2, default=str) + "\n")
        metrics_path.write_text("", encoding="utf-8")
    last_eval: dict[str, float] = dict(first_eval or {})
    try:
        last, last_eval, first_eval = _loop(pipe, trainer, run_dir, metrics_path, start, first_eval, last_eval,
                                            progress)
    finally:
        sched.close()
    return RunResult(run_dir=run_dir, steps=sched.total_steps, first_eval=dict(first_eval or {}), last_eval=last_eval,
                     last_metrics=last)


def _loop(
    pipe: Pipeline,
    trainer: Any,
    run_dir: Path,
    metrics_path: Path,
    start: int,
    first_eval: dict[str, float] | None,
    last_eval: dict[str, float],
    progress: IO[str] | None,
) -> tuple[dict[str, Any], dict[str, float], dict[str, float] | None]:
    """The step loop of :func:`run_pipeline`; returns the last record and the first and last evaluations."""
    cfg, sched = pipe.config, pipe.scheduler
    total = sched.total_steps
    eval_every, ckpt_every = cfg.run.eval_every, cfg.run.checkpoint_every
    bar = _Progress(total, progress)
    last: dict[str, Any] = {}
    stage = pipe.sample_stage if pipe.has_sample_stage else None
    with metrics_path.open("a", encoding="utf-8") as out:
        if start == 0 and eval_every:
            first_eval = dict(trainer.evaluate(step=0))
            last_eval = dict(first_eval)
        for step in range(start, total):
            record = _train_step(pipe, trainer, stage, step)
            if eval_every and ((step + 1) % eval_every == 0 or step + 1 == total):
                last_eval = dict(trainer.evaluate(step=step + 1))
                record.update(last_eval)
            out.write(json.dumps(record) + "\n")
            out.flush()
            last = record
            bar.update(step, record, last_eval.get("eval_accuracy"))
            if (ckpt_every and (step + 1) % ckpt_every == 0) or step + 1 == total:
                pipe.save_checkpoint(run_dir / CHECKPOINT_DIR, extra={
                    "trainer": trainer.state_dict(),
                    "runner": {"step": step + 1, "first_eval": first_eval},
                })
    return last, last_eval, first_eval


def _train_step(pipe: Pipeline, trainer: Any, stage: Any, step: int) -> dict[str, Any]:
    """One step: read, roll out, feed back, sample stage at its timing, advantages, update."""
    sched = pipe.scheduler
    tasks = sched.read()
    rollout = trainer.rollout(tasks, step=step)
    feedback = pipe.feedback(rollout.experiences)
    batch = rollout.batch
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_reward")
    trainer.compute_advantages(batch, step=step)
    weights = None
    if stage is not None:
        pipe.apply_sample_stage(batch, step=step, timing="post_advantage")
        if not isinstance(stage.last_action, Mix) and stage.last_step == step:
            weights = stage.token_weights(batch, step=step)
    update = trainer.update(batch, weights, step=step)
    mix: dict[str, int] = {}
    for task in tasks:
        mix[task.taskset] = mix.get(task.taskset, 0) + 1
    values = [v for part in feedback.get("selector_metric", {}).values() for v in part["values"]]
    record: dict[str, Any] = {"step": step, **rollout.metrics, **update, "taskset_mix": mix,
                              "pass_rate_mean": float(np.mean(values)) if values else None}
    if stage is not None:
        record.update(stage.metrics())
        if stage.kept_fraction is not None:
            record["kept_fraction"] = stage.kept_fraction
    return record


def summary_lines(result: RunResult) -> list[str]:
    """The before/after evaluation table printed at the end of a run."""
    first, last = result.first_eval, result.last_eval
    keys = [k for k in last if k.startswith("eval_accuracy/")]
    lines = [f"run folder: {result.run_dir}", "", f"{'eval accuracy':<22}{'before':>8}{'after':>8}{'change':>8}"]
    for key in ["eval_accuracy", *keys]:
        label = "all levels" if key == "eval_accuracy" else f"level {key.split('/', 1)[1]}"
        before, after = first.get(key), last.get(key)
        if before is None or after is None:
            continue
        lines.append(f"{label:<22}{before:>8.3f}{after:>8.3f}{after - before:>+8.3f}")
    return lines
