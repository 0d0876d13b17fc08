"""The JSON Schema: generated from the config classes, committed, in sync, and validating every example."""

from __future__ import annotations

import json

import jsonschema
import pytest

from flexkit.config._loader import read_toml_file
from flexkit.config._schema import REGENERATE_COMMAND, dumps, pipeline_schema
from flexkit.plugins._manager import get_plugins
from tests.fixtures import EXAMPLES, ROOT

SCHEMA_PATH = ROOT / "schemas" / "pipeline.schema.json"
#: The schema of the examples that use the embedded trainer: core components plus flexkit-rft-toyrl's.
TOYRL_SCHEMA_PATH = ROOT / "schemas" / "toyrl.schema.json"
TOYRL_REGENERATE = "flexkit schema --distribution flexkit-rft-toyrl --output schemas/toyrl.schema.json"
#: The schema of the examples that use the TRL trainer (examples/trl_run): core, flexkit-rft-toyrl's and
#: flexkit-rft-trl's components (kept up to date by tests/config/test_trl_run_schema.py).
TRL_SCHEMA_PATH = ROOT / "schemas" / "trl.schema.json"


def core_schema() -> dict:
    return pipeline_schema(get_plugins(), lambda c: c.distribution == "flexkit-rft")


def test_committed_schema_is_up_to_date() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == dumps(core_schema()), (
        f"schemas/pipeline.schema.json is out of date; regenerate with: {REGENERATE_COMMAND}"
    )


def test_schema_is_valid_draft7() -> None:
    jsonschema.Draft7Validator.check_schema(core_schema())


def test_committed_toyrl_schema_is_up_to_date() -> None:
    pytest.importorskip("flexkit_toyrl")
    wanted = {"flexkit-rft", "flexkit-rft-toyrl"}
    assert TOYRL_SCHEMA_PATH.read_text(encoding="utf-8") == dumps(
        pipeline_schema(get_plugins(), lambda c: c.distribution in wanted)
    ), f"schemas/toyrl.schema.json is out of date; regenerate with: {TOYRL_REGENERATE}"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("**/*.toml")), ids=lambda p: p.name)
def test_every_example_validates_and_points_at_a_committed_schema(example) -> None:
    first = example.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("#:schema "), f"{example.name} must start with a #:schema line"
    schema = (example.parent / first.removeprefix("#:schema ")).resolve()
    assert schema in (SCHEMA_PATH, TOYRL_SCHEMA_PATH, TRL_SCHEMA_PATH)
    if schema == TOYRL_SCHEMA_PATH:
        pytest.importorskip("flexkit_toyrl")
    jsonschema.validate(read_toml_file(example), json.loads(schema.read_text()))


def test_schema_rejects_what_the_loader_rejects() -> None:
    validator = jsonschema.Draft7Validator(core_schema())
    good = {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "a.jsonl"}]}
    assert not list(validator.iter_errors(good))
    for bad in (
        {"run": {"batch_size": 0}, "tasksets": good["tasksets"]},
        {"run": {"batch_size": 4, "sed": 1}, "tasksets": good["tasksets"]},
        {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "a", "selector": {"type": "nope"}}]},
        {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "a", "pth": "x"}]},
        {"run": {"batch_size": 4}, "tasksets": []},
    ):
        assert list(validator.iter_errors(bad)), bad


def test_third_party_components_appear_with_all_plugins(fake_dist) -> None:
    from tests.plugins.test_plugins import GOOD

    fake_dist("stride-dist", {"stride_mod": GOOD}, {"stride": "stride_mod"})
    text = json.dumps(pipeline_schema(get_plugins()))
    assert '"const": "stride"' in text
    assert '"const": "stride"' not in json.dumps(core_schema())
