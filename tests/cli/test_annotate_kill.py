"""Kill and Ctrl-C tests of ``flexkit annotate``: interrupted at any Python line, the documented rerun (the same
command) always ends with the file an uninterrupted call writes, byte for byte.

A child process (the "zygote", started with ``sys.executable``) imports flexkit, torch and pyarrow once and forks
one worker per command; a worker runs ``flexkit.cli.main.main(["annotate", ...])`` with its output in files, as the
``flexkit`` command does. A worker can be told to interrupt itself at the ``n``-th Python line executed inside
the annotate call (reading the taskset, rollouts, writing rows, committing the trainer state, writing the output):
with a real SIGKILL (no ``finally`` clause or exit handler runs), or with a SIGINT, which Python turns into the
``KeyboardInterrupt`` of a Ctrl-C. ``n`` is drawn from the number of lines an uninterrupted call executes.
``FLEXKIT_SLOW=1`` runs 200 examples of the property test instead of 8.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.checkpoint.kill_helpers import ZygoteProcess, needs_fork, serve_forks

PIPELINE = """
[run]
batch_size = 8
seed = 3

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 24
levels = [1, 2, 3]

[trainer]
type = "simulator"
group_size = 4
"""

#: 3 chunks of 8 tasks, 2 rollouts of the group size 4 per chunk.
SAMPLES = 8
EXAMPLES = 200 if os.environ.get("FLEXKIT_SLOW") == "1" else 8


# -- the child side -------------------------------------------------------------------------------------------


def install_interrupt(mode: str, line: int, count_to: str | None) -> None:
    """Interrupt this process (``mode``: ``"kill"`` SIGKILL, ``"int"`` SIGINT) at the ``line``-th Python line
    executed inside ``flexkit.annotate._command.annotate`` (0: never); with ``count_to``, write the call's line count
    there."""
    import flexkit.annotate._command

    original = flexkit.annotate._command.annotate

    def annotate(*args: Any, **kwargs: Any) -> Any:
        lines = 0

        def tracer(_frame: Any, event: str, _arg: Any) -> Any:
            nonlocal lines
            if event == "line":
                lines += 1
                if lines == line:
                    sys.settrace(None)
                    os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGINT)
                    return None
            return tracer

        if line or count_to:
            sys.settrace(tracer)
        try:
            return original(*args, **kwargs)
        finally:
            sys.settrace(None)
            if count_to is not None:
                Path(count_to).write_text(str(lines))

    flexkit.annotate._command.annotate = annotate  # the CLI imports it when the command runs


def _child(payload: str) -> int:
    job = json.loads(payload)
    for fd, name in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the fds above
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    try:
        install_interrupt(job["mode"], job["line"], job.get("count_to"))
        from flexkit.cli.main import main

        os.chdir(job["cwd"])
        code = main(job["argv"])
    except BaseException as exc:  # a traceback is a failure of the command line: report it
        print(f"Traceback-like failure: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 70
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def zygote() -> None:
    """Import everything once, then fork a worker per ``run <json>`` line on stdin."""
    import torch

    torch.set_num_threads(1)
    import flexkit.annotate._command
    import flexkit.cli.main
    import flexkit.run.simulator  # noqa: F401
    from flexkit.plugins._manager import get_plugins

    with contextlib.suppress(ImportError):  # its first write imports pandas: in every worker, without this
        import tempfile

        import pyarrow as pa
        import pyarrow.parquet as pq

        with tempfile.TemporaryDirectory() as folder:
            pq.write_table(pa.table({"a": [1]}), Path(folder) / "warm.parquet")
    get_plugins()
    serve_forks(_child, announce_pid=True)


# -- the parent side ------------------------------------------------------------------------------------------


@attrs.define
class Outcome:
    """How one command ended: killed by SIGKILL, or its exit code, with its stderr."""

    killed: bool
    code: int | None
    stderr: str


@attrs.define
class Zygote(ZygoteProcess):
    """The zygote of :func:`zygote`, running its commands in ``workdir``."""

    workdir: Path
    jobs: int = 0

    def run(self, argv: list[str], *, mode: str = "kill", line: int = 0, count_to: Path | None = None) -> Outcome:
        """Run ``flexkit <argv>`` in a fresh worker, interrupted as asked, and wait for it."""
        self.jobs += 1
        out, err = self.workdir / f"job{self.jobs}.out", self.workdir / f"job{self.jobs}.err"
        job = {"argv": argv, "stdout": str(out), "stderr": str(err), "cwd": str(self.workdir), "mode": mode,
               "line": line, "count_to": str(count_to) if count_to else None}
        self.send(f"run {json.dumps(job)}")
        first = self.lines.next()
        assert first.startswith("pid "), first
        reaped = self.lines.next(timeout=120.0)
        status = int(reaped.split()[2])
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        return Outcome(killed, code, err.read_text(errors="replace") if err.exists() else "")


@attrs.define
class Reference:
    """An uninterrupted call's output and line count, per output format."""

    output: bytes
    lines: int


