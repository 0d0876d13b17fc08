"""CI check: the running Python's environment holds no CUDA package (a distribution named ``nvidia-*`` or
``triton``), so an install on top of torch's CPU build did not pull torch's CUDA build in.

    python .ci/no_cuda.py      exit 0, or 1 naming each CUDA package found
"""

from __future__ import annotations

import importlib.metadata
import re
import sys


def cuda_packages() -> list[str]:
    """The installed distributions that only a CUDA build of torch brings, by normalised name, sorted."""
    names = {re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() for dist in importlib.metadata.distributions()}
    return sorted(name for name in names if name.startswith("nvidia-") or name == "triton")


def main() -> int:
    """Print what was found; 1 when any CUDA package is installed."""
    found = cuda_packages()
    if found:
        print(f"{sys.prefix}: the install pulled in CUDA packages on top of torch's CPU build: {', '.join(found)} "
              "(a requirement that torch's CPU build does not satisfy makes pip take the CUDA build)", file=sys.stderr)
        return 1
    print(f"{sys.prefix}: no CUDA package (nvidia-*, triton) installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
