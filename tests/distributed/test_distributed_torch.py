"""DistributedPipeline on 2 gloo ranks over loopback, against a single process: same global batches, disjoint
shards covering them, identical selector state (adaptive difficulty_based with feedback), errors raised on
every rank without hanging, and a resume across ranks from rank 0's checkpoint."""

from __future__ import annotations

import datetime
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flexkit.distributed import digest
from flexkit.errors import DistributedStateError, FeedbackError
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.testing.distributed import experiences, make_pipeline, pairs
from tests.fixtures import plain_feedback

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - torch builds without distributed support
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from flexkit.distributed._torch_dist import DistributedPipeline, shard_bounds  # noqa: E402

WORLD = 2
STEPS = 8
SAVE_AT = 4  # checkpoint after this step's feedback
BATCH = 5  # odd: shards of 3 and 2


@given(n=st.integers(0, 200), world=st.integers(1, 9))
def test_shards_tile_the_batch_in_order(n: int, world: int) -> None:
    bounds = [shard_bounds(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    with pytest.raises(ValueError):
        shard_bounds(n, world, world)


def test_needs_an_initialised_process_group(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not initialised"):
        DistributedPipeline(make_pipeline(tmp_path))


def _feed(dp: DistributedPipeline, shard: list[Any], step: int) -> None:
    """Even steps send experiences, odd steps per-rank metrics: both paths must equal one process."""
    exps = experiences(shard, step)
    if step % 2 == 0:
        dp.feedback(exps)
    else:
        dp.feedback_metrics(dp.pipeline.feedback_operator.process(exps)[1])


def _rank_main(rank: int, root: str) -> None:
    """One rank: a run with a checkpoint at SAVE_AT, bad feedback on the way, then a resume from it."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["FLEXKIT_LOAD_PLUGINS"] = ""  # built-ins only: faster start, nothing else imported
    base = Path(root)
    dist.init_process_group("gloo", init_method=f"file://{base / 'store'}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))  # a broken collective fails, never hangs CI
    try:
        record: dict[str, Any] = {"shards": [], "globals": [], "errors": []}
        dp = DistributedPipeline(make_pipeline(base, steps=STEPS, batch_size=BATCH, write=False), verify_every=1)
        for step in range(STEPS):
            shard = dp.read()
            record["shards"].append(pairs(shard))
            record["globals"].append(pairs(dp.global_batch))
            if step == 2:  # rank 1 sends garbage: every rank raises, no selector moves
                before = dp.state_digest()
                bad = [{"taskset_id": 0, "index": 999, "reward": 1.0}] if rank == 1 else experiences(shard, step)
                for attempt in (bad, [{"no": "reward"}] if rank == 1 else experiences(shard, step)):
                    try:
                        dp.feedback(attempt)
                    except FeedbackError as exc:
                        record["errors"].append(str(exc))
                assert dp.state_digest() == before
            _feed(dp, shard, step)
            if step == SAVE_AT:
                dp.save_checkpoint(base / "ckpt", extra={"step": step})
        with pytest.raises(StopIteration):
            dp.read()
        save_state(base / f"final{rank}", dp.pipeline.state_dict(), meta={})

        # resume: only rank 0 sees the checkpoint folder; the state reaches rank 1 by broadcast
        again = DistributedPipeline(make_pipeline(base, steps=STEPS, batch_size=BATCH, write=False))
        where = base / "ckpt" if rank == 0 else base / "not-here"
        record["extra"] = again.load_checkpoint(where)
        for step in range(SAVE_AT + 1, STEPS):
            shard = again.read()
            record.setdefault("resumed_globals", []).append(pairs(again.global_batch))
            _feed(again, shard, step)
        save_state(base / f"resumed{rank}", again.pipeline.state_dict(), meta={})
        try:
            again.load_checkpoint(base / "missing")
        except DistributedStateError as exc:
            record["load_error"] = str(exc)
        (base / f"record{rank}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_match_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_pipeline(tmp_path, steps=STEPS, batch_size=BATCH)  # writes the tasksets both ranks read
    torch.multiprocessing.spawn(_rank_main, args=(str(tmp_path),), nprocs=WORLD, join=True)

    monkeypatch.setenv("FLEXKIT_LOAD_PLUGINS", "")
    ref = make_pipeline(tmp_path, steps=STEPS, batch_size=BATCH, write=False)
    ref_globals, ref_digests = [], {}
    for step in range(STEPS):
        tasks = ref.scheduler.read()
        ref_globals.append(pairs(tasks))
        ref.feedback(experiences(tasks, step))
    ref_digests["final"] = digest(ref.state_dict())
    unfed = make_pipeline(tmp_path, steps=STEPS, batch_size=BATCH, write=False)
    for _ in range(STEPS):
        unfed.scheduler.read()
    assert digest(unfed.state_dict()) != ref_digests["final"]  # the feedback did move the adaptive selector

    records = [json.loads((tmp_path / f"record{r}.json").read_text()) for r in range(WORLD)]
    for step in range(STEPS):
        shards = [[tuple(p) for p in rec["shards"][step]] for rec in records]
        assert shards[0] + shards[1] == ref_globals[step]  # disjoint, in order, nothing missing
        assert [len(s) for s in shards] == [3, 2]
        for rec in records:
            assert [tuple(p) for p in rec["globals"][step]] == ref_globals[step]
    for r, rec in enumerate(records):
        assert [[tuple(p) for p in g] for g in rec["resumed_globals"]] == ref_globals[SAVE_AT + 1:]
        assert rec["extra"] == {"step": SAVE_AT}
        assert len(rec["errors"]) == 2
        assert "out of range" in rec["errors"][0] and "rank 1: experiences cannot be read" in rec["errors"][1]
        assert "rank 0 could not load the checkpoint" in rec["load_error"]
        for name in ("final", "resumed"):
            state, _meta = load_state(tmp_path / f"{name}{r}")
            assert digest(state) == ref_digests["final"], (name, r)


def test_feedback_accepts_columnar_experiences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns (compact or not) move the selectors as a single process fed the same rows does (one rank)."""
    monkeypatch.setenv("FLEXKIT_LOAD_PLUGINS", "")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    ref = make_pipeline(tmp_path, steps=STEPS, batch_size=BATCH)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    try:
        dp = DistributedPipeline(make_pipeline(tmp_path, steps=STEPS, batch_size=BATCH, write=False))
        for step in range(4):
            tasks = dp.read()
            assert pairs(ref.scheduler.read()) == pairs(tasks)
            rows = experiences(tasks, step)
            columns = {name: [e[name] for e in rows] for name in ("taskset_id", "index", "reward")}
            assert plain_feedback(dp.feedback(columns, compact=step % 2 == 0)) == plain_feedback(ref.feedback(rows))
            assert dp.state_digest() == digest(ref.scheduler.state_dict())
        before = dp.state_digest()
        with pytest.raises(FeedbackError, match="experiences cannot be read"):
            dp.feedback({"taskset_id": [0, 0], "index": [1], "reward": [1.0, 0.0]})
        assert dp.state_digest() == before
    finally:
        dist.destroy_process_group()