@pytest.fixture(scope="module")
def zyg(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("annotate-kill")
    (workdir / "pipeline.toml").write_text(PIPELINE)
    zygote_process = Zygote.spawn("tests.cli.test_annotate_kill", [], workdir / "zygote.err", workdir=workdir)
    with zygote_process:
        yield zygote_process
    lines = ", ".join(f"{fmt} {ref.lines}" for fmt, ref in _REFERENCES.items())
    print(f"\nannotate kill test: {', '.join(f'{k}: {v}' for k, v in sorted(TALLY.items()))}; lines of an "
          f"uninterrupted call: {lines}")


def _argv(out: str) -> list[str]:
    return ["annotate", "pipeline.toml", "--samples", str(SAMPLES), "--out", out, "--quiet"]


_REFERENCES: dict[str, Reference] = {}
#: How the interrupted commands ended (``killed``, ``interrupted``, ``finished`` before their point), per format,
#: and the reruns that ended with the uninterrupted output.
TALLY: Counter[str] = Counter()


def reference(zyg: Zygote, fmt: str) -> Reference:
    """The uninterrupted call's output for ``fmt`` (computed once)."""
    if fmt not in _REFERENCES:
        counts = zyg.workdir / f"lines-{fmt}.txt"
        outcome = zyg.run(_argv(f"reference.{fmt}"), count_to=counts)
        assert outcome.code == 0, outcome.stderr
        _REFERENCES[fmt] = Reference((zyg.workdir / f"reference.{fmt}").read_bytes(), int(counts.read_text()))
    return _REFERENCES[fmt]


def interrupt_then_rerun(zyg: Zygote, fmt: str, interruptions: list[tuple[str, float]]) -> list[str]:
    """Run the command interrupted at each ``(mode, fraction of the call's lines)``, then the same command until it
    finishes; check it ends with the reference output and nothing left beside it. Returns how each ended."""
    ref = reference(zyg, fmt)
    name = f"out{zyg.jobs}.{fmt}"
    out = zyg.workdir / name
    ended = []
    for mode, fraction in interruptions:
        outcome = zyg.run(_argv(name), mode=mode, line=1 + int(fraction * ref.lines))
        assert "Traceback" not in outcome.stderr, outcome.stderr
        if outcome.killed:
            ended.append("killed")
        elif outcome.code == 130:
            assert "interrupted" in outcome.stderr
            ended.append("interrupted")
        else:
            assert outcome.code == 0, outcome.stderr  # it finished before its interruption point
            ended.append("finished")
        TALLY[f"{fmt} {ended[-1]}"] += 1
    final = zyg.run(_argv(name))
    assert final.code == 0, final.stderr
    assert out.read_bytes() == ref.output, f"{name} differs from the uninterrupted call's output"
    assert sorted(p.name for p in zyg.workdir.glob(f"{name}*")) == [name]  # no partial, record or temp file left
    TALLY[f"{fmt} identical outputs"] += 1
    return ended


def _formats() -> list[str]:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return ["jsonl"]
    return ["jsonl", "parquet"]


@needs_fork
@pytest.mark.parametrize("mode", ["kill", "int"])
def test_an_interruption_in_the_first_chunk_is_continued_by_the_rerun(zyg: Zygote, mode: str) -> None:
    """Regression: a SIGKILL in the first chunk left a 0-byte OUT.partial that the rerun refused; a Ctrl-C left a
    header-only one, and the rerun wrote the header again (every task shifted by one row), and the Parquet output
    kept only the header's column. Interrupted at points spread over the start-up and the first chunk (of 3), the
    rerun now ends with the uninterrupted output."""
    for fmt, points in zip(_formats(), (6, 3), strict=False):
        for k in range(points):
            ended = interrupt_then_rerun(zyg, fmt, [(mode, 0.02 + 0.4 * k / (points - 1))])
            assert ended == ["killed" if mode == "kill" else "interrupted"], (fmt, k)


@needs_fork
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(_formats()),
       interruptions=st.lists(st.tuples(st.sampled_from(["kill", "int"]), st.floats(0.0, 0.999)), min_size=1,
                              max_size=3))
def test_property_any_kills_and_ctrl_c_then_the_rerun_give_the_uninterrupted_output(
    zyg: Zygote, fmt: str, interruptions: list[tuple[str, float]]
) -> None:
    """Property: SIGKILLs and Ctrl-Cs at any Python line of ``flexkit annotate`` (1 to 3 in a row), then the same
    command, always give the output of an uninterrupted call, byte for byte, and leave no partial file behind."""
    started = time.monotonic()
    interrupt_then_rerun(zyg, fmt, interruptions)
    assert time.monotonic() - started < 60
