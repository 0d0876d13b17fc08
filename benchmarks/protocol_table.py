"""Rows of a pre-registered protocol's results table from ``flexkit compare``'s ``results.json`` files.

    python benchmarks/protocol_table.py docs/results/validation/sub-*.json

One row per setting: final test accuracy (mean ± 95% half-width), accuracy at each budget, rollouts to each target
(mean, and how many seeds reached it), levels 1-3 at the end, trained samples per rollout, wall seconds per run,
the file. Then, per target, each setting's mean rollouts as a ratio to the first file's setting, a run that misses
counting at its budget (the protocols' rule). It prints what the files hold and asserts nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _mean(cell: Any, digits: int = 3) -> str:
    if not isinstance(cell, dict) or cell.get("mean") is None:
        return "n/a"
    text = f"{cell['mean']:.{digits}f}"
    if cell.get("n", 0) >= 3 and cell.get("ci95") is not None:
        text += f" ± {cell['ci95']:.{digits}f}"
    return text


def _rollouts(target: dict[str, Any]) -> str:
    reached = target.get("reached", "?")
    cell = target.get("rollouts")
    if not isinstance(cell, dict) or cell.get("mean") is None:
        return f"not reached ({reached})"
    return f"{cell['mean']:,.0f} ({reached})"


def missed_at_budget(setting: dict[str, Any], target_index: int, budget: float) -> float:
    """Mean rollouts to a target over every run, a run that missed it counting at ``budget``."""
    target = setting["targets"][target_index]
    reached = (target.get("rollouts") or {}).get("values") or []
    runs = int(str(target.get("reached", "0/0")).split("/")[1] or 0)
    return (sum(reached) + budget * (runs - len(reached))) / runs if runs else float("nan")


def rows(paths: list[Path]) -> list[str]:
    """The markdown rows for ``paths``."""
    out = []
    for path in paths:
        data = json.loads(path.read_text())
        for s in data["settings"]:
            final = s["final"]
            budgets = " / ".join(_mean(b["accuracy"]).split(" ±")[0] for b in s["budgets"])
            targets = " / ".join(_rollouts(t) for t in s["targets"])
            levels = " / ".join(_mean(final.get(f"eval_accuracy/{k}")).split(" ±")[0] for k in (1, 2, 3))
            per = s.get("trained_samples_per_rollout")
            if per is None and isinstance(s.get("trained_samples"), dict) and isinstance(s.get("rollouts"), dict):
                per = s["trained_samples"]["mean"] / s["rollouts"]["mean"]  # files from before the key
            per_text = f"{per:.2f}" if isinstance(per, (int, float)) else "n/a"
            out.append(f"| `{s['name']}` | {_mean(final['eval_accuracy'])} | {budgets} | {targets} | {levels} | "
                       f"{per_text} | {_mean(s['seconds'], 0)} | [{path.stem}]({path.parent.name}/{path.name}) |")
    return out


def ratios(paths: list[Path], budget: float) -> list[str]:
    """Per setting and target: mean rollouts (misses at ``budget``) over the first file's first setting's."""
    settings = [s for p in paths for s in json.loads(p.read_text())["settings"]]
    base = settings[0]
    out = []
    for s in settings[1:]:
        cells = []
        for i, target in enumerate(s["targets"]):
            mine, theirs = missed_at_budget(s, i, budget), missed_at_budget(base, i, budget)
            cells.append(f"{target['target']}: {mine / theirs:.2f}x")
        out.append(f"{s['name']} / {base['name']}: " + ", ".join(cells))
    return out


if __name__ == "__main__":
    files = [Path(a) for a in sys.argv[1:]]
    print("\n".join(rows(files)))
    first = json.loads(files[0].read_text())
    print("\n".join(ratios(files, float(max(first["budgets"])))))
