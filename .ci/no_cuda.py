"""CI check: an environment holds no CUDA package (a distribution named ``nvidia-*`` or ``triton``), so an install on
top of torch's CPU build did not pull torch's CUDA build in.

    python .ci/no_cuda.py                  the running Python's environment: exit 0, or 1 naming each CUDA package
    python .ci/no_cuda.py DIR [DIR ...]    only the distributions installed in these folders (site-packages)
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Sequence


def cuda_packages(folders: Sequence[str] = ()) -> list[str]:
    """The installed distributions that only a CUDA build of torch brings, by normalised name, sorted: those of the
    running environment, or only those in ``folders`` when any are given."""
    found = (importlib.metadata.distributions(path=list(folders)) if folders
             else importlib.metadata.distributions())
    names = {re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() for dist in found}
    return sorted(name for name in names if name.startswith("nvidia-") or name == "triton")


def main(argv: Sequence[str]) -> int:
    """Print what was found; 1 when any CUDA package is installed."""
    where = ", ".join(argv) if argv else sys.prefix
    found = cuda_packages(argv)
    if found:
        print(f"{where}: the install pulled in CUDA packages on top of torch's CPU build: {', '.join(found)} "
              "(a requirement that torch's CPU build does not satisfy makes pip take the CUDA build)", file=sys.stderr)
        return 1
    print(f"{where}: no CUDA package (nvidia-*, triton) installed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
