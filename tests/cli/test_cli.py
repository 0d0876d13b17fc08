"""The command line: plugins, validate, schema, version; errors as reports, never tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import flexkit
from flexkit.cli.main import main
from tests.fixtures import ROOT

THREE_MISTAKES = """\
[run]
batch_size = 8
sed = 1

[[tasksets]]
name = "m"
path = "m.jsonl"
weight = "2"

[tasksets.selector]
type = "shuffle"
tau = -1
"""


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flexkit", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=120)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.splitlines()[0] == f"flexkit {flexkit.__version__}"  # then where it came from


def test_plugins_json_lists_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {(r["stage"], r["name"]): r for r in rows}
    row = by_name[("feedback", "pass_rate_calculator")]
    assert row["plugin"] == "flexkit.plugins.builtins" and row["distribution"] == "flexkit-rft"
    assert row["version"] == flexkit.__version__
    assert {"name", "stage", "plugin", "distribution", "version"} <= set(row)


def test_plugins_table_and_reported_failures(fake_dist, capsys: pytest.CaptureFixture[str]) -> None:
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    assert main(["plugins"]) == 1  # the list is printed, and the exit status says a plugin failed
    out, err = capsys.readouterr()
    assert "feedback:" in out and "pass_rate_calculator" in out
    assert "broken-dist" in err and "boom" in err


def test_validate_reports_all_mistakes_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(THREE_MISTAKES)
    result = run_cli("validate", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert f"{path}: run.sed: unknown key (did you mean 'seed'?)" in lines[0]
    assert any("tasksets[0].weight: expected a number, got string '2'" in line for line in lines)
    assert any("tasksets[0].selector.tau: unknown key for selector 'shuffle'" in line for line in lines)


def test_validate_reports_toml_syntax_with_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[run]\nbatch_size = 4\n[[tasksets]\n")
    result = run_cli("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path}: line 3, column" in result.stderr and "TOML syntax error" in result.stderr


def test_validate_describes_valid_files(capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.toml"))
    assert examples
    assert main(["validate", *examples]) == 0
    out = capsys.readouterr().out
    for example in examples:
        assert f"{example}: valid" in out
    assert "selector" in out and "batch_size=" in out


def test_validate_with_plugin_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = tmp_path / "my_hooks.py"
    hooks.write_text("from flexkit import hookimpl\nfrom flexkit.scheduler.feedback import PassRateCalculator\n"
                     "@hookimpl\ndef flexkit_register_feedback(register):\n"
                     "    register('my_rate', PassRateCalculator)\n")
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n')
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 1\n[[tasksets]]\nname = "a"\npath = "a.jsonl"\n[feedback]\ntype = "my_rate"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(path)]) == 1
    assert "unknown feedback 'my_rate'" in capsys.readouterr().err
    assert main(["validate", "--plugin", "my_hooks.py", str(path)]) == 0


def test_schema_stdout_is_clean_json() -> None:
    result = run_cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"


def test_schema_check_passes_on_main_and_fails_when_stale(tmp_path: Path) -> None:
    assert run_cli("schema", "--check").returncode == 0
    stale = tmp_path / "stale.json"
    stale.write_text("{}\n")
    result = run_cli("schema", "--check", "--output", str(stale))
    assert result.returncode == 1
    assert "flexkit schema --output schemas/pipeline.schema.json" in result.stderr


def test_help_for_each_command() -> None:
    for command in ("plugins", "validate", "schema"):
        result = run_cli(command, "--help")
        assert result.returncode == 0 and "usage: flexkit" in result.stdout


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: flexkit" in capsys.readouterr().out


def test_json_log_format_goes_to_stderr(fake_dist) -> None:
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    site = str(next(p for p in sys.path if p.endswith("site")))
    env_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {site!r}); from flexkit.cli.main import main; "
               "sys.exit(main(['--log-format', 'json', 'schema']))"]
    result = subprocess.run(env_cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0
    json.loads(result.stdout)  # stdout holds only the schema
    log_lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert any(line.get("event") == "plugin_failed" and line.get("distribution") == "broken-dist"
               for line in log_lines)


def test_preview_prints_each_steps_mix_and_indices(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "minimal.toml")
    assert main(["preview", example, "--steps", "3", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    seen = [i for r in records for i in r["tasksets"]["arithmetic"]]
    assert len(seen) == 24 and len(set(seen)) == 24  # shuffle: no repeats within an epoch


def test_preview_feedback_from_a_row_field_steers_difficulty_based(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "multi_taskset_difficulty.toml")
    assert main(["preview", example, "--steps", "2", "--feedback", "weak_pass_rate", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all("feedback" in r for r in records)
    part = records[0]["feedback"]["0"]
    assert sorted(part["indices"]) == sorted(set(records[0]["tasksets"]["arithmetic"]))


def test_preview_reports_a_missing_feedback_field(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "minimal.toml")
    assert main(["preview", example, "--steps", "1", "--feedback", "nope"]) == 1
    assert "no finite numeric field 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
def test_regression_preview_feedback_from_a_non_finite_field_is_a_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    rows = [f'{{"prompt": "p{i}", "p": {value if i == 1 else 0.5}}}' for i in range(6)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.toml").write_text('[run]\nbatch_size = 6\ntotal_steps = 2\n\n[[tasksets]]\nname = "t"\n'
                                     'path = "tasks.jsonl"\n')
    assert main(["preview", str(tmp_path / "p.toml"), "--steps", "2", "--feedback", "p"]) == 1
    assert "task 1 of 't' has no finite numeric field 'p'" in capsys.readouterr().err


def test_preview_stops_at_the_end_of_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "minimal.toml")  # 64 tasks, batch 8, 2 epochs = 16 steps
    assert main(["preview", example, "--steps", "40", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 16 and "run ends after 16 steps" in err


def test_validate_names_taskset_problems(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "empty.jsonl").write_text("")
    path = tmp_path / "p.toml"
    path.write_text(
        '[run]\nbatch_size = 1\n'
        '[[tasksets]]\nname = "gone"\npath = "missing.jsonl"\n'
        '[[tasksets]]\nname = "a"\npath = "a.jsonl"\n[tasksets.selector]\ntype = "offline_easy2hard"\n'
        'feature_keys = ["y"]\n'
        '[[tasksets]]\nname = "e"\npath = "empty.jsonl"\n'
    )
    result = run_cli("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3
    assert "tasksets[0]: taskset 'gone'" in lines[0] and "no such file" in lines[0]
    assert "tasksets[1]: taskset 'a'" in lines[1] and "'y'" in lines[1]
    assert "tasksets[2]: taskset 'e'" in lines[2] and "empty" in lines[2]


def test_regression_validate_checks_what_the_trainer_will_read(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """flexkit validate passed a simulator pipeline over rows without a difficulty, which flexkit run refused at
    once: validate now asks the trainer to check what its setup reads (Trainer.check_setup)."""
    (tmp_path / "t.jsonl").write_text('{"x": 1}\n' * 8)
    path = tmp_path / "p.toml"
    path.write_text('[run]\nbatch_size = 4\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\n'
                    '[trainer]\ntype = "simulator"\n')
    assert main(["validate", str(path)]) == 1
    assert "the simulator needs a numeric 'difficulty' in every task row; task 0 of 't'" in capsys.readouterr().err


def test_regression_validate_and_preview_take_set_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    """flexkit validate and preview had no --set, so a compare setting or a run's --set could not be checked."""
    quickstart = str(ROOT / "examples" / "quickstart.toml")
    assert main(["validate", quickstart, "--set", "run.batch_size=0"]) == 1
    assert "run.batch_size" in capsys.readouterr().err
    assert main(["validate", quickstart, "--set", 'tasksets.0.selector={type="random"}']) == 0
    assert "random" in capsys.readouterr().out
    assert main(["preview", quickstart, "--steps", "1", "--json", "--set", "run.batch_size=8"]) == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[0])["tasksets"]["addition"]) == 8
