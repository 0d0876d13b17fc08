"""A run's counters and evaluations, in one place: :class:`RunCounters`.

``flexkit run`` keeps one :class:`RunCounters`: the steps trained, the responses (rollouts) and response tokens
generated so far, the evaluation before training and the latest one. Each step adds to it (:func:`flexkit.run._step.
train_step`), the metrics records and the ``[run] max_rollouts`` budget read it, and it is checkpointed whole as
``extra.runner`` (:meth:`RunCounters.state_dict`; the scheduler's own ``step`` counts batches handed out, which
refills make more than the steps trained). A resume checks it (:meth:`RunCounters.check_state`) and restores it
(:meth:`RunCounters.from_state`, which also reads checkpoints written before the counters or ``last_eval`` were
saved). The run's wall seconds so far (``flexkit/run/seconds``) are not checkpointed: a resume reads them back from
the last record it keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from flexkit._metric_names import EVAL_ACCURACY, RUN_GENERATED_TOKENS, RUN_ROLLOUTS, RUN_SECONDS, evaluation_of
from flexkit._state_problems import add_problem, is_count, is_number
from flexkit.errors import KeyPath

__all__ = ["RUNNER_KEY", "RunCounters"]

#: The key of the run's counters in a checkpoint's extra state.
RUNNER_KEY = "runner"

_TOTALS = ("rollouts", "generated_tokens")
#: The metrics records' names of the totals (the checkpoint's are :data:`_TOTALS`).
_RECORD_NAMES = {"rollouts": RUN_ROLLOUTS, "generated_tokens": RUN_GENERATED_TOKENS}


def _is_eval(value: Any) -> bool:
    return value is None or (isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in value.items()))


@attrs.define
class RunCounters:
    """Where a run stands: ``step`` steps trained (the next step to train), ``rollouts`` responses and
    ``generated_tokens`` response tokens generated, and the evaluations: ``first_eval`` before training (None
    without ``[run] eval_every``) and the latest, ``last_eval``; ``seconds``, the wall seconds the run's step loop
    has taken so far (its records' ``flexkit/run/seconds``; not in :meth:`state_dict`)."""

    step: int = 0
    rollouts: int = 0
    generated_tokens: int = 0
    first_eval: dict[str, float] | None = None
    last_eval: dict[str, float] = attrs.field(factory=dict)
    seconds: float = 0.0

    def add(self, responses: int, tokens: int) -> None:
        """Count a step's generated responses and response tokens."""
        self.rollouts += responses
        self.generated_tokens += tokens

    def totals(self) -> dict[str, int]:
        """The cumulative totals under their checkpoint names: ``rollouts``, ``generated_tokens``."""
        return {"rollouts": self.rollouts, "generated_tokens": self.generated_tokens}

    def record_totals(self) -> dict[str, int]:
        """The cumulative totals under the metrics records' names (``flexkit/run/rollouts``, ...)."""
        return {_RECORD_NAMES[key]: value for key, value in self.totals().items()}

    def state_dict(self) -> dict[str, Any]:
        """The checkpointed state (``extra.runner``)."""
        return {"step": self.step, "first_eval": self.first_eval, "last_eval": self.last_eval, **self.totals()}

    @staticmethod
    def check_state(state: Any, path: KeyPath, problems: list[str], *, batches: int | None) -> None:
        """Append the problems of a loaded :meth:`state_dict` (at key path ``path``) to ``problems``: a table with
        a ``step`` >= 0, equal to ``batches`` (the batches the scheduler handed out; None: not compared, as under
        ``[sample.refill]``), evaluations null or tables of numbers, and counts >= 0 (or absent)."""
        if not isinstance(state, Mapping):
            add_problem(problems, path, "missing, or not a table")
            state = {}
        step = state.get("step")
        if not is_count(step):
            add_problem(problems, (*path, "step"), f"expected a step number >= 0, got {step!r}")
        for key in ("first_eval", "last_eval"):
            if not _is_eval(state.get(key)):
                add_problem(problems, (*path, key), f"expected null or a table of numbers, got {state.get(key)!r}")
        for key in _TOTALS:
            if state.get(key) is not None and not is_count(state[key]):
                add_problem(problems, (*path, key), f"expected a count >= 0, got {state[key]!r}")
        if is_count(step) and batches is not None and step != batches:
            add_problem(problems, (*path, "step"), f"{step}, but the scheduler has handed out {batches} batches")

    @classmethod
    def from_state(cls, state: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> RunCounters:
        """The counters of a checked :meth:`state_dict`. ``records`` are the run's metrics records before its step
        (the evaluation before training has step -1): a checkpoint written before the counters were saved takes
        the last step record's totals, one written before ``last_eval`` was the last evaluation record's. The
        records are under the current names (:func:`~flexkit._metric_names.upgrade_record`). ``seconds`` is the last
        record's ``flexkit/run/seconds`` (0 for records written before it existed)."""
        steps = [r for r in records if r["step"] >= 0]
        last_record = steps[-1] if steps else {}
        totals = {key: int(state.get(key, last_record.get(_RECORD_NAMES[key]) or 0) or 0) for key in _TOTALS}
        first_eval, last_eval = state.get("first_eval"), state.get("last_eval")
        if last_eval is None:
            evals = [r for r in records if EVAL_ACCURACY in r]
            last_eval = evaluation_of(evals[-1]) if evals else first_eval
        clock: Any = records[-1].get(RUN_SECONDS) if records else None
        seconds = float(clock) if is_number(clock) and clock >= 0 else 0.0
        return cls(step=int(state["step"]), first_eval=dict(first_eval) if first_eval is not None else None,
                   last_eval=dict(last_eval or {}), seconds=seconds, **totals)

    @staticmethod
    def step_of(state: Mapping[str, Any]) -> int:
        """The ``step`` of a :meth:`state_dict` (raises ``KeyError``, ``TypeError`` or ``ValueError`` when it has
        none)."""
        return int(state["step"])
