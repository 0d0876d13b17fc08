"""Checkpoints written before each piece of state got one owner still load and resume exactly.

``data/main_mix_run`` is a run folder written by flexkit at commit dc57cc5 (before the mix was stored once): a
mix stage (``reward_gap``) over two simulated tasksets (``frontier``, ``shuffle``) with ``prefetch = true``,
stopped at step 11 with its checkpoint at step 9. That checkpoint holds the mix twice, as the scheduler's
``mix`` and as the sample stage's ``proportions`` (one ulp apart), beside a prefetched batch and ``mix_from =
10``. ``data/main_mix_uninterrupted.jsonl`` is the metrics of the same pipeline run by that flexkit without a
stop. It was made with ``flexkit.testing.crash_run(load_pipeline(".../pipeline.toml"), run_dir, 11)`` and
``flexkit run .../pipeline.toml``; doing so now writes today's layout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flexkit._metric_names import upgrade_record
from flexkit.cli.main import main
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.pipeline._pipeline import load_pipeline
from tests.checkpoint.test_kill_checkpoint import canonical
from tests.fixtures import within_rounding, without_clock

DATA = Path(__file__).parent / "data"
RUN = DATA / "main_mix_run"
def _records(path: Path) -> list[dict]:
    """The metrics records of a file, under today's names (old lines are renamed as every reader renames them),
    without the validation split's ``flexkit/val/...``, the selectors' summaries ``flexkit/selector/...`` and the
    wall clock, ``flexkit/run/seconds`` (all recorded since; nothing else changed)."""
    records = without_clock(upgrade_record(json.loads(line)) for line in path.read_text().splitlines())
    return [{k: v for k, v in record.items() if not k.startswith(("flexkit/val/", "flexkit/selector/"))}
            for record in records]


UNINTERRUPTED_RECORDS = _records(DATA / "main_mix_uninterrupted.jsonl")  # on another CPU: within_rounding



def _copy(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir)
    return run_dir


def _resume(run_dir: Path) -> None:
    assert main(["run", str(run_dir / "pipeline.toml"), "--resume", str(run_dir), "--quiet"]) == 0


def test_regression_a_checkpoint_with_the_mix_twice_resumes_to_the_uninterrupted_run(tmp_path: Path) -> None:
    """The old checkpoint resumes to exactly the metrics the old flexkit wrote without a stop, and its last
    checkpoint is the one today's flexkit writes without a stop (the mix kept once, by the scheduler)."""
    run_dir = _copy(tmp_path)
    state, _meta = load_state(run_dir / "checkpoint")
    old_sched, old_sample = state["pipeline"]["scheduler"], state["pipeline"]["sample"]
    assert old_sched["mix"] is not None and old_sample["proportions"] is not None  # the old layout
    assert old_sched["mix_from"] == 10 and old_sched["pending"] is not None
    _resume(run_dir)
    fresh = tmp_path / "fresh"
    assert main(["run", str(RUN / "pipeline.toml"), "--out", str(fresh), "--quiet"]) == 0
    assert within_rounding(_records(run_dir / "metrics.jsonl"), UNINTERRUPTED_RECORDS)
    assert within_rounding(_records(fresh / "metrics.jsonl"), UNINTERRUPTED_RECORDS)
    resumed, expected = load_state(run_dir / "checkpoint")[0], load_state(fresh / "checkpoint")[0]
    assert canonical(resumed) == canonical(expected)
    assert "proportions" not in resumed["pipeline"]["sample"]


def test_the_old_copy_of_the_mix_is_ignored_and_the_scheduler_keeps_its_own(tmp_path: Path) -> None:
    run_dir = _copy(tmp_path)
    state, _meta = load_state(run_dir / "checkpoint")
    pipe = load_pipeline(run_dir / "pipeline.toml")
    pipe.load_checkpoint(run_dir / "checkpoint")
    old = state["pipeline"]
    assert pipe.scheduler.mix == old["scheduler"]["mix"]
    assert pipe.scheduler.mix != [p for _tid, p in old["sample"]["proportions"]]  # the two copies differed
    assert pipe.sample_stage.proportions is None  # the latest action's, set again by the stage's next run
    del old["sample"]["proportions"]
    mine = pipe.state_dict()
    del mine["scheduler"]["selectors"][0]["group_names"]  # recorded since; the old state has the group count
    for key in ("passed", "failed"):  # frontier's second pass-rate posterior, no longer kept (one estimate now)
        del old["scheduler"]["selectors"][0][key]
    assert canonical(mine) == canonical(old)
    pipe.scheduler.close()


def test_a_checkpoint_without_the_counters_or_the_last_evaluation_resumes_from_the_metrics(tmp_path: Path) -> None:
    """Checkpoints written before the run counters and ``last_eval`` were saved take them from the metrics
    records kept before the checkpoint's step, and resume to the same end."""
    run_dir = _copy(tmp_path)
    state, meta = load_state(run_dir / "checkpoint")
    for key in ("rollouts", "generated_tokens", "last_eval"):
        del state["extra"]["runner"][key]
    save_state(run_dir / "checkpoint", state, meta=meta)
    _resume(run_dir)
    assert within_rounding(_records(run_dir / "metrics.jsonl"), UNINTERRUPTED_RECORDS)


def test_a_run_started_with_frontiers_earlier_defaults_is_refused_with_them_named(tmp_path: Path, capsys) -> None:
    """The fixture's pipeline as it was written, before frontier's defaults became the recipe: its resume would
    switch the selector mid-run, so it is refused, naming the earlier defaults that resume it."""
    run_dir = _copy(tmp_path)
    pipeline = run_dir / "pipeline.toml"
    pipeline.write_text(pipeline.read_text().replace(
        'selector = { type = "frontier", feature_keys = ["level"], discount = 0.95, retain = 0.0, retain_above = 0.5 }',
        'selector = { type = "frontier", feature_keys = ["level"] }'))
    assert main(["run", str(pipeline), "--resume", str(run_dir), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "tasksets[0].params.discount: 0.95 in the checkpoint, 0.99 now" in err
    assert "discount = 0.95, retain = 0.0, retain_above = 0.5" in err
