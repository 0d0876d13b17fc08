"""``flexkit validate`` as a check that can be trusted: every row is read, a plugin cannot end it silently,
and an untrusted pipeline's own plugins can be refused (``--no-pipeline-plugins``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flexkit.cli.main import main
from flexkit.config._loader import ENV_NO_PIPELINE_PLUGINS
from tests.fixtures import ROOT

PIPELINE = '[run]\nbatch_size = 2\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\n'
#: A plugin that leaves a trace when its code runs.
TRACING_PLUGIN = "from pathlib import Path\nPath(__file__).with_suffix('.ran').write_text('ran')\n"


@pytest.fixture(autouse=True)
def _switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv (not delenv, which records nothing when the variable is absent) so that teardown removes whatever
    # `--no-pipeline-plugins` set in this process
    monkeypatch.setenv(ENV_NO_PIPELINE_PLUGINS, "")


def write_pipeline(tmp_path: Path, rows: int = 10, extra: str = "") -> Path:
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(rows)))
    path = tmp_path / "p.toml"
    path.write_text(extra + PIPELINE)
    return path


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flexkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


# -- a plugin cannot end validate silently --------------------------------------------------------------


def test_validate_reports_a_plugin_that_exits_on_import(tmp_path: Path) -> None:
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n")
    path = write_pipeline(tmp_path, extra='plugins = ["./quits.py"]\n')
    result = run_cli("validate", str(path), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path}: plugins[0]: cannot load plugin './quits.py'" in result.stderr
    assert "the plugin called sys.exit(0) while it was imported" in result.stderr
    assert "valid" not in result.stdout


# -- validate reads every row ------------------------------------------------------------------------------


def test_validate_says_every_row_was_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(write_pipeline(tmp_path, rows=1000))]) == 0
    assert "rows: every row read and parsed (t: 1000)" in capsys.readouterr().out


def test_validate_finds_a_malformed_line_in_the_middle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_pipeline(tmp_path, rows=1000)
    lines = (tmp_path / "t.jsonl").read_bytes().splitlines(keepends=True)
    lines[500] = b'{"id": 500, "text": "unterminated}\n'
    (tmp_path / "t.jsonl").write_bytes(b"".join(lines))
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "valid" not in out
    assert f"{path}: tasksets[0]: taskset 't' ({tmp_path / 't.jsonl'}): line 501: invalid JSON" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[{"id": 1}, {"id": 2}, {"id": 3}]\n', "line 1: a row must be a JSON object, got list"),
        ('{"id": 1}\n{"id": 2}\n{"id": 3}\n'.encode("utf-16"), "UTF-16 LE byte-order mark"),
        ('{"id": 1}\n{"id": 2}\n{"id": 3}\n'.encode("utf-16-le"), "line 1: invalid JSON: a NUL byte"),
    ],
)
def test_validate_refuses_files_that_are_not_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         content: bytes, message: str) -> None:
    path = write_pipeline(tmp_path)
    (tmp_path / "t.jsonl").write_bytes(content)
    assert main(["validate", str(path)]) == 1
    assert f"{path}: tasksets[0]: taskset 't'" in (err := capsys.readouterr().err) and message in err


# -- an untrusted pipeline's own plugins can be refused ------------------------------------------------------


def test_no_pipeline_plugins_flag_refuses_without_running_code(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "evil.py").write_text(TRACING_PLUGIN)
    path = write_pipeline(tmp_path, extra='plugins = ["./evil.py", "evil"]\n')
    assert main(["validate", "--no-pipeline-plugins", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: plugins: not imported: {ENV_NO_PIPELINE_PLUGINS} is set (--no-pipeline-plugins)" in err
    assert "'./evil.py', 'evil'" in err
    assert not (tmp_path / "evil.ran").exists()
    assert os.environ[ENV_NO_PIPELINE_PLUGINS] == "1"  # the flag sets it for the process and the runs it starts
    monkeypatch.setenv(ENV_NO_PIPELINE_PLUGINS, "")
    assert main(["validate", str(path)]) == 1  # without the switch the code runs (then 'evil' is not found)
    assert (tmp_path / "evil.ran").exists()


def test_environment_switch_covers_preview_and_module_names_in_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "evil.py").write_text(TRACING_PLUGIN)
    path = write_pipeline(tmp_path, extra='plugins = ["evil"]\n')
    # `python -m flexkit` puts the working directory on sys.path: a bare name would import ./evil.py
    result = run_cli("preview", str(path), "--steps", "1", cwd=tmp_path, env={ENV_NO_PIPELINE_PLUGINS: "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "plugins: not imported" in result.stderr and not (tmp_path / "evil.ran").exists()
    result = run_cli("preview", str(path), "--steps", "1", cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "evil.ran").exists()


def test_the_switch_still_loads_plugins_given_on_the_command_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trusted.py").write_text(TRACING_PLUGIN)
    path = write_pipeline(tmp_path)
    assert main(["validate", "--no-pipeline-plugins", "--plugin", str(tmp_path / "trusted.py"), str(path)]) == 0
    assert (tmp_path / "trusted.ran").exists()
    assert main(["validate", str(path)]) == 0  # a pipeline without plugins is unaffected by the switch


@pytest.mark.parametrize("command", ["validate", "run", "preview", "annotate", "compare"])
def test_every_pipeline_command_has_the_switch(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--no-pipeline-plugins" in capsys.readouterr().out
