"""The taskset scheduler's checkpointed state: its layout, written, checked and restored in one place.

:class:`SchedulerState` holds :class:`~flexkit.TasksetScheduler`'s state methods (the class is split
over two modules for size). Its state: ``version``; ``step``; ``tasksets`` and ``weights``, which must be the
pipeline's; the mix (the keys ``mix`` and ``mix_from``, owned by :class:`~flexkit.scheduler._taskset_mix.TasksetMix`);
one
table per selector (``selectors``; each selector checks its own when it loads it); and the prefetched batch
(``pending``, owned by :class:`~flexkit.scheduler._prefetch.Prefetcher`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexkit._state_problems import add_problem, is_count, short
from flexkit.errors import FlexkitError, KeyPath, StateMismatchError
from flexkit.scheduler._prefetch import Prefetcher
from flexkit.scheduler._taskset_mix import TasksetMix

if TYPE_CHECKING:
    from flexkit.scheduler._tasks import Task, TasksetEntry

__all__ = ["STATE_VERSION", "SchedulerState"]

_SELECTORS, _PENDING = "selectors", "pending"

#: Version of :meth:`TasksetScheduler.state_dict <SchedulerState.state_dict>`'s layout.
STATE_VERSION = 1


class SchedulerState:
    """The state methods of :class:`~flexkit.TasksetScheduler` (see the module docstring)."""

    entries: list[TasksetEntry]
    step: int
    _lock: threading.RLock
    _prefetch: Prefetcher
    _weights: list[float] | None
    _mix: TasksetMix
    _order_cache: tuple[int, np.ndarray] | None

    def _materialise(self, picked: Sequence[np.ndarray]) -> list[Task]:  # pragma: no cover - the scheduler's
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: step, mix, every selector's full state, and a prefetched batch.

        Safe from any thread while another reads and feeds back: it waits for a running prefetch. A prefetch
        whose selection failed leaves no pending batch; one whose rows could not be read keeps its selection.
        """
        with self._lock:
            self._prefetch.wait()
            return {
                "version": STATE_VERSION,
                "step": self.step,
                "tasksets": self._tasksets(),
                "weights": self._weights,
                **self._mix.state_dict(),
                _SELECTORS: [e.selector.state_dict() for e in self.entries],
                _PENDING: self._prefetch.state_dict(),
            }

    def _tasksets(self) -> list[dict[str, Any]]:
        return [{"name": e.name, "size": e.size} for e in self.entries]

    def state_children(self) -> list[tuple[KeyPath, Any]]:
        """Each selector with the key path of its state inside :meth:`state_dict`'s, by taskset id."""
        return [((_SELECTORS, i), e.selector) for i, e in enumerate(self.entries)]

    def check_state(self, state: Any, path: KeyPath, problems: list[str]) -> None:
        """Append the problems of a loaded :meth:`state_dict` (at key path ``path``) to ``problems``, changing
        nothing: version, step, taskset list, weights, mix, one table per selector and the prefetched batch."""
        if not isinstance(state, Mapping):
            add_problem(problems, path, "missing, or not a table")
            return
        if state.get("version") != STATE_VERSION:
            add_problem(problems, (*path, "version"), f"expected {STATE_VERSION}, got {short(state.get('version'))}")
        raw = state.get("step")
        step = int(raw) if is_count(raw) else None
        if step is None:
            add_problem(problems, (*path, "step"), f"expected a step number >= 0, got {short(raw)}")
        mine, theirs = self._tasksets(), state.get("tasksets")
        if not isinstance(theirs, list) or [dict(t) if isinstance(t, Mapping) else t for t in theirs] != mine:
            add_problem(problems, (*path, "tasksets"), f"{short(theirs)} does not match this pipeline's {short(mine)}")
        weights = None if self.entries[0].weight is None else [
            float(e.weight) for e in self.entries if e.weight is not None]
        if state.get("weights") != weights:
            add_problem(problems, (*path, "weights"), f"{short(state.get('weights'))} does not match the pipeline's "
                                                      f"weights {short(weights)}")
        TasksetMix.check_state(state, path, problems, tasksets=len(self.entries), step=step)
        selectors, n = state.get(_SELECTORS), len(self.entries)
        if not isinstance(selectors, list) or len(selectors) != n:
            add_problem(problems, (*path, _SELECTORS), f"expected one state per taskset ({n}), got {short(selectors)}")
        else:
            for i, part in enumerate(selectors):
                if not isinstance(part, Mapping):
                    add_problem(problems, (*path, _SELECTORS, i), f"expected a table, got {type(part).__name__}")
        Prefetcher.check_state(state.get(_PENDING), (*path, _PENDING), problems, step=step,
                               tasksets=[(e.name, e.size) for e in self.entries])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; refuses a state from a different taskset list."""
        if state.get("version") != STATE_VERSION:
            raise StateMismatchError(f"scheduler state version {state.get('version')!r} is not {STATE_VERSION}")
        mine = self._tasksets()
        theirs = [{"name": t["name"], "size": int(t["size"])} for t in state["tasksets"]]
        if mine != theirs:
            raise StateMismatchError(f"scheduler state is for tasksets {theirs}, but this pipeline has {mine}")
        with self._lock:
            self._prefetch.wait()
            before = self.state_dict()
            try:
                self._load(state)
            except Exception:
                self._load(before)  # all or nothing: a state that fails part-way leaves the scheduler as it was
                raise

    def _load(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            self._prefetch.pending = None
            self.step = int(state["step"])
            weights = state.get("weights")
            self._weights = None if weights is None else [float(w) for w in weights]
            self._mix = TasksetMix.from_state(state)
            self._order_cache = None
            for entry, sel_state in zip(self.entries, state[_SELECTORS], strict=True):
                try:
                    entry.selector.load_state_dict(sel_state)
                except FlexkitError:
                    raise
                except (KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as exc:
                    raise StateMismatchError(
                        f"the saved state of taskset {entry.name!r}'s selector does not fit its "
                        f"{type(entry.selector).__name__} ({type(exc).__name__}: {exc})") from exc
            self._prefetch.load_state_dict(state.get(_PENDING), self._materialise)
