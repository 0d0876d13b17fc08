"""``local_runtime``: a local Ray runtime for tests, benchmarks and single-machine runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import ray

#: Environment the runtime's worker processes inherit: built-in flexkit plugins only (no entry points of other
#: installed distributions), and no usage reporting.
WORKER_ENV = {"FLEXKIT_LOAD_PLUGINS": "", "RAY_USAGE_STATS_ENABLED": "0"}


@contextmanager
def local_runtime(num_cpus: int = 2, *, namespace: str = "flexkit") -> Iterator[None]:
    """Start a local Ray runtime (no dashboard, worker logs not forwarded) whose workers load only flexkit's
    built-in plugins, and shut it down on exit; the caller's environment is restored. A runtime already up is
    reused and left running."""
    if ray.is_initialized():
        yield
        return
    saved = {key: os.environ.get(key) for key in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, namespace=namespace)
    try:
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
