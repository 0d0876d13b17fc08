"""docs/porting-from-dataflex.md: every DataFlex-RL preset pipeline in examples/dataflex/ loads, and every TOML
block of the guide parses, validates against the committed schema and builds a pipeline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from flexkit.config._loader import parse_toml
from flexkit.pipeline._pipeline import load_pipeline, pipeline_from_dict
from tests.fixtures import EXAMPLES, ROOT

GUIDE = ROOT / "docs" / "porting-from-dataflex.md"
PRESETS = sorted((EXAMPLES / "dataflex").glob("*.toml"))
BLOCKS = re.findall(r"```toml\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
SCHEMA = json.loads((ROOT / "schemas" / "pipeline.schema.json").read_text(encoding="utf-8"))


def test_every_preset_in_the_guide_has_a_file_and_every_file_is_in_the_guide() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    named = set(re.findall(r"`examples/dataflex/([a-z_]+\.toml)`", text))
    assert named == {p.name for p in PRESETS} and len(PRESETS) >= 13


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_dataflex_preset_loads(path: Path) -> None:
    pipe = load_pipeline(path)
    assert pipe.has_sample_stage
    assert pipe.config.sample.mechanism in ("select", "reweight", "mix")
    assert pipe.scheduler.read() is not None  # the tasksets it names exist and a batch can be drawn


def _as_pipeline(block: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A guide block as a whole pipeline: a [sample] fragment gets a [run] and two small JSONL tasksets named
    like the preset files' (arithmetic, word_problems); a whole pipeline's paths point at a temporary file."""
    rows = "".join(json.dumps({"question": f"{i} + 1 =", "answer": str(i + 1)}) + "\n" for i in range(64))
    for name in ("arithmetic", "word_problems"):
        (tmp_path / f"{name}.jsonl").write_text(rows, encoding="utf-8")
    if "run" not in block:
        tasksets = [{"name": name, "path": str(tmp_path / f"{name}.jsonl"), "selector": {"type": "random"}}
                    for name in ("arithmetic", "word_problems")]
        return {"run": {"batch_size": 4}, "tasksets": tasksets, **block}
    for taskset in block["tasksets"]:
        taskset["path"] = str(tmp_path / Path(taskset["path"]).name)
    return block


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_toml_block_of_the_guide_parses_validates_and_builds(index: int, tmp_path: Path) -> None:
    block = parse_toml(BLOCKS[index], source=f"{GUIDE.name} block {index}")
    data = _as_pipeline(block, tmp_path)
    jsonschema.validate(data, SCHEMA)
    pipe = pipeline_from_dict(data, base_dir=tmp_path)
    assert pipe.has_sample_stage
    assert len(pipe.scheduler.read()) == data["run"]["batch_size"]


def test_the_guide_has_toml_blocks() -> None:
    assert len(BLOCKS) >= 4
