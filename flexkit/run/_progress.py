"""The progress display of ``flexkit run``: one rewritten line on a terminal, periodic plain lines elsewhere,
plus the trainer's long phases (:meth:`flexkit.Trainer.report_progress`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import IO, Any

from flexkit._metric_names import RUN_ROLLOUTS

__all__ = ["ProgressDisplay"]


class ProgressDisplay:
    """A one-line progress display on a terminal; periodic plain lines elsewhere."""

    def __init__(self, total: int, stream: IO[str] | None, budget: int | None = None) -> None:
        self.total, self.stream, self.budget = total, stream, budget
        self._decile = 0
        self.tty = bool(stream is not None and stream.isatty())
        self.started = time.monotonic()
        self.every = max(1, total // 10)
        self._phase: tuple[str, float, float] = ("", 0.0, 0.0)  # name, started, last written

    def phase(self, name: str, done: int, total: int) -> None:
        """A trainer's long phase (:meth:`flexkit.Trainer.report_progress`): on a terminal a line
        rewritten at most 5 times a second; elsewhere a line at every 10% of it."""
        if self.stream is None or total <= 0:
            return
        now = time.monotonic()
        if self._phase[0] != name:
            self._phase = (name, now, 0.0)
        _name, started, written = self._phase
        last = done >= total
        text = f"{name}: {min(done, total)}/{total} ({now - started:.0f}s)"
        if self.tty:
            if not last and now - written < 0.2:
                return
            self.stream.write("\r" + text + ("\n" if last else ""))
        elif last or done * 10 // total != (done - 1) * 10 // total:
            self.stream.write(text + "\n")
        else:
            return
        self.stream.flush()
        self._phase = (name, started, now)

    def update(self, step: int, metrics: Mapping[str, Any], accuracy: float | None) -> None:
        """Step ``step`` is done with these metrics (and the latest eval ``accuracy``): on a terminal the line is
        rewritten; elsewhere a line at every tenth of the run (or of the rollout budget) and at its end."""
        if self.stream is None:
            return
        done = step + 1
        elapsed = time.monotonic() - self.started
        rollouts = metrics.get(RUN_ROLLOUTS)
        fraction = done / self.total
        over_budget = self.budget is not None and rollouts is not None and rollouts >= self.budget
        if self.budget is not None and rollouts is not None:  # [run] max_rollouts may end the run first
            fraction = max(fraction, rollouts / self.budget)
        finished = done == self.total or over_budget
        bar = "#" * int(20 * min(1.0, fraction))
        acc = f" eval {accuracy:.3f}" if accuracy is not None else ""
        reward = metrics.get("reward_mean")
        spent = "" if rollouts is None else f" rollouts {rollouts:,}" + (f"/{self.budget:,}" if self.budget else "")
        text = (f"[{bar:<20}] step {done}/{self.total} reward {reward:.3f}{acc}{spent} "
                f"{elapsed:.1f}s") if reward is not None else f"step {done}/{self.total}{spent}"
        decile, previous = int(10 * min(1.0, fraction)), self._decile
        self._decile = decile
        if self.tty:
            self.stream.write("\r" + text)
            if finished:
                self.stream.write("\n")
            self.stream.flush()
        elif done % self.every == 0 or finished or (self.budget is not None and decile != previous):
            self.stream.write(text + "\n")
            self.stream.flush()
