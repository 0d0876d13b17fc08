"""``flexkit compare``: run settings of a pipeline over several seeds and print the results table; the
``--target`` and ``--budget`` lists."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flexkit._log import say
from flexkit.errors import ConfigError

__all__ = ["MAX_LIST_VALUES", "cmd_compare"]


def cmd_compare(args: argparse.Namespace) -> int:
    """``flexkit compare``: run every setting under every seed; print the results table."""
    from flexkit.compare import Setting, compare, parse_seeds, parse_setting, render_table
    from flexkit.run._runner import default_run_dir

    try:
        seeds = parse_seeds(args.seeds)
    except ConfigError as exc:
        say("error", f"error: {exc}", level="error")
        return 2
    try:
        targets = _number_list(args.target, float, "--target")
        budgets = _number_list(args.budget, int, "--budget")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = [parse_setting(spec) for spec in args.settings] or [Setting("baseline", (), "baseline:")]
    out = Path(args.out) if args.out else default_run_dir(name=f"compare-{Path(args.file).stem}")
    result = compare(args.file, settings, seeds, out, _one_or_all(targets), budget=_one_or_all(budgets),
                     plugins=args.plugin, progress=None if args.quiet else sys.stderr, jobs=args.jobs)
    print(render_table(result.results, result.targets, result.budgets))
    if len(result.targets) == 1:
        print(f"\ntarget eval accuracy: {result.target_rule}")
    else:
        print(f"\ntarget eval accuracies: {', '.join(f'{t:g}' for t in result.targets)} (--target)")
    if len(result.budgets) == 1:
        print(f"rollout budget: {result.budget_rule}")
    else:
        print(f"rollout budgets: {', '.join(f'{b:,}' for b in result.budgets)} (--budget)")
    plots = "".join(f", {p}" for p in (result.plot, result.level_plot) if p)
    print(f"results: {out / 'results.md'}{plots}")
    if result.failures:
        print(f"{len(result.failures)} run(s) FAILED: "
              + ", ".join(f"{name} seed {f.seed}" for name, f in result.failures)
              + " (see results.md; run the same command again to run them again)", file=sys.stderr)
        return 1
    return 0


#: The most values ``--target`` or ``--budget`` takes.
MAX_LIST_VALUES = 100


def _number_list(text: str | None, kind: type, option: str) -> list[Any]:
    """``--target`` / ``--budget``: one number or a comma-separated list; raises
    :class:`~flexkit.errors.ConfigError`."""
    if text is None:
        return []
    items = text.split(",")
    if len(items) > MAX_LIST_VALUES:
        raise ConfigError(f"{option}: at most {MAX_LIST_VALUES} values, got {len(items)}")
    try:
        values = [kind(item.strip()) for item in items]
    except ValueError:  # int() or float() refusing the text
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{option} {text}: expected {what} or a comma-separated list of them") from None
    if kind is int and any(v < 1 for v in values):
        raise ConfigError(f"{option} must be >= 1")
    if kind is float and not all(0.0 <= v <= 1.0 for v in values):  # NaN and infinities are not either
        raise ConfigError(f"{option} {text}: expected accuracies between 0 and 1")
    if len(set(values)) != len(values):
        raise ConfigError(f"{option} {text}: give each value once")
    return values


def _one_or_all(values: list[Any]) -> Any:
    """``None`` for no values, the value for one, the list for several (a single value reproduces the earlier
    command line exactly)."""
    return None if not values else values[0] if len(values) == 1 else values
