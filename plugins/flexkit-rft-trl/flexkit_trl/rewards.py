"""The reward functions of the ``trl`` trainer (``[trainer] reward``), called as TRL calls reward functions.

``exact_match`` and ``prefix_match`` compare each completion with its row's answer column; any other value is a
``package.module:function`` import path to a function of the same signature
(``f(prompts=..., completions=..., completion_ids=..., **columns) -> list[float | None]``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flexkit import ConfigError, ConfigIssue

__all__ = ["RewardFunction", "completion_text", "load_reward", "words"]

#: A TRL reward function: keyword arguments in, one reward (or ``None``) per completion out.
RewardFunction = Callable[..., list[float | None]]


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is; a conversational completion (a list of messages): the content of
    its last message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def words(value: Any) -> list[str]:
    """``value`` as text, split on whitespace (the unit the built-in rewards compare)."""
    return str(value).split()


def _builtin(kind: str, answer_column: str) -> RewardFunction:
    """``exact_match`` or ``prefix_match`` against ``answer_column``."""

    def reward(completions: Sequence[Any], **columns: Any) -> list[float | None]:
        answers = columns.get(answer_column)
        if answers is None:
            raise ConfigError([ConfigIssue("trainer.answer_column",
                                           f"the rows have no {answer_column!r} column for the {kind} reward: set "
                                           "answer_column to the column holding the answers")])
        out: list[float | None] = []
        for completion, answer in zip(completions, answers, strict=True):
            got, want = words(completion_text(completion)), words(answer)
            if kind == "exact_match":
                out.append(float(got == want))
            else:
                out.append(float(bool(want) and got[:len(want)] == want))
        return out

    reward.__name__ = kind  # TRL names its reward metrics after it (rewards/exact_match/mean)
    return reward


def load_reward(spec: str, answer_column: str, search: Path | None = None) -> RewardFunction:
    """The reward function ``spec`` names (a built-in, or ``package.module:function``, importable from
    ``sys.path`` or from the folder ``search``, the pipeline file's); a :class:`~flexkit.ConfigError` when it
    cannot be imported or is not callable."""
    if ":" not in spec:
        return _builtin(spec, answer_column)
    module_name, _, name = spec.partition(":")
    added = search is not None and str(search) not in sys.path
    if added:
        sys.path.insert(0, str(search))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError([ConfigIssue("trainer.reward", f"cannot import {module_name!r} for the reward {spec!r}: "
                                                         f"{exc}")]) from None
    finally:
        if added:
            sys.path.remove(str(search))
    function = vars(module).get(name)
    if not callable(function):
        raise ConfigError([ConfigIssue("trainer.reward", f"{module_name!r} has no function {name!r} (reward = "
                                                         f"{spec!r})")])
    result: RewardFunction = function
    return result
