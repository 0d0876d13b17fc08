"""``flexkit plot`` checks the value types of the records: what it cannot draw is left out with a note naming
it, and the rest is drawn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.cli.main import main
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.plot._figures import PLOT_FILES
from flexkit.plot._records import NUMBER_KEYS, TABLE_KEYS, drawable_records
from flexkit.run._runner import run_pipeline
from tests.cli.test_runner import PIPELINE, write

PNG = b"\x89PNG\r\n\x1a\n"

BAD = {
    "flexkit/eval/accuracy": "high",
    "flexkit/eval/accuracy/2": [0.5],
    "flexkit/run/rollouts": {"n": 3},
    "flexkit/sample/kept_fraction": True,
    "flexkit/sample/filter_rounds": 10 ** 400,
    "flexkit/taskset_mix": [1, 2],
    "flexkit/level_mix": {"1": "three"},
    "flexkit/predicted_pass_rate": {"selected": [1, 2], "pool": [1, 2, 3]},
    "flexkit/selector/hard/floor_share/level=1": "half",
}
HISTOGRAMS = "flexkit/predicted_pass_rate"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plot_values")
    path = write(tmp, PIPELINE.replace("total_steps = 60", "total_steps = 20"))
    run_pipeline(load_pipeline(path), run_dir=tmp / "run", progress=None)
    return tmp / "run"


def _damaged(run_dir: Path, tmp_path: Path, every: int = 3) -> Path:
    """A copy of the run whose every ``every``-th record holds a value of the wrong type under each drawn key."""
    copy = tmp_path / "damaged"
    shutil.copytree(run_dir, copy)
    records = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
    for i, record in enumerate(records):
        if i % every == 1:
            record.update(BAD)
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return copy


def test_regression_values_of_the_wrong_type_are_left_out_with_a_note(run_dir: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a string, list or table where a number belongs (or a malformed histogram) stopped ``flexkit
    plot`` with a traceback. Now each such value is left out, a note names its key, and every PNG is written."""
    pytest.importorskip("matplotlib")
    damaged = _damaged(run_dir, tmp_path)
    assert main(["plot", str(damaged), "--dpi", "30"]) == 0
    out, err = capsys.readouterr()
    drawn = [name for name in PLOT_FILES if name not in ("replay.png", "floor.png")]  # no [replay], no floor
    assert out.split() == [str(damaged / "plots" / name) for name in drawn]
    for name in drawn:
        assert (damaged / "plots" / name).read_bytes().startswith(PNG)
    for key in BAD:
        assert f"note: not drawn: {key}: left out of 7 records" in err, key


def test_a_run_whose_every_value_is_damaged_still_plots(run_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    damaged = _damaged(run_dir, tmp_path, every=1)
    records = [json.loads(line) for line in (damaged / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record.update(BAD)
    (damaged / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["plot", str(damaged), "--dpi", "30"]) == 0
    assert "flexkit/run/rollouts: left out of 21 records" in capsys.readouterr().err


def test_histograms_must_keep_the_first_length() -> None:
    good = {"selected": [1, 0], "pool": [3, 4]}
    records, notes = drawable_records([{"step": 0, HISTOGRAMS: good},
                                       {"step": 1, HISTOGRAMS: {"selected": [1], "pool": [2]}}])
    assert records[0][HISTOGRAMS] == good and HISTOGRAMS not in records[1]
    assert notes == [f"{HISTOGRAMS}: left out of 1 record (histograms of different lengths, e.g. "
                     "{'selected': [1], 'pool': [2]})"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner,
                                                                                 max_size=3), max_leaves=8)
KEYS = st.sampled_from([*NUMBER_KEYS, *TABLE_KEYS, "flexkit/eval/accuracy/1", HISTOGRAMS, "loss"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(KEYS, JSON, max_size=4), min_size=1, max_size=6))
def test_what_is_kept_is_drawable(records: list[dict]) -> None:
    """Whatever the records hold, what is kept under a drawn key has the type the plots draw, and every key
    that lost a value is named in a note."""
    kept, notes = drawable_records([{"step": i, **r} for i, r in enumerate(records)])
    length = None
    for before, after in zip(records, kept, strict=True):
        for key, value in after.items():
            if key in NUMBER_KEYS or key.startswith("flexkit/eval/accuracy/"):
                assert isinstance(value, (int, float)) and not isinstance(value, bool)
                assert abs(float(value)) < float("inf")
            elif key in TABLE_KEYS:
                assert all(isinstance(v, (int, float)) and v >= 0 for v in value.values())
            elif key == HISTOGRAMS:
                assert len(value["selected"]) == len(value["pool"]) == (length or len(value["pool"]))
                length = len(value["pool"])
        for key in set(before) - set(after):
            assert any(note.startswith(f"{key}: ") for note in notes)
        assert after.get("loss", "absent") is before.get("loss", "absent")  # keys no plot draws are kept
