"""What every benchmark reports about the machine it ran on."""

from __future__ import annotations

import os
import platform
from typing import Any

import flexkit


def machine_info(**versions: Any) -> dict[str, Any]:
    """Cores available to this process, CPU model, Python and flexkit versions, load average, plus the
    benchmark's own ``versions`` (numpy, torch, ray, ...)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "cpu_model": model or platform.processor(), "python": platform.python_version(),
            "flexkit": getattr(flexkit, "__version__", "?"), "load_average": list(os.getloadavg()), **versions}
