"""Every benchmark in one command, each printing its table; JSON for all of them in one folder.

    python benchmarks/all.py --json-dir bench/        # the full suite (several minutes)
    python benchmarks/all.py --quick                  # every benchmark in its CI smoke mode

Runs, in turn: ``run.py`` (selectors vs the torch reference), ``sample_stage.py`` (scorers + actuator + token
weights vs a per-group loop), ``scheduler.py`` (8 tasksets, prefetch on/off), ``overhead.py`` (flexkit's share
of an embedded trainer step; skipped with a note when ``plugins/flexkit-rft-toyrl`` is not installed) and
``service.py`` (the Ray scheduler actor under concurrent workers; skipped without ``plugins/flexkit-rft-ray``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ("run", "sample_stage", "scheduler", "overhead", "service")
#: Benchmarks that need a plugin distribution: the module they import, and the install hint.
NEEDS = {"overhead": ("flexkit_toyrl", "pip install -e plugins/flexkit-rft-toyrl to measure the embedded trainer step"),
         "service": ("flexkit_ray", "pip install -e plugins/flexkit-rft-ray to measure the Ray scheduler actor")}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"flexkit_bench_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that classes it defines can be pickled (the Ray benchmark's actors)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark; returns the first non-zero exit status, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark in its CI smoke mode")
    parser.add_argument("--json-dir", metavar="DIR", help="write <benchmark>.json files into DIR")
    args = parser.parse_args(argv)
    if args.json_dir:
        Path(args.json_dir).mkdir(parents=True, exist_ok=True)
    status = 0
    for name in BENCHMARKS:
        print(f"\n== benchmarks/{name}.py ==", flush=True)
        needed = NEEDS.get(name)
        if needed is not None and importlib.util.find_spec(needed[0]) is None:
            print(f"skipped: {needed[1]}")
            continue
        sub = ["--quick"] if args.quick else []
        if args.json_dir:
            sub += ["--json", str(Path(args.json_dir) / f"{name}.json")]
        status = status or _load(name).main(sub)
    return status


if __name__ == "__main__":
    sys.exit(main())
