"""What ``flexkit validate`` says of a valid pipeline (:meth:`Pipeline.describe`) names every table that changes
a run, ``[replay]`` and ``[sample.refill]`` included; and what it says of an empty FILE argument."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexkit.cli.main import main

PIPELINE = """
[run]
batch_size = 8
seed = 0
total_steps = 10

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 100
levels = [1, 2]

[tasksets.selector]
type = "random"

[sample]
mechanism = "select"

[sample.scorer]
type = "group_reward_range"

[sample.actuator]
type = "zero_variance_filter"
max_rounds = 3
"""

REFILL = '\n[sample.refill]\nsurplus = "keep"\n'
REPLAY = "\n[replay]\ngroups = 4\nmax_age = 3\n"


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def test_regression_the_description_names_replay_and_refill(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = _validate(tmp_path, PIPELINE + REFILL + REPLAY, capsys)
    assert "  sample.refill: new rollouts for the groups the filter drops, until its target_groups or max_rounds " \
           "(surplus='keep')" in lines, lines
    assert "  replay: up to 4 stored informative group(s) per step, none older than 3 step(s)" in lines, lines


def test_without_them_the_description_has_no_such_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _validate(tmp_path, PIPELINE, capsys)
    assert not [line for line in lines if line.startswith(("  replay:", "  sample.refill:"))], lines


@pytest.mark.parametrize("command", [["validate", ""], ["run", ""], ["preview", ""]])
def test_regression_an_empty_file_argument_is_named_and_called_empty(command: list[str],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``flexkit validate ""`` said "Is a directory" (``Path("")`` is the current folder) and named nothing."""
    assert main(command) == 1
    err = capsys.readouterr().err
    assert 'FILE: the pipeline file argument is empty ("")' in err and "directory" not in err, err
