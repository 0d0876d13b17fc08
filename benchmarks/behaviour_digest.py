"""Digests of what flexkit produces, to show a refactor changes no behaviour: run before and after, compare.

For every registered selector, scorer and actuator: its outputs over a few driven steps on synthetic inputs
and its state after them (from its default config, as the contract checks build it). For each quick example
pipeline: its metrics records (wall times left out) and its final checkpoint's state. Each digest is the
SHA-256 of the canonical JSON of that data, floats rounded to 9 significant digits.

    python benchmarks/behaviour_digest.py > before.json      # on the old commit
    python benchmarks/behaviour_digest.py > after.json       # on the new one
    diff before.json after.json                              # empty when nothing changed

Run from the repository root with the plugins installed (the README's test install).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: Example pipelines with a trainer, run by ``flexkit run`` for the steps given.
EXAMPLES: dict[str, int] = {
    "examples/simulated.toml": 12,
    "examples/quickstart.toml": 6,
    "examples/toyrl_mixing.toml": 6,
}
#: Scheduler-only example pipelines, run by ``flexkit preview --json --feedback random``.
PREVIEWS: tuple[str, ...] = ("examples/minimal.toml", "examples/multi_taskset_difficulty.toml",
                             "examples/adaptive_mix.toml", "examples/rollout_filter.toml")
#: Extra configurations of selectors whose pooled paths the default config leaves out.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "difficulty_based": [{"feature_keys": ["f0", "f1"], "target_reward": 0.5, "tau": 0.5},
                         {"feature_keys": ["f0", "f1"], "tau": 0.0, "target_reward": 0.3}],
    "frontier": [{"feature_keys": ["level"]}, {"feature_keys": ["level"], "thompson": False, "tau": 0.0}],
    "learnability": [{"feature_keys": ["level"], "candidates": 4, "tau": 1.0}],
}
#: Metric keys that hold wall-clock times (they differ on every run).
TIMING_WORDS = ("seconds", "time", "elapsed", "_s", "per_s", "throughput", "wall")


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {str(k): _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def digest(data: Any) -> str:
    """SHA-256 of ``data``'s canonical JSON (keys sorted, floats rounded)."""
    text = json.dumps(_round(data), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def component_digests(steps: int = 6) -> dict[str, str]:
    """One digest per registered selector, scorer and actuator: driven outputs, then state."""
    from flexkit import make_converter, structure
    from flexkit.testing import build, default_table, drive, host, plain, registered

    out: dict[str, str] = {}
    for component in registered("selector", "scorer", "actuator"):
        variants: list[dict[str, Any] | None] = [None, *VARIANTS.get(component.name, [])]
        for number, variant in enumerate(variants):
            with tempfile.TemporaryDirectory() as tmp:
                config = None if variant is None else structure(
                    make_converter(host()), {**default_table(component, Path(tmp)), **variant}, component.config_cls)
                built = build(component, Path(tmp), seed=3, config=config)
                outputs = drive(component.stage, built, range(steps), np.random.default_rng(7))
                state = plain(built.state_dict()) if hasattr(built, "state_dict") else None
            suffix = f"#{number}" if number else ""
            out[f"{component.stage}:{component.name}{suffix}"] = digest({"outputs": outputs, "state": state})
    return out


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        records.append({k: v for k, v in record.items() if not any(w in k for w in TIMING_WORDS)})
    return records


def _checkpoint(run_dir: Path) -> Any:
    from flexkit.pipeline._checkpoint import load_state
    from flexkit.testing import plain

    folders = sorted(p.parent for p in run_dir.rglob("state.json"))
    if not folders:
        return None
    state, _meta = load_state(folders[-1])
    return plain(state)


def example_digests(examples: dict[str, int]) -> dict[str, Any]:
    """Per example: digests of its metrics records and its last checkpoint, from ``flexkit run``."""
    out: dict[str, Any] = {}
    for path, steps in examples.items():
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            overrides = f"run.total_steps={steps},run.checkpoint_every={max(1, steps // 2)}"
            done = subprocess.run(
                [sys.executable, "-m", "flexkit", "run", path, "--quiet", "--out", str(run_dir), "--set", overrides],
                capture_output=True, text=True, check=False)
            if done.returncode != 0:
                out[path] = {"error": done.stderr.strip().splitlines()[-1:]}
                continue
            out[path] = {"metrics": digest(_metrics(run_dir)), "checkpoint": digest(_checkpoint(run_dir))}
    return out


def preview_digests(paths: tuple[str, ...], steps: int = 20) -> dict[str, str]:
    """Per scheduler-only example: the digest of its previewed steps with simulated feedback."""
    out: dict[str, str] = {}
    for path in paths:
        done = subprocess.run(
            [sys.executable, "-m", "flexkit", "preview", path, "--json", "--feedback", "random", "--steps", str(steps)],
            capture_output=True, text=True, check=False)
        lines = done.stdout.splitlines() if done.returncode == 0 else ["error", *done.stderr.splitlines()[-1:]]
        out[path] = digest(lines)
    return out


def main() -> None:
    """Print the digests as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-examples", action="store_true", help="components only (seconds, not minutes)")
    args = parser.parse_args()
    result: dict[str, Any] = {"components": component_digests()}
    if not args.no_examples:
        result["examples"] = example_digests(EXAMPLES)
        result["previews"] = preview_digests(PREVIEWS)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
