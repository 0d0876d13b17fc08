"""The rules of the docs tests (tests/docs/doc_examples.py), on small pages written here."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sybil", reason="the docs tests need Sybil (the test extra: pip install -e '.[test]')")

from sybil import Document

from flexkit.errors import ConfigError
from tests.docs.doc_examples import as_pipeline, file_header, parsers

FENCE = "```"


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> list[str]:
    """Run every block of a page; returns the skip reasons met."""
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    skipped = []
    for example in Document.parse(str(page), *parsers()):
        try:
            example.evaluate()
        except pytest.skip.Exception as exc:
            skipped.append(str(exc))
        except Exception as exc:
            if type(exc).__name__ != "SkipTest":
                raise
            skipped.append(str(exc))
    return skipped


def test_blocks_share_a_namespace_and_named_files_are_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path, monkeypatch, f"{FENCE}python\n# made.py\nVALUE = 3\n{FENCE}\n\n"
                                f"{FENCE}python\nassert VALUE == 3\n{FENCE}\n")
    assert (tmp_path / "made.py").read_text() == "# made.py\nVALUE = 3\n"


def test_a_page_plugin_validates_its_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = ("# hooks.py\nfrom flexkit import hookimpl\nfrom flexkit.selectors.sequential import SequentialSelector"
              "\n\n@hookimpl\ndef flexkit_register_selectors(register):\n"
              "    register('in_order', SequentialSelector)\n")
    toml = '[run]\nbatch_size = 2\n[[tasksets]]\nname = "t"\npath = "t.jsonl"\nselector = { type = "in_order" }\n'
    _run(tmp_path, monkeypatch, f"{FENCE}python\n{plugin}{FENCE}\n\n{FENCE}toml\n{toml}{FENCE}\n")
    with pytest.raises(ConfigError, match="unknown selector 'in_order'"):
        _run(tmp_path, monkeypatch, f"{FENCE}toml\n{toml}{FENCE}\n")


def test_toml_fragments_are_validated_inside_a_minimal_pipeline(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path, monkeypatch, f'{FENCE}toml\n[tasksets.selector]\ntype = "random"\n{FENCE}\n')
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.tua"):
        _run(tmp_path, monkeypatch, f'{FENCE}toml\n[tasksets.selector]\ntype = "random"\ntua = 1\n{FENCE}\n')
    assert as_pipeline({"sample": {}})["tasksets"][0]["storage_type"] == "simulated"


def test_bash_runs_quick_flexkit_commands_and_refuses_the_rest(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _run(tmp_path, monkeypatch, f"{FENCE}bash\nflexkit --version\n{FENCE}\n")
    for command in ("pip install x && flexkit compare p.toml", "flexkit compare p.toml --seeds 3",
                    "ls && python -m pip install x",
                    "python benchmarks/run.py", "python -c 'print(1)'"):
        with pytest.raises(AssertionError, match="mark it <!-- skip: next"):
            _run(tmp_path, monkeypatch, f"{FENCE}bash\n{command}\n{FENCE}\n")
    with pytest.raises(AssertionError, match="bash block failed"):
        _run(tmp_path, monkeypatch, f"{FENCE}bash\nflexkit validate missing.toml\n{FENCE}\n")


def test_an_install_block_is_checked_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    numpy = metadata.version("numpy")
    _run(tmp_path, monkeypatch, f'{FENCE}bash\npip install -e ".[test]" -e plugins/flexkit-rft-example  # local\n'
                                f"pip install numpy=={numpy} not-installed==1.0 somepackage\n{FENCE}\n")
    with pytest.raises(AssertionError, match="not a distribution of this repository"):
        _run(tmp_path, monkeypatch, f"{FENCE}bash\npip install -e plugins/flexkit-missing\n{FENCE}\n")
    with pytest.raises(AssertionError, match=f"pins numpy==0.0.1, tested here with {numpy}"):
        _run(tmp_path, monkeypatch, f"{FENCE}bash\npip install numpy==0.0.1\n{FENCE}\n")


def test_a_skipped_block_needs_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = _run(tmp_path, monkeypatch, f'<!-- skip: next "installs packages" -->\n{FENCE}bash\npip install x\n'
                                          f"{FENCE}\n")
    assert reasons == ["installs packages"]
    with pytest.raises(ValueError, match="needs a reason"):
        _run(tmp_path, monkeypatch, f"<!-- skip: next -->\n{FENCE}bash\npip install x\n{FENCE}\n")


def test_file_headers() -> None:
    assert file_header("# pipeline.toml\n[run]\n") == "pipeline.toml"
    assert file_header("# flexkit-x/flexkit_x/__init__.py\n") == "flexkit-x/flexkit_x/__init__.py"
    assert file_header("# train_dp.py: torchrun ...\n") is None
    assert file_header("import flexkit\n") is None


def test_an_install_block_may_create_its_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    torch = metadata.version("torch").split("+")[0]
    venv_line = (f"python3 -m venv .venv && .venv/bin/pip install torch=={torch} && "
                 ".venv/bin/pip install -e . -e plugins/flexkit-rft-trl")
    _run(tmp_path, monkeypatch, f"{FENCE}bash\n{venv_line}\n{FENCE}\n")  # checked, not run: no .venv appears
    assert not (tmp_path / ".venv").exists()
    with pytest.raises(AssertionError, match="not a distribution of this repository"):
        _run(tmp_path, monkeypatch, f"{FENCE}bash\npython3 -m venv v && v/bin/pip install -e plugins/x\n{FENCE}\n")
    with pytest.raises(AssertionError, match="names the distribution 'flexkit'"):
        not_ours = "flexkit[x]"  # the index's unrelated project (named here, not in an install line of this file)
        _run(tmp_path, monkeypatch, f'{FENCE}bash\npython3 -m venv v && v/bin/pip install "{not_ours}"\n{FENCE}\n')


def test_an_install_block_from_the_repository_by_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NAME @ git+URL#subdirectory=FOLDER`` must be this repository's URL and the folder holding NAME; an option's
    value (``--index-url URL``) is no requirement."""
    url = "git+https://github.com/flexkit/flexkit"

    def block(*lines: str) -> str:
        return f"{FENCE}bash\n" + "\n".join(lines) + f"\n{FENCE}\n"

    _run(tmp_path, monkeypatch, block(
        "pip install torch --index-url https://download.pytorch.org/whl/cpu",
        f'pip install "flexkit-rft @ {url}"',
        f'pip install "flexkit-rft-trl @ {url}#subdirectory=plugins/flexkit-rft-trl"'))
    with pytest.raises(AssertionError, match="that folder's project is another"):
        ray = "plugins/flexkit-rft-ray"
        _run(tmp_path, monkeypatch, block(f'pip install "flexkit-rft-trl @ {url}#subdirectory={ray}"'))
    with pytest.raises(AssertionError, match="that folder's project is another"):
        _run(tmp_path, monkeypatch, block(f'pip install "flexkit-rft-trl @ {url}"'))  # no subdirectory: the core
    with pytest.raises(AssertionError, match="not this repository's Source URL"):
        _run(tmp_path, monkeypatch, block('pip install "flexkit-rft @ git+https://example.org/flexkit"'))
    with pytest.raises(AssertionError, match="no distribution of this repository in that folder"):
        _run(tmp_path, monkeypatch, block(f'pip install "flexkit-rft @ {url}#subdirectory=plugins/nonesuch"'))
