"""The values ``flexkit plot`` draws from a run's records, checked before anything is drawn.

``metrics.jsonl`` is a file a user (or another tool, or a damaged disk) may have edited: a record may hold a
string where a number belongs, a count table with a list in it, or histograms of different lengths.
:func:`drawable_records` keeps the values a plot can draw and leaves out the others, with a note naming each
key, how many records it was left out of, and an example, so that ``flexkit plot`` draws what it can instead
of stopping with a traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flexkit._metric_names import (
    EVAL_ACCURACY,
    FILTER_ROUNDS,
    KEPT_FRACTION,
    LEVEL_MIX,
    PREDICTED_PASS_RATE,
    PREFIX,
    REPLAY_GROUPS,
    REPLAY_RESPONSES,
    RUN_ROLLOUTS,
    TASKSET_MIX,
    VAL_ACCURACY,
)
from flexkit._state_problems import is_number

__all__ = ["LEVEL_PREFIXES", "NUMBER_KEYS", "TABLE_KEYS", "drawable_records"]

#: Keys drawn as one number per record (besides those starting with :data:`LEVEL_PREFIXES`).
NUMBER_KEYS: tuple[str, ...] = (EVAL_ACCURACY, VAL_ACCURACY, RUN_ROLLOUTS, KEPT_FRACTION, FILTER_ROUNDS,
                                REPLAY_GROUPS, REPLAY_RESPONSES)
#: Prefixes of the per-level and per-group numbers drawn (``flexkit/eval/accuracy/<level>``,
#: ``flexkit/val/accuracy/<level>``, the selectors' ``flexkit/selector/<taskset>/<key>``).
LEVEL_PREFIXES: tuple[str, ...] = (EVAL_ACCURACY + "/", VAL_ACCURACY + "/", PREFIX + "selector/")
#: Keys drawn as a table of counts per record (name -> count).
TABLE_KEYS: tuple[str, ...] = (TASKSET_MIX, LEVEL_MIX)
_HISTOGRAMS = PREDICTED_PASS_RATE


def _number_problem(value: Any) -> str | None:
    return None if is_number(value) else "not a finite number"


def _table_problem(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "not a table of counts"
    if not all(is_number(v) and v >= 0 for v in value.values()):
        return "a count that is not a finite number >= 0"
    return None


def _histogram_problem(value: Any, length: int | None) -> str | None:
    if not isinstance(value, Mapping) or not all(isinstance(value.get(k), list) for k in ("selected", "pool")):
        return "not a table with 'selected' and 'pool' lists"
    selected, pool = value["selected"], value["pool"]
    if not pool or len(selected) != len(pool) or (length is not None and len(pool) != length):
        return "histograms of different lengths"
    if not all(is_number(v) and v >= 0 for v in [*selected, *pool]):
        return "a count that is not a finite number >= 0"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def drawable_records(records: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """``records`` without the values a plot cannot draw, and one note per key that lost any (``flexkit/taskset_mix:
    left out of 2 records (not a table of counts, e.g. [1, 2])``). Keys no plot draws are kept as they are."""
    out: list[dict[str, Any]] = []
    dropped: dict[str, tuple[int, str, Any]] = {}
    length: int | None = None

    def check(record: dict[str, Any], key: str, problem: Callable[[Any], str | None]) -> None:
        why = problem(record[key])
        if why is not None:
            count, first_why, example = dropped.get(key, (0, why, record[key]))
            dropped[key] = (count + 1, first_why, example)
            del record[key]

    for original in records:
        record = dict(original)
        for key in [k for k in record if k in NUMBER_KEYS or k.startswith(LEVEL_PREFIXES)]:
            check(record, key, _number_problem)
        for key in [k for k in TABLE_KEYS if k in record]:
            check(record, key, _table_problem)
        if _HISTOGRAMS in record:
            check(record, _HISTOGRAMS, functools.partial(_histogram_problem, length=length))
            if _HISTOGRAMS in record:
                length = len(record[_HISTOGRAMS]["pool"])
        out.append(record)
    notes = [f"{key}: left out of {count} record{'s' if count != 1 else ''} ({why}, e.g. {_short(example)})"
             for key, (count, why, example) in dropped.items()]
    return out, notes
