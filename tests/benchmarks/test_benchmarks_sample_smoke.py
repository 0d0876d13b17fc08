"""Smoke tests of benchmarks/sample_stage.py and benchmarks/scheduler.py in their quick modes: they run (the sample
stage one checks its own results against the loop
reference) and report a row per case; no timing is asserted."""

from __future__ import annotations

from tests.benchmarks.loading import benchmark_module


def test_sample_stage_benchmark_quick_mode() -> None:
    with benchmark_module("sample_stage.py") as module:
        rows = module.run(quick=True)
        assert {(r["case"], r["mask"]) for r in rows} == {
            (case, mask) for case in ("group_solve_rate", "stage: solve rate + band + token weights")
            for mask in ("int64", "bool")
        }
        assert all(r["flexkit_ms"] > 0 and r["loop_ms"] > 0 for r in rows)


def test_scheduler_benchmark_quick_mode(capsys) -> None:
    with benchmark_module("scheduler.py") as module:
        assert module.main(["--quick", "--train-ms", "5"]) == 0
        out = capsys.readouterr().out
        assert "8 tasksets" in out and "\non " in out and "\noff " in out


def test_overhead_benchmark_quick_mode(capsys) -> None:
    import pytest

    pytest.importorskip("flexkit_toyrl")
    with benchmark_module("overhead.py") as module:
        result = module.run(quick=True)
        assert set(result["median_ms"]) == {"read", "feedback_wait", "feedback_thread", "sample_stage", "rollout",
                                            "advantages", "update"}
        assert 0 < result["flexkit_share_median"] < 1
        assert module.main(["--quick"]) == 0 and "flexkit share of a step" in capsys.readouterr().out


def test_all_benchmarks_in_one_command_quick(tmp_path, capsys) -> None:
    with benchmark_module("all.py") as module:
        assert module.main(["--quick", "--json-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert all(f"== benchmarks/{name}.py ==" in out for name in module.BENCHMARKS)
        assert {"run.json", "sample_stage.json", "scheduler.json"} <= {p.name for p in tmp_path.iterdir()}
