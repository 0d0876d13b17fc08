"""Every distribution of this repository carries the metadata a release needs (readme, licence, Python versions,
links), and CI installs the built wheels, not the checkout (``.ci/wheels``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The newest Python version the distributions declare and CI is meant to cover.
NEWEST_PYTHON = (3, 13)

PROJECTS = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))["project"]


def _python_versions(requires_python: str) -> list[str]:
    match = re.fullmatch(r">=\s*3\.(\d+)", requires_python.strip())
    assert match, f"requires-python {requires_python!r}: expected '>=3.N'"
    return [f"3.{minor}" for minor in range(int(match.group(1)), NEWEST_PYTHON[1] + 1)]


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.parent.name if p.parent != ROOT else "core")
def test_a_distribution_has_release_metadata(path: Path) -> None:
    project = _project(path)
    folder = path.parent
    assert (folder / project["readme"]).is_file()  # the index page shows it
    assert project["license"] == "Apache-2.0"
    for licence in project["license-files"]:
        assert (folder / licence).read_text(encoding="utf-8") == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert project["description"] and project["authors"] and project["keywords"]
    classifiers = set(project["classifiers"])
    for version in _python_versions(project["requires-python"]):
        assert f"Programming Language :: Python :: {version}" in classifiers, f"{path}: {version} not declared"
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression replaces them
    urls = project["urls"]
    assert {"Homepage", "Documentation", "Source", "Changelog", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    assert project.get("version") or "version" in project.get("dynamic", [])


def test_the_core_sdist_leaves_the_plugin_distributions_out() -> None:
    sdist = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]["targets"]
    assert "/plugins" in sdist["sdist"]["exclude"]


def _test_command(lines: list[str]) -> list[str]:
    """The README's test command at the end of ``.ci/run``: from its first line to the last, each but the last
    continued with a backslash."""
    start = max(i for i, line in enumerate(lines) if line.startswith("python3 -m venv .venv && "))
    command = lines[start:]
    assert all(line.endswith(" \\") for line in command[:-1]) and not command[-1].endswith("\\"), command
    assert all(len(line) <= 120 for line in command), "keep the README's test command readable: split long lines"
    return command


def test_ci_runs_the_readme_test_command_then_the_built_wheels() -> None:
    command = _test_command((ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines())
    joined = " ".join(line.removesuffix("\\").strip() for line in command)  # as bash reads it
    assert joined.startswith("python3 -m venv .venv && ") and "pytest" in joined
    assert joined.endswith(" && .ci/wheels && .ci/pythons")  # the suites, the built wheels, the other Pythons
    assert "  " not in joined
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(readme) if line == command[0]]
    assert any(readme[i:i + len(command)] == command for i in starts), "README.md lacks .ci/run's command, verbatim"


def test_ci_runs_the_built_wheels() -> None:
    wheels = ROOT / ".ci" / "wheels"
    assert os.access(wheels, os.X_OK)
    script = wheels.read_text(encoding="utf-8")
    assert "set -euo pipefail" in script and "unset PYTHONPATH" in script
    assert '"$root"/plugins/*/' in script  # every plugin distribution is built
    assert "twine\" check --strict" in script
    torch_at = script.index("install -q --no-compile torch==2.13.0")
    assert torch_at < script.index('"$tmp"/dist/flexkit_rft-*.whl')  # torch first, as the README installs it
    assert " -e " not in script and "--editable" not in script
    assert 'cd "$tmp/work"' in script  # not from the checkout
    assert re.search(r"flexkit\" plugins", script) and "flexkit\" run \"$root/examples/quickstart.toml\"" in script
    # after the wheels' install, before anything runs: no CUDA package came with them, and --version names the wheel
    no_cuda = script.index('"$tmp/venv/bin/python" "$root/.ci/no_cuda.py"')
    assert script.index('"$tmp"/dist/flexkit_rft-*.whl') < no_cuda < script.index('cd "$tmp/work"')
    assert re.search(r'flexkit" --version .*\n.*installed from the wheel', script)


def _fake_distributions(site: Path, *names: str) -> None:
    for name in names:
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")


def _no_cuda(site: Path) -> subprocess.CompletedProcess[str]:
    """The check over ``site`` alone: what the running environment holds (a CUDA torch on Python 3.10, say) must not
    leak into the verdict."""
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "no_cuda.py"), str(site)], capture_output=True,
                          text=True, timeout=60)


def test_the_wheels_cuda_check_names_each_cuda_package(tmp_path: Path) -> None:
    _fake_distributions(tmp_path, "nvidia-cublas-cu12", "nvidia_cuda_runtime_cu12", "triton", "tritonclient",
                        "nvidiax")
    done = _no_cuda(tmp_path)
    assert done.returncode == 1
    assert "CUDA packages on top of torch's CPU build: nvidia-cublas-cu12, nvidia-cuda-runtime-cu12, triton " in (
        done.stderr)


def test_the_wheels_cuda_check_passes_a_cpu_environment(tmp_path: Path) -> None:
    _fake_distributions(tmp_path, "tritonclient", "nvidiax")  # names that only look alike
    done = _no_cuda(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no CUDA package" in done.stdout


def test_regression_the_cuda_check_of_a_folder_ignores_the_running_environment(tmp_path: Path) -> None:
    """On Python 3.10 CI's venv holds torch's CUDA build; the check of a folder of fake distributions read the whole
    environment and named its real nvidia-* packages."""
    clean, cuda = tmp_path / "clean", tmp_path / "cuda"
    _fake_distributions(clean, "numpy")
    _fake_distributions(cuda, "nvidia-nccl-cu13")
    env = {**os.environ, "PYTHONPATH": str(cuda)}  # the running environment now "has" a CUDA package
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "no_cuda.py"), str(clean)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    whole = subprocess.run([sys.executable, str(ROOT / ".ci" / "no_cuda.py")], env=env, capture_output=True,
                           text=True, timeout=60)
    assert whole.returncode == 1 and "nvidia-nccl-cu13" in whole.stderr


@pytest.mark.parametrize(("plugin", "extras"), [("flexkit-rft-verl", ("verl", "test")),
                                                ("flexkit-rft-trinity", ("trinity", "test"))])
def test_extras_that_pull_ray_default_cap_virtualenv(plugin: str, extras: tuple[str, ...]) -> None:
    """verl and Trinity-RFT pull ray[default] (virtualenv) and tensordict's pyvers (packaging<26); without a cap pip
    tries every virtualenv release that needs packaging>=26.3 before 21.14.5 (the install speed of the README's
    test command)."""
    optional = _project(ROOT / "plugins" / plugin / "pyproject.toml")["optional-dependencies"]
    for extra in extras:
        assert "virtualenv<21.14.6" in optional[extra], (plugin, extra)


def test_plugins_require_the_core_release_they_are_built_with() -> None:
    """Every plugin pins the core to its own minor series (``flexkit-rft>=X.Y.Z,<X.Y+1``), the one it ships with."""
    import flexkit

    major, minor, _patch = (int(part) for part in flexkit.__version__.split(".")[:3])
    wanted = f"flexkit-rft>={flexkit.__version__},<{major}.{minor + 1}"
    for path in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        dependencies = tomllib.loads(path.read_text(encoding="utf-8"))["project"]["dependencies"]
        assert wanted in dependencies, f"{path}: {dependencies}"
        assert tomllib.loads(path.read_text(encoding="utf-8"))["project"]["version"] == flexkit.__version__, path


def test_ci_runs_the_core_suite_on_the_oldest_and_newest_declared_python() -> None:
    script = (ROOT / ".ci" / "pythons").read_text(encoding="utf-8")
    assert os.access(ROOT / ".ci" / "pythons", os.X_OK)
    assert "set -euo pipefail" in script and "unset PYTHONPATH" in script
    declared = sorted(re.findall(r"Programming Language :: Python :: (3\.\d+)",
                                 (ROOT / "pyproject.toml").read_text(encoding="utf-8")), key=lambda v: int(v[2:]))
    listed = subprocess.run(["bash", "-c", "grep -o 'Programming Language :: Python :: 3\\.[0-9]*' pyproject.toml "
                             "| sed 's/.*:: //' | sort -t. -k2 -n"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert (listed[0], listed[-1]) == (declared[0], declared[-1])  # the pipeline the script runs picks them
    assert 'torch==2.13.0' in script and '"$clone[test]"' in script



def test_the_test_extra_runs_pytest_n() -> None:
    """``pytest -n N`` (and ``-n 0``) needs pytest-xdist, which ``pip install -e ".[test]"`` lacked."""
    extra = _project(ROOT / "pyproject.toml")["optional-dependencies"]["test"]
    assert any(re.match(r"pytest-xdist\b", requirement) for requirement in extra), extra


def test_the_trl_plugin_pins_the_minor_series_its_guide_names() -> None:
    """The plugin overrides TRL's private methods: trl and transformers are pinned to the minor series it is tested
    with (transformers was unpinned), and docs/integrations/trl.md names the same bounds."""
    dependencies = _project(ROOT / "plugins" / "flexkit-rft-trl" / "pyproject.toml")["dependencies"]
    guide = (ROOT / "docs" / "integrations" / "trl.md").read_text(encoding="utf-8")
    for name in ("trl", "transformers"):
        pins = [d for d in dependencies if re.match(rf"{name}>=\d+\.\d+,<\d+\.\d+$", d)]
        assert len(pins) == 1, (name, dependencies)
        assert f"`{pins[0]}`" in guide, pins[0]
