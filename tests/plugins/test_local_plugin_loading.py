"""Local plugins that exit, are directories or FIFOs, or are named as missing modules: each is a reported
plugin failure with a clear reason, never a silent exit or a misleading "no such file"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from flexkit.errors import ConfigError
from flexkit.pipeline._pipeline import pipeline_from_dict
from flexkit.plugins._manager import load_local_module

TASKSETS = [{"name": "a", "path": "a.jsonl"}]


def pipeline_error(tmp_path: Path, plugins: list[str]) -> ConfigError:
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n')
    with pytest.raises(ConfigError) as info:
        pipeline_from_dict({"plugins": plugins, "run": {"batch_size": 1}, "tasksets": TASKSETS}, base_dir=tmp_path)
    return info.value


@pytest.mark.parametrize(("code", "shown"), [("sys.exit(0)", "sys.exit(0)"), ("sys.exit('bye')", "sys.exit('bye')"),
                                             ("raise SystemExit", "sys.exit(None)")])
def test_a_plugin_that_exits_on_import_is_a_plugin_failure(tmp_path: Path, code: str, shown: str) -> None:
    (tmp_path / "quits.py").write_text(f"import sys\n{code}\n")
    error = pipeline_error(tmp_path, ["./quits.py"])
    assert [i.path for i in error.issues] == ["plugins[0]"]
    assert f"ImportError: the plugin called {shown} while it was imported" in error.issues[0].message
    assert not [m for m in sys.modules if m.startswith("flexkit_local_quits_")]


def test_a_module_that_exits_on_import_is_a_plugin_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "quits_by_name_g2.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"called sys.exit\(3\)"):
        load_local_module("quits_by_name_g2")


def test_other_base_exceptions_are_plugin_failures_but_ctrl_c_is_not(tmp_path: Path) -> None:
    (tmp_path / "odd.py").write_text("class Odd(BaseException):\n    pass\nraise Odd('strange')\n")
    with pytest.raises(ImportError, match="the plugin raised Odd while it was imported: strange"):
        load_local_module("./odd.py", tmp_path)
    (tmp_path / "ctrl_c.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_local_module("./ctrl_c.py", tmp_path)


def test_a_directory_plugin_path_says_it_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "plain_dir").mkdir()
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    error = pipeline_error(tmp_path, ["./plain_dir", "./my_pkg"])
    first, second = (i.message for i in error.issues)
    assert "IsADirectoryError" in first and "is a directory, not a .py file" in first
    assert "no such file" not in first
    assert "is a directory (a package)" in second and 'plugins = ["my_pkg"]' in second
    assert f"{tmp_path} on PYTHONPATH" in second


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_plugin_path_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "hooks.py")
    with pytest.raises(OSError, match=r"is a FIFO \(named pipe\), not a regular \.py file"):
        load_local_module("./hooks.py", tmp_path)


def test_a_missing_plugin_file_is_still_no_such_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_local_module("./missing.py", tmp_path)


def test_a_missing_module_name_hints_the_path_form(tmp_path: Path) -> None:
    (tmp_path / "my_hooks_g2c.py").write_text("VALUE = 1\n")
    error = pipeline_error(tmp_path, ["my_hooks_g2c", "some_pkg_g2c.hooks"])
    first, second = (i.message for i in error.issues)
    assert "ModuleNotFoundError: No module named 'my_hooks_g2c'" in first
    assert 'plugins = ["./my_hooks_g2c.py"]' in first and f"{tmp_path / 'my_hooks_g2c.py'} exists" in first
    assert 'plugins = ["./some_pkg_g2c/hooks.py"]' in second and "exists" not in second


def test_a_plugin_missing_a_dependency_gets_no_path_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_dep_g2c.py").write_text("import not_installed_dependency_g2c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        load_local_module("needs_dep_g2c")
    assert "not_installed_dependency_g2c" in str(info.value) and "plugins = [" not in str(info.value)


def test_an_installed_plugin_that_exits_is_reported_and_the_others_keep_working(fake_dist) -> None:
    """Regression: entry-point plugins that call sys.exit() on import or while registering ended the process."""
    from flexkit.plugins._manager import PluginHost

    fake_dist("quits-on-import", {"quits_on_import": "import sys\nsys.exit(0)\n"}, {"quits": "quits_on_import"})
    fake_dist("quits-on-register", {"quits_on_register": (
        "import sys\nfrom flexkit import hookimpl\n\n@hookimpl\ndef flexkit_register_selectors(register):\n"
        "    sys.exit(2)\n")}, {"quits_later": "quits_on_register"})
    host = PluginHost.load()
    failures = {f.plugin: (f.phase, f.error) for f in host.failures}
    assert failures["quits"] == ("import", "ImportError: the plugin called sys.exit(0) while it was imported")
    assert failures["quits_later"][0] == "register" and "sys.exit(2)" in failures["quits_later"][1]
    assert "random" in host.names("selector")
