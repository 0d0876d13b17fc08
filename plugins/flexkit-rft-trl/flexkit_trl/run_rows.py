"""Task rows as TRL inputs for the ``trl`` trainer, and its held-out rows (importable without torch or TRL).

A row becomes a TRL input (a dict with ``prompt``, the answer column and the row's other columns, which TRL hands
to the reward function): with ``rows = "columns"`` the prompt is the row's ``prompt_column``; with
``rows = "arithmetic"`` the row is one of flexkit-rft-toyrl's ``arithmetic`` storage (operands ``a``, ``b``) and
:func:`arithmetic_prompt` writes it as text. The held-out set is ``eval_data``'s rows, or, for arithmetic, fresh
problems per level drawn from a fixed seed (the same for every run, so runs are comparable).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from flexkit import ConfigError, ConfigIssue
from flexkit_trl.run_config import TRLRunConfig

__all__ = ["EVAL_SPAWN_KEY", "VAL_SPAWN_KEY", "arithmetic_eval_rows", "arithmetic_prompt", "arithmetic_val_rows",
           "operand_ranges", "read_eval_rows", "trl_input"]

#: Spawn key of the arithmetic held-out problems (with seed 0: the same for every pipeline seed).
EVAL_SPAWN_KEY = (21,)
#: The validation problems' stream (of ``arithmetic_val_rows``), apart from the test set's.
VAL_SPAWN_KEY = (22,)
#: The operator token of each operation.
OPERATORS = {"add": "+", "mul": "*"}


def spaced(value: int, *, reversed_digits: bool = False) -> str:
    """``value``'s decimal digits separated by spaces, most significant first (``47`` → ``"4 7"``), or least
    significant first with ``reversed_digits`` (``"7 4"``)."""
    digits = str(value)
    return " ".join(digits[::-1] if reversed_digits else digits)


def arithmetic_prompt(a: int, b: int, operation: str, *, reversed_digits: bool = False) -> tuple[str, str]:
    """The prompt (``"4 7 + 5 ="``) and the answer (``"5 2"``) of one arithmetic problem; with ``reversed_digits``
    every number least significant digit first (``"7 4 + 5 ="``, ``"2 5"``)."""
    result = a + b if operation == "add" else a * b
    return (f"{spaced(a, reversed_digits=reversed_digits)} {OPERATORS[operation]} "
            f"{spaced(b, reversed_digits=reversed_digits)} =", spaced(result, reversed_digits=reversed_digits))


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def trl_input(row: Any, config: TRLRunConfig, *, where: str) -> dict[str, Any]:
    """The TRL input of one task row (see the module docstring); a :class:`~flexkit.ConfigError` naming ``where``
    (the taskset and row) when the row lacks what ``config.rows`` reads."""
    data = dict(row) if isinstance(row, Mapping) else {}
    if config.rows == "arithmetic":
        a, b, operation = data.get("a"), data.get("b"), data.get("operation", "add")
        if not (_is_int(a) and _is_int(b) and a >= 0 and b >= 0 and operation in OPERATORS):
            raise ConfigError([ConfigIssue("trainer.rows",
                                           f'rows = "arithmetic" reads integer operands a and b (storage_type = '
                                           f'"arithmetic"); {where} has a={a!r}, b={b!r}, operation={operation!r}')])
        if operation != config.operation:
            raise ConfigError([ConfigIssue("trainer.operation",
                                           f'{where} is an operation = "{operation}" problem but the trl trainer has '
                                           f'operation = "{config.operation}": set the same operation in both')])
        prompt, answer = arithmetic_prompt(a, b, operation, reversed_digits=config.reversed_digits)
        return {**data, "prompt": prompt, config.answer_column: answer}
    if config.prompt_column not in data:
        raise ConfigError([ConfigIssue("trainer.prompt_column",
                                       f"{where} has no {config.prompt_column!r} column (columns: "
                                       f"{', '.join(sorted(data)) or 'none'}): set prompt_column, or rows = "
                                       f'"arithmetic" for the arithmetic storage')])
    return {**data, "prompt": data[config.prompt_column]}


def operand_ranges(config: TRLRunConfig, level: int) -> tuple[int, int, int, int]:
    """``(a_low, a_high, b_low, b_high)`` of a level's problems: a of ``level`` digits; b below ``10**level`` for
    addition, one digit 2-9 for multiplication (high ends excluded)."""
    low, high = (0 if level == 1 else 10 ** (level - 1)), 10 ** level
    b_low, b_high = (0, high) if config.operation == "add" else (2, 10)
    return low, high, b_low, b_high


def _problem_row(config: TRLRunConfig, a: int, b: int, level: int) -> dict[str, Any]:
    """One held-out problem as the arithmetic storage writes its rows."""
    row: dict[str, Any] = {"a": a, "b": b, "level": level}
    if config.operation != "add":
        row["operation"] = config.operation
    return row


def arithmetic_eval_rows(config: TRLRunConfig) -> list[dict[str, Any]]:
    """``eval_tasks_per_level`` problems per level of ``eval_levels`` (:func:`operand_ranges`), from a fixed
    seed: the test set."""
    rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=EVAL_SPAWN_KEY))
    rows: list[dict[str, Any]] = []
    for level in config.eval_levels:
        low, high, b_low, b_high = operand_ranges(config, level)
        a = rng.integers(low, high, size=config.eval_tasks_per_level)
        b = rng.integers(b_low, b_high, size=config.eval_tasks_per_level)
        rows.extend(_problem_row(config, x, y, level) for x, y in zip(a.tolist(), b.tolist(), strict=True))
    return rows


def arithmetic_val_rows(config: TRLRunConfig, test_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Up to ``val_tasks_per_level`` distinct problems per level of ``eval_levels``, none of them in ``test_rows``
    (the test set), from their own fixed stream; a level with fewer problems left gives what it has."""
    rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=VAL_SPAWN_KEY))
    taken = {(int(r["a"]), int(r["b"])) for r in test_rows}
    rows: list[dict[str, Any]] = []
    for level in config.eval_levels:
        low, high, b_low, b_high = operand_ranges(config, level)
        left = (high - low) * (b_high - b_low) - sum(1 for a, _b in taken if low <= a < high)
        want = min(config.val_tasks_per_level, max(left, 0))
        seen, before = set(taken), len(rows)
        while len(rows) - before < want:
            pair = (int(rng.integers(low, high)), int(rng.integers(b_low, b_high)))
            if pair not in seen:
                seen.add(pair)
                rows.append(_problem_row(config, *pair, level))
    return rows


def read_eval_rows(path: Path, key: str = "trainer.eval_data") -> list[dict[str, Any]]:
    """The rows of the JSON Lines file ``path`` (blank lines skipped); a :class:`~flexkit.ConfigError` naming the
    file and line of a row that is not a JSON object."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(key, f"cannot read {path}: {exc.strerror or exc}")]) from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError([ConfigIssue(key, f"{path}:{number}: not JSON: {exc.msg}")]) from None
        if not isinstance(row, dict):
            raise ConfigError([ConfigIssue(key, f"{path}:{number}: a row must be a JSON object")])
        rows.append(row)
    if not rows:
        raise ConfigError([ConfigIssue(key, f"{path} holds no rows")])
    return rows


def union_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of ``rows``, in order of first appearance (TRL reads the first row's keys from every row)."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)
