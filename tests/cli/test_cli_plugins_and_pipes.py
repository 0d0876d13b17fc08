"""The command line as a Unix tool and a plugin host: output cut by the reader, ``--plugin`` on every command that
loads plugins, the exit status of ``flexkit plugins``, and where a first-party component comes from."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexkit import ConfigError
from flexkit.cli.main import EXIT_OUTPUT_CUT, main
from flexkit.plugins._manager import FIRST_PARTY, PluginHost
from tests.fixtures import ROOT

HOOKS = """\
from flexkit import hookimpl
from flexkit.scheduler.feedback import PassRateCalculator

@hookimpl
def flexkit_register_feedback(register):
    register("my_rate", PassRateCalculator, description="A local feedback operator.")
"""


def _with_output_cut(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m flexkit ARGS`` with its stdout a pipe whose reader is already gone."""
    proc = subprocess.Popen([sys.executable, "-m", "flexkit", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the command writes anything, as `| head` does after a line
    err = proc.stderr.read()
    proc.stderr.close()
    return subprocess.CompletedProcess(proc.args, proc.wait(timeout=120), b"", err)


@pytest.mark.parametrize("args", [("plugins",), ("schema",), ("preview", "examples/minimal.toml", "--steps", "20"),
                                  ("run", "--help")])
def test_a_cut_output_ends_quietly(args: tuple[str, ...]) -> None:
    result = _with_output_cut(*args)
    assert b"Traceback" not in result.stderr and b"BrokenPipe" not in result.stderr, result.stderr.decode()
    # argparse's help ignores the cut on Python 3.11+ (exit 0); on 3.10 the interpreter's final flush meets the
    # closed pipe and the process ends by SIGPIPE's convention (141), still with no traceback: both are clean.
    assert result.returncode in ((0, EXIT_OUTPUT_CUT) if "--help" in args else (EXIT_OUTPUT_CUT,))


def test_head_sees_clean_output() -> None:
    result = subprocess.run(f"{sys.executable} -m flexkit plugins | head -1", shell=True, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout == "selector:\n" and "Traceback" not in result.stderr


def test_plugins_and_schema_take_the_plugin_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    monkeypatch.chdir(tmp_path)
    assert main(["plugins", "--json", "--plugin", "my_hooks.py"]) == 0
    rows = {(r["stage"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[("feedback", "my_rate")]["plugin"] == "my_hooks.py"
    assert rows[("feedback", "my_rate")]["distribution"] is None

    assert main(["schema", "--plugin", "my_hooks.py", "--output", "my.schema.json"]) == 0
    schema = (tmp_path / "my.schema.json").read_text()
    assert "my_rate" in schema and "A local feedback operator." in schema
    assert main(["schema"]) == 0
    assert "my_rate" not in capsys.readouterr().out  # only with --plugin


def test_a_plugin_option_that_does_not_load_names_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plugins", "--plugin", "no_such_hooks"]) == 1
    err = capsys.readouterr().err
    assert "--plugin[0]: cannot load plugin 'no_such_hooks'" in err and "Traceback" not in err
    assert main(["schema", "--plugin", "missing.py"]) == 1
    assert "--plugin[0]" in capsys.readouterr().err


def test_plugins_exits_non_zero_when_a_plugin_failed(fake_dist, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    capsys.readouterr()
    fake_dist("broken-dist", {"broken_mod": "raise RuntimeError('boom')"}, {"broken": "broken_mod"})
    assert main(["plugins", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) and "broken-dist" in err  # the others are still listed


def test_a_first_party_component_names_its_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    host = PluginHost.load(entry_points=False)  # as if no plugin distribution were installed
    real = importlib.metadata.distribution

    def not_installed(name: str) -> importlib.metadata.Distribution:
        if name in set(FIRST_PARTY.values()):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(ConfigError) as info:
        host.component("storage", "arithmetic")
    message = str(info.value)
    assert message.startswith("unknown storage 'arithmetic'; registered: file, simulated")
    assert ("flexkit-rft-toyrl, which is not installed: from a flexkit checkout, pip install -e "
            "plugins/flexkit-rft-toyrl; after the 0.1.0 release, pip install flexkit-rft-toyrl" in message)
    with pytest.raises(ConfigError, match="pip install -e plugins/flexkit-rft-toyrl"):
        host.component("trainer", "toyrl")
    with pytest.raises(ConfigError) as info:
        host.component("storage", "nonesuch")
    assert "comes with" not in str(info.value)  # no hint for names no first-party distribution provides


def test_a_first_party_distribution_left_out_by_the_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXKIT_LOAD_PLUGINS", "")
    host = PluginHost.load()
    with pytest.raises(ConfigError, match="flexkit-rft-toyrl, which FLEXKIT_LOAD_PLUGINS='' does not load"):
        host.component("storage", "arithmetic")
