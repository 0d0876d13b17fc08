"""Experiment trackers for ``flexkit run``: TensorBoard and Weights & Biases (offline), both optional.

The run folder stays the source of truth (``metrics.jsonl``); a tracker gets, after every recorded step, the
same ``flexkit/...`` metrics the host integrations log (:func:`flexkit.pipeline_metrics`: mix,
sample stage, feedback pass rates, selector summaries, ``flexkit/rollouts`` for the step), the numbers of the
step's record under the same names (the step's refill counts, ``flexkit/run/rollouts``, and on evaluation steps
``flexkit/eval/accuracy[/<level>]``, the test split, and ``flexkit/val/accuracy[/<level>]``, the validation
split), and ``flexkit/run/reward_mean``: the names of
:mod:`flexkit._metric_names`. The x axis is the training step (1-based: the step's record ``step + 1``, so the
evaluation before training is at 0).

* TensorBoard (``--tensorboard``; ``pip install "flexkit-rft[tensorboard]"``): event files in
  ``RUN_DIR/tensorboard/`` through ``torch.utils.tensorboard`` (``tensorboard --logdir RUN_DIR/tensorboard``).
* Weights & Biases (``--wandb``; ``pip install "flexkit-rft[wandb]"``): an offline run in ``RUN_DIR/wandb/``,
  uploaded later with ``wandb sync RUN_DIR/wandb/offline-run-*`` if you want; nothing leaves the machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flexkit._metric_names import PREFIX, REWARD_MEAN, record_evaluation, record_validation
from flexkit.errors import FlexkitError
from flexkit.integrations._host_metrics import pipeline_metrics
from flexkit.sample._refill_count import RefillCount
from flexkit.scheduler.feedback import SELECTOR_METRIC

__all__ = ["Trackers", "merge_feedback", "run_metrics"]


def merge_feedback(payloads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One feedback payload from a step's rounds (dynamic sampling feeds back once per round)."""
    merged: dict[Any, dict[str, list[Any]]] = {}
    for payload in payloads:
        for tid, part in (payload or {}).get(SELECTOR_METRIC, {}).items():
            into = merged.setdefault(tid, {"indices": [], "values": []})
            into["indices"] += list(part.get("indices", []))
            into["values"] += list(part.get("values", []))
    return {SELECTOR_METRIC: merged}


def run_metrics(pipe: Any, record: Mapping[str, Any], feedback: Sequence[Mapping[str, Any]],
                rollouts: int | None, refill: RefillCount | None = None) -> dict[str, float]:
    """The ``flexkit/...`` metrics of one step's metrics ``record`` (see the module docstring), with the step's
    count (``refill``) as :func:`~flexkit.pipeline_metrics` takes it."""
    out = pipeline_metrics(pipe, feedback=merge_feedback(feedback), rollouts=rollouts, refill=refill)
    reward = record.get("reward_mean")
    if isinstance(reward, (int, float)) and math.isfinite(reward):
        out[REWARD_MEAN] = float(reward)
    for key, value in _numbers(record).items():
        out.setdefault(key, value)
    return out


def eval_metrics(evaluation: Mapping[str, Any], validation: Mapping[str, Any] | None = None) -> dict[str, float]:
    """``flexkit/eval/accuracy[/<level>]`` of a trainer's evaluation (``eval_accuracy[/<level>]``; empty
    without one), and ``flexkit/val/accuracy[/<level>]`` of its ``validation`` (``val_accuracy[/<level>]``)."""
    names = {**record_evaluation(evaluation), **record_validation(validation or {})}
    return {key: value for key, value in _numbers(names).items()
            if key.startswith((f"{PREFIX}eval/", f"{PREFIX}val/"))}


def _numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """The ``flexkit/...`` numbers of a record (tables and ``None`` left out)."""
    return {key: float(value) for key, value in record.items()
            if key.startswith(PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool)}


class Trackers:
    """The trackers a run asked for; :meth:`log` after each step, :meth:`close` at the end."""

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = False, wandb: bool = False,
                 config: Mapping[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.config = dict(config or {})
        self.tensorboard, self.wandb = tensorboard, wandb
        self._writer: Any = None
        self._wandb: Any = None
        self._opened = False
        if tensorboard:  # a missing package is an error before the run starts; files appear at the first log
            try:
                import tensorboard as _tensorboard  # noqa: F401  (torch.utils.tensorboard needs it)
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise FlexkitError('--tensorboard needs the tensorboard package: pip install '
                                   '"flexkit-rft[tensorboard]"') from None
        if wandb:
            try:
                import wandb as _wandb  # noqa: F401
            except ImportError:
                raise FlexkitError('--wandb needs the wandb package: pip install "flexkit-rft[wandb]"') from None

    def _open(self) -> None:
        self._opened = True
        if self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        if self.wandb:
            import wandb

            (self.run_dir / "wandb").mkdir(parents=True, exist_ok=True)
            self._wandb = wandb.init(mode="offline", dir=str(self.run_dir), project="flexkit",
                                     name=self.run_dir.name, config=self.config)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Send ``metrics`` at training step ``step`` (the first call opens the trackers in the run folder)."""
        if not self._opened:
            self._open()
        if self._writer is not None:
            for name, value in metrics.items():
                self._writer.add_scalar(name, value, global_step=step)
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)

    def log_eval(self, evaluation: Mapping[str, Any], step: int, validation: Mapping[str, Any] | None = None) -> None:
        """Log a trainer's ``evaluation`` and ``validation`` (the ones before training: ``step`` 0)."""
        self.log(eval_metrics(evaluation, validation), step=step)

    def log_step(self, pipe: Any, record: Mapping[str, Any], feedback: Sequence[Mapping[str, Any]],
                 rollouts: int | None, step: int, refill: RefillCount | None = None) -> None:
        """Log one training step's ``flexkit/...`` metrics (:func:`run_metrics`) at ``step`` steps done."""
        self.log(run_metrics(pipe, record, feedback, rollouts, refill), step=step)

    def close(self) -> None:
        """Flush and close every tracker."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
