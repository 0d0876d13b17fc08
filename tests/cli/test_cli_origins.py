"""``flexkit --version`` and ``flexkit plugins`` say where each distribution came from: an editable checkout and its
folder, a source folder, a wheel file, a ``git+`` URL or a package index (PEP 610's ``direct_url.json``)."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import flexkit
from flexkit.cli._registry import distribution_origin, origin_of
from flexkit.cli.main import main

PLUGIN = """\
from flexkit import hookimpl
from flexkit.scheduler.feedback import PassRateCalculator

@hookimpl
def flexkit_register_feedback(register):
    register("origin_rate", PassRateCalculator, description="A feedback operator of a fake distribution.")
"""


def _dist_info(folder: Path, name: str, version: str, direct_url: dict[str, object] | str | None) -> Path:
    """A ``NAME-VERSION.dist-info`` folder in ``folder``, with ``direct_url.json`` when given."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if direct_url is not None:
        text = direct_url if isinstance(direct_url, str) else json.dumps(direct_url)
        (info / "direct_url.json").write_text(text)
    return info


@pytest.mark.parametrize(("direct_url", "kind", "described"), [
    ({"url": "file:///src/flexkit", "dir_info": {"editable": True}}, "editable",
     "flexkit-rft 0.1.0: editable checkout /src/flexkit"),
    ({"url": "file:///src/flexkit", "dir_info": {}}, "folder",
     "flexkit-rft 0.1.0: installed from the source folder /src/flexkit"),
    ({"url": "file:///tmp/dist/flexkit_rft-0.1.0-py3-none-any.whl", "archive_info": {}}, "archive",
     "flexkit-rft 0.1.0: installed from the wheel /tmp/dist/flexkit_rft-0.1.0-py3-none-any.whl"),
    ({"url": "https://example.org/flexkit.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}, "vcs",
     "flexkit-rft 0.1.0: installed from git+https://example.org/flexkit.git@abc123"),
    (None, "index", "flexkit-rft 0.1.0: installed by name (a package index or --find-links)"),
    ("{not json", "unknown", "flexkit-rft 0.1.0: installed (unreadable direct_url.json)"),
    ({"url": "file:///src/flexkit", "dir_info": True}, "unknown",
     "flexkit-rft 0.1.0: installed (unreadable direct_url.json)"),
    ({"dir_info": {"editable": True}}, "unknown", "flexkit-rft 0.1.0: installed (unreadable direct_url.json)"),
])
def test_the_origin_of_a_distribution(tmp_path: Path, direct_url: dict[str, object] | str | None, kind: str,
                                      described: str) -> None:
    origin = origin_of(importlib.metadata.PathDistribution(_dist_info(tmp_path, "flexkit-rft", "0.1.0", direct_url)))
    assert origin.kind == kind
    assert origin.describe() == described


def test_a_distribution_that_is_not_installed() -> None:
    origin = distribution_origin("flexkit-rft-no-such-plugin")
    assert (origin.kind, origin.version) == ("missing", None)
    assert origin.describe() == "flexkit-rft-no-such-plugin: not installed (no distribution metadata)"


@pytest.fixture
def core_from_a_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The core's metadata says it was installed from a wheel file; returns that file's path."""
    wheel = f"/wheels/flexkit_rft-{flexkit.__version__}-py3-none-any.whl"
    info = _dist_info(tmp_path / "core", "flexkit-rft", flexkit.__version__,
                      {"url": f"file://{wheel}", "archive_info": {}})
    real = importlib.metadata.distribution

    def distribution(name: str) -> importlib.metadata.Distribution:
        return importlib.metadata.PathDistribution(info) if name == "flexkit-rft" else real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    return wheel


@pytest.fixture
def editable_plugin(fake_dist: Callable[..., Path]) -> Path:
    """A fake plugin distribution ``origin-dist`` 2.0, installed editable from ``/src/origin-dist``."""
    site = fake_dist("origin-dist", {"origin_mod": PLUGIN}, {"origin": "origin_mod"}, version="2.0")
    (site / "origin_dist-2.0.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": "file:///src/origin-dist", "dir_info": {"editable": True}}))
    return site


def test_version_names_each_distribution_and_where_flexkit_is_imported_from(
        core_from_a_wheel: str, editable_plugin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"flexkit {flexkit.__version__}"
    assert f"  flexkit-rft {flexkit.__version__}: installed from the wheel {core_from_a_wheel}" in lines
    assert "  origin-dist 2.0: editable checkout /src/origin-dist" in lines
    assert lines[-1] == f"  imports flexkit from {Path(flexkit.__file__).parent}"


def test_plugins_lists_where_each_distribution_came_from(core_from_a_wheel: str, editable_plugin: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    listed = out.split("distributions:\n", 1)[1].splitlines()
    assert f"  flexkit-rft {flexkit.__version__}: installed from the wheel {core_from_a_wheel}" in listed
    assert "  origin-dist 2.0: editable checkout /src/origin-dist" in listed

    assert main(["plugins", "--json"]) == 0
    rows = {(r["stage"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[("feedback", "origin_rate")]["origin"] == {"kind": "editable", "location": "/src/origin-dist"}
    assert rows[("feedback", "pass_rate_calculator")]["origin"] == {"kind": "archive", "location": core_from_a_wheel}


def test_a_local_plugin_has_no_distribution_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "local_hooks.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    assert main(["plugins", "--json", "--plugin", "local_hooks.py"]) == 0
    rows = {(r["stage"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[("feedback", "origin_rate")]["distribution"] is None
    assert rows[("feedback", "origin_rate")]["origin"] is None


def test_regression_a_plugin_distribution_without_components_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A distribution that requires the core but registers no component (as ``flexkit-rft-ray``) used to be left out
    of ``flexkit --version`` and ``flexkit plugins``; one that does not require the core is still left out."""
    site = tmp_path / "site"
    actor = _dist_info(site, "Flexkit_RFT-actor", "3.0", {"url": "file:///src/actor", "dir_info": {"editable": True}})
    (actor / "METADATA").write_text((actor / "METADATA").read_text()
                                    + "Requires-Dist: ray>=2.9\nRequires-Dist: flexkit-rft<0.2,>=0.1.0\n")
    other = _dist_info(site, "unrelated", "1.0", None)
    (other / "METADATA").write_text((other / "METADATA").read_text() + "Requires-Dist: flexkit-rft-actor\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(SystemExit):
        main(["--version"])
    version = capsys.readouterr().out.splitlines()
    assert main(["plugins"]) == 0
    listed = capsys.readouterr().out.split("distributions:\n", 1)[1].splitlines()
    for lines in (version, listed):
        assert "  Flexkit_RFT-actor 3.0: editable checkout /src/actor" in lines
        assert not any("unrelated" in line for line in lines)
