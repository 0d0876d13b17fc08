"""``frontier`` with ``guard_metric``: ``retain``'s floor reaches a learnt group only while the trainer's held-out
accuracy of its level is more than ``guard_margin`` below its best, and nothing else changes while every level
holds. They fail when the evaluation is ignored (no floor on a slide, or a floor without one), and when the guard
state is not restored exactly."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from flexkit import ConfigError, FeedbackError, make_selector
from flexkit.errors import ComponentError
from flexkit.pipeline._checkpoint import load_state
from flexkit.pipeline._pipeline import load_pipeline
from flexkit.run._runner import run_pipeline
from flexkit.selectors._held_out import HeldOutWatch, metric_names
from tests.fixtures import crash_run, read_metrics, without_clock
from tests.selectors.test_frontier import LEVELS, SUBGROUP, _simulate
from tests.selectors.test_selector_resume import json_round_trip

#: The guard as a switch (the floor whole while a level slides, none while it holds), the mechanism these tests
#: check; the recipe's control loop (guard_raise, guard_lower, guard_min: the defaults) is tested below with its own.
GUARD = {"retain": 1.0, "retain_above": 0.9, "pass_rate": 1.0, "guard_metric": "val_accuracy/{}", "discount": 0.95,
         "guard_margin": 0.02, "guard_raise": 1.0, "guard_lower": 1.0, "guard_min": 0.0}


def _guarded(**params):
    return make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS},
                         feature_keys=["level"], **{**GUARD, **params})


def _retained_levels(sel) -> list[int]:
    idx, info = sel.get_indices(64, return_extra_info=True)
    return sorted(set(LEVELS[idx[:info["retained"]]].astype(int).tolist()))


def test_the_floor_reaches_a_learnt_level_only_while_its_held_out_accuracy_is_below_its_best() -> None:
    sel = _guarded()
    sel.feedback(np.array([0, 200, 400]), np.array([1.0, 1.0, 0.25]))  # levels 1 and 2 learnt, level 3 not
    assert _retained_levels(sel) == []  # learnt, never evaluated: no floor
    sel.observe_evaluation({"val_accuracy/1": 1.0, "val_accuracy/2": 0.95, "val_accuracy/3": 0.4})
    assert _retained_levels(sel) == []  # at their best: no floor
    sel.observe_evaluation({"val_accuracy/1": 0.97, "val_accuracy/2": 0.95, "val_accuracy/3": 0.2})
    assert _retained_levels(sel) == [1]  # level 1 slid by 0.03; level 3 slid further but is not learnt
    assert sel.held_out.best.tolist()[:3] == [1.0, 0.95, 0.4]
    sel.observe_evaluation({"val_accuracy/1": 0.99})
    assert _retained_levels(sel) == []  # back within the margin
    ungated = make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS},
                            feature_keys=["level"], **{**GUARD, "guard_metric": ""})
    ungated.feedback(np.array([0, 200, 400]), np.array([1.0, 1.0, 0.25]))
    assert _retained_levels(ungated) == [1, 2]  # without the guard: whenever learnt


@pytest.mark.parametrize(("margin", "sliding"), [(0.02, False), (0.01, True), (0.0, True)])
def test_the_margin_decides_what_counts_as_a_slide(margin: float, sliding: bool) -> None:
    sel = _guarded(guard_margin=margin)
    sel.feedback(np.array([0]), np.array([1.0]))
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    sel.observe_evaluation({"val_accuracy/1": 0.985})
    assert (_retained_levels(sel) == [1]) is sliding


def test_while_every_level_holds_the_guard_draws_exactly_as_no_floor() -> None:
    rates = [1.0, 0.95, 0.4, 0.1, 0.0, 0.0]
    guarded = _guarded()
    guarded.observe_evaluation({f"val_accuracy/{level}": 1.0 for level in range(1, 7)})
    plain = make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS},
                          feature_keys=["level"], pass_rate=1.0, discount=0.95, retain=0.0)
    assert (_simulate(guarded, lambda step: rates, 20, np.random.default_rng(2)).tolist()
            == _simulate(plain, lambda step: rates, 20, np.random.default_rng(2)).tolist())


def test_a_slide_wins_the_solved_level_its_uniform_share_until_it_recovers() -> None:
    rates = [1.0, 0.95, 0.4, 0.2, 0.0, 0.0]
    sel = _guarded()
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    holding = _simulate(sel, lambda step: rates, 40, np.random.default_rng(8))[10:].mean(axis=0)
    sel.observe_evaluation({"val_accuracy/1": 0.9})
    sliding = _simulate(sel, lambda step: rates, 40, np.random.default_rng(9))[10:].mean(axis=0)
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    recovered = _simulate(sel, lambda step: rates, 40, np.random.default_rng(10))[10:].mean(axis=0)
    share = 64 / 6
    assert holding[0] < 0.3 * share and recovered[0] < 0.3 * share
    assert sliding[0] >= 0.8 * share


def test_missing_and_non_numeric_values_keep_the_last_one_and_uncovered_groups_never_get_the_floor() -> None:
    sel = _guarded()
    sel.feedback(np.array([0, 200]), np.array([1.0, 1.0]))
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    sel.observe_evaluation({"val_accuracy/1": 0.9})
    for junk in ({}, {"val_accuracy/1": float("nan")}, {"val_accuracy/1": True}, {"val_accuracy/1": "0.99"},
                 {"val_accuracy/1": None}, {"val_accuracy/1": float("inf")}):
        sel.observe_evaluation(junk)
        assert sel.held_out.latest[0] == 0.9 and sel.held_out.best[0] == 1.0
    assert _retained_levels(sel) == [1]  # level 2 learnt but never evaluated


def test_each_group_reads_its_first_feature_values_metric() -> None:
    sel = make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS, "sub": SUBGROUP},
                        feature_keys=["level", "sub"], guard_metric="acc@{}", retain=1.0)
    assert sel.held_out.metrics == [f"acc@{level}" for level in range(1, 7) for _ in range(5)]
    labelled = make_selector("frontier", size=4, seed=0, features={"source": np.array(["gsm8k", "math"] * 2)},
                             feature_keys=["source"], guard_metric="val/{}/acc", retain=1.0)
    assert labelled.held_out.metrics == ["val/gsm8k/acc", "val/math/acc"]
    assert metric_names("val_accuracy", None, 3) == ["val_accuracy"] * 3  # no placeholder: one metric for all
    whole = make_selector("frontier", size=50, seed=0, guard_metric="val_accuracy", retain=1.0)
    assert whole.held_out.metrics == ["val_accuracy"]  # without feature_keys, "{}" is refused (no groups to name)


def test_exact_resume_with_the_guard_state_through_json() -> None:
    rates = lambda step: [1.0, 0.95, 0.2, 0.0, 0.0, 0.0]  # noqa: E731
    sel = _guarded()
    _simulate(sel, rates, 6, np.random.default_rng(4))
    sel.observe_evaluation({"val_accuracy/1": 1.0, "val_accuracy/2": 0.96})
    sel.observe_evaluation({"val_accuracy/1": 0.9, "val_accuracy/2": 0.96})
    other = _guarded()
    other.load_state_dict(json_round_trip(sel.state_dict()))
    assert other.held_out.sliding().tolist() == sel.held_out.sliding().tolist()
    assert (_simulate(other, rates, 10, np.random.default_rng(1)).tolist()
            == _simulate(sel, rates, 10, np.random.default_rng(1)).tolist())


def test_damaged_guard_states_are_refused_and_change_nothing() -> None:
    sel = _guarded()
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    sel.observe_evaluation({"val_accuracy/1": 0.9})
    good = sel.state_dict()
    for damage, match in (
        (lambda s: s.pop("held_out"), "held-out"),
        (lambda s: s["held_out"].update(best=np.zeros(6)), "best below"),
        (lambda s: s["held_out"].update(latest=np.zeros(5)), "shape"),
        (lambda s: s["held_out"].update(latest=np.full(6, np.nan)), "NaN"),
        (lambda s: s["held_out"].update(share=np.full(6, 1.5)), "above"),
        (lambda s: s["held_out"].pop("share"), "share"),
    ):
        state = json_round_trip(good)
        damage(state)
        fresh = _guarded()
        with pytest.raises(ValueError, match=match):
            fresh.load_state_dict(state)
        assert np.isnan(fresh.held_out.best).all()  # nothing changed
    unguarded = make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS},
                              feature_keys=["level"], guard_metric="")
    assert "held_out" not in unguarded.state_dict()  # a selector without the guard keeps its earlier state


def test_the_watch_keeps_the_best_and_the_latest_value() -> None:
    watch = HeldOutWatch(["a", "b"], 0.05)
    watch.observe({"a": 0.5})
    watch.observe({"a": 0.8, "b": 0.1})
    watch.observe({"a": 0.7})
    assert watch.best.tolist() == [0.8, 0.1] and watch.latest.tolist() == [0.7, 0.1]
    assert watch.sliding().tolist() == [True, False]


# -- guard_raise / guard_lower: the floor as a control loop ------------------------------------------------------


def test_each_evaluation_raises_a_sliding_groups_share_and_lowers_a_holding_ones() -> None:
    watch = HeldOutWatch(["a", "b"], 0.02, raise_by=0.5, lower_by=0.2)
    shares = []
    for a in (1.0, 0.9, 0.9, 1.0, 1.0, 1.0, 0.95, 0.97):
        watch.observe({"a": a})
        shares.append(round(float(watch.share[0]), 6))
    assert shares == [0.0, 0.5, 1.0, 0.8, 0.6, 0.4, 0.9, 1.0]
    assert watch.share[1] == 0.0  # never evaluated: unchanged


def test_a_part_of_the_floor_keeps_that_part_of_the_groups_uniform_share() -> None:
    rates = [1.0, 0.95, 0.4, 0.2, 0.0, 0.0]

    def level_1_draws(raise_by: float) -> float:
        sel = _guarded(guard_raise=raise_by, guard_lower=0.0)
        sel.observe_evaluation({"val_accuracy/1": 1.0})
        sel.observe_evaluation({"val_accuracy/1": 0.9})
        assert sel.floor_shares()[0] == 0.0  # not learnt before any feedback
        return float(_simulate(sel, lambda step: rates, 60, np.random.default_rng(3))[10:, 0].mean())

    whole, half, none = level_1_draws(1.0), level_1_draws(0.5), level_1_draws(0.01)
    share = 64 / 6
    assert whole >= 0.8 * share and none < 0.3 * share
    assert 0.35 * share < half < 0.7 * share


def test_defaults_switch_the_whole_floor_and_draw_no_extra_random_numbers() -> None:
    sel = _guarded()
    always = make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS}, feature_keys=["level"],
                           **{**GUARD, "guard_metric": ""})
    for selector in (sel, always):
        selector.feedback(np.array([0]), np.array([1.0]))  # level 1 learnt, nothing else seen
    sel.observe_evaluation({"val_accuracy/1": 1.0})
    sel.observe_evaluation({"val_accuracy/1": 0.9})
    assert sel.floor_shares()[0] == 1.0
    assert sel.get_indices(64).tolist() == always.get_indices(64).tolist()  # the same floor, the same draws
    sel.observe_evaluation({"val_accuracy/1": 0.99})
    assert sel.floor_shares()[0] == 0.0


def test_exact_resume_with_a_part_of_the_floor() -> None:
    rates = lambda step: [1.0, 0.95, 0.2, 0.0, 0.0, 0.0]  # noqa: E731
    sel = _guarded(guard_raise=0.4, guard_lower=0.1)
    _simulate(sel, rates, 4, np.random.default_rng(4))
    sel.observe_evaluation({"val_accuracy/1": 1.0, "val_accuracy/2": 1.0})
    sel.observe_evaluation({"val_accuracy/1": 0.9, "val_accuracy/2": 0.9})
    other = _guarded(guard_raise=0.4, guard_lower=0.1)
    other.load_state_dict(json_round_trip(sel.state_dict()))
    assert other.floor_shares().tolist() == sel.floor_shares().tolist() and 0 < sel.floor_shares()[0] < 1
    assert (_simulate(other, rates, 10, np.random.default_rng(1)).tolist()
            == _simulate(sel, rates, 10, np.random.default_rng(1)).tolist())


# -- guard_min: part of the floor in every batch, the loop adding the rest -----------------------------------------


def test_the_share_starts_at_guard_min_and_never_falls_below_it() -> None:
    watch = HeldOutWatch(["a", "b"], 0.02, raise_by=0.5, lower_by=0.2, minimum=0.3)
    assert watch.share.tolist() == [0.3, 0.3]
    shares = []
    for a in (1.0, 0.9, 1.0, 1.0, 1.0, 1.0):
        watch.observe({"a": a})
        shares.append(round(float(watch.share[0]), 6))
    assert shares == [0.3, 0.8, 0.6, 0.4, 0.3, 0.3]
    assert watch.share[1] == 0.3  # never evaluated: the minimum


def test_guard_min_gives_a_learnt_level_part_of_the_floor_before_any_slide() -> None:
    rates = [1.0, 0.95, 0.4, 0.2, 0.0, 0.0]

    def level_1_draws(minimum: float, slide: bool) -> float:
        sel = _guarded(guard_raise=1.0, guard_lower=1.0, guard_min=minimum)
        sel.observe_evaluation({"val_accuracy/1": 1.0})
        if slide:
            sel.observe_evaluation({"val_accuracy/1": 0.9})
        return float(_simulate(sel, lambda step: rates, 60, np.random.default_rng(3))[10:, 0].mean())

    share = 64 / 6
    none, half, sliding = level_1_draws(0.0, False), level_1_draws(0.5, False), level_1_draws(0.5, True)
    assert none < 0.3 * share  # the loop alone: no floor while level 1 holds
    assert 0.35 * share < half < 0.7 * share  # guard_min: half the floor while it holds
    assert sliding >= 0.8 * share  # a slide raises it to the whole floor


def test_guard_min_needs_the_guard() -> None:
    with pytest.raises(ConfigError, match="guard_min"):
        make_selector("frontier", size=len(LEVELS), seed=5, features={"level": LEVELS}, feature_keys=["level"],
                      **{**GUARD, "guard_metric": "", "guard_min": 0.5})


def test_exact_resume_with_guard_min_and_a_state_saved_without_it() -> None:
    rates = lambda step: [1.0, 0.95, 0.2, 0.0, 0.0, 0.0]  # noqa: E731
    sel = _guarded(guard_raise=0.4, guard_lower=0.3, guard_min=0.2)
    _simulate(sel, rates, 4, np.random.default_rng(4))
    for a in (1.0, 0.9, 1.0, 1.0, 1.0):
        sel.observe_evaluation({"val_accuracy/1": a, "val_accuracy/2": 1.0})
    other = _guarded(guard_raise=0.4, guard_lower=0.3, guard_min=0.2)
    other.load_state_dict(json_round_trip(sel.state_dict()))
    assert other.floor_shares().tolist() == sel.floor_shares().tolist()
    assert sel.floor_shares()[:2].tolist() == [0.2, 0.2]  # both learnt and holding: the minimum
    assert (_simulate(other, rates, 10, np.random.default_rng(1)).tolist()
            == _simulate(sel, rates, 10, np.random.default_rng(1)).tolist())
    older = _guarded(guard_raise=0.4, guard_lower=0.3)  # saved without a minimum: shares fell to 0
    _simulate(older, rates, 4, np.random.default_rng(4))
    older.observe_evaluation({"val_accuracy/1": 1.0})
    raised = _guarded(guard_raise=0.4, guard_lower=0.3, guard_min=0.2)
    raised.load_state_dict(json_round_trip(older.state_dict()))
    assert older.floor_shares()[0] == 0.0 and raised.floor_shares()[0] == 0.2


# -- the evaluation's way from the trainer to the selector ------------------------------------------------------

PIPELINE = """
[run]
batch_size = 16
seed = 3
total_steps = 40
eval_every = 10
checkpoint_every = 10

[[tasksets]]
name = "graded"
storage_type = "simulated"
size = 400
levels = [1, 2, 3, 4]

[tasksets.selector]
type = "frontier"
feature_keys = ["level"]
discount = 0.95
retain = 1.0
retain_above = 0.6
guard_metric = "val_accuracy/{}"
guard_margin = 0.0
guard_raise = 1.0          # the guard as a switch, as GUARD above
guard_lower = 1.0
guard_min = 0.0

[[tasksets]]
name = "plain"
storage_type = "simulated"
size = 100
levels = [4]
seed = 1

[tasksets.selector]
type = "random"

[trainer]
type = "sliding_simulator"
group_size = 4
eval_levels = [1, 2, 3, 4]
"""

#: The simulator, with level 1's validation accuracy 0.1 lower at every other evaluation (a slide and a recovery;
#: the test split does not slide).
SLIDING = """\
from flexkit import hookimpl
from flexkit.run.simulator import SimulatorConfig, SimulatorTrainer


class Sliding(SimulatorTrainer):
    def validate(self, *, step):
        out = dict(super().validate(step=step))
        if (step // 10) % 2:
            out["val_accuracy/1"] -= 0.1
        return out


@hookimpl
def flexkit_register_trainers(register):
    register("sliding_simulator", Sliding, SimulatorConfig)
"""


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE)
    (tmp_path / "sliding.py").write_text(SLIDING)
    return path


def _load(path: Path):
    return load_pipeline(path, plugins=[str(path.parent / "sliding.py")])


def test_flexkit_run_hands_every_validation_and_no_test_evaluation_to_the_selectors(tmp_path: Path) -> None:
    run_pipeline(_load(_write(tmp_path)), run_dir=tmp_path / "run", progress=None)
    evals = [m for m in read_metrics(tmp_path / "run") if "flexkit/eval/accuracy" in m]
    assert len(evals) == 5 and all("flexkit/val/accuracy" in m for m in evals)  # both splits recorded, each time
    state, _ = load_state(tmp_path / "run" / "checkpoint")
    held = state["pipeline"]["scheduler"]["selectors"][0]["held_out"]
    assert held["evaluated"].all()
    assert held["latest"].tolist() == [evals[-1][f"flexkit/val/accuracy/{level}"] for level in range(1, 5)]
    assert held["best"][0] == max(m["flexkit/val/accuracy/1"] for m in evals)
    # the test split differs (other tasks, and it does not slide): the guard's values are not its
    assert held["latest"].tolist() != [evals[-1][f"flexkit/eval/accuracy/{level}"] for level in range(1, 5)]
    assert held["best"][0] != max(m["flexkit/eval/accuracy/1"] for m in evals)


def test_flexkit_run_hands_the_selectors_only_what_validate_returns(tmp_path: Path) -> None:
    pipe = _load(_write(tmp_path))
    seen: list[dict] = []
    pipe.scheduler.entries[1].selector.observe_evaluation = seen.append  # a recording selector
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    records = [m for m in read_metrics(tmp_path / "run") if "flexkit/val/accuracy" in m]
    assert len(seen) == len(records) == 5
    for got, record in zip(seen, records, strict=True):
        assert got and all(key.startswith("val_accuracy") for key in got)  # no test name reaches a selector
        recorded = {key: v for key, v in record.items() if key.startswith("flexkit/val/")}
        assert {key.replace("val_accuracy", "flexkit/val/accuracy", 1): v for key, v in got.items()} == recorded


def test_a_trainer_without_a_validation_split_hands_the_selectors_nothing(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.replace('guard_metric = "val_accuracy/{}"\n', 'guard_metric = ""\n')
                    .replace("sliding_simulator", "plain"))
    (tmp_path / "plain.py").write_text(NO_VALIDATION)
    pipe = load_pipeline(path, plugins=[str(tmp_path / "plain.py")])
    seen: list[dict] = []
    pipe.scheduler.entries[1].selector.observe_evaluation = seen.append
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    records = read_metrics(tmp_path / "run")
    assert seen == []
    assert any("flexkit/eval/accuracy" in m for m in records)
    assert not any(key.startswith("flexkit/val/") for m in records for key in m)


def test_a_guard_with_a_trainer_without_a_validation_split_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(PIPELINE.replace("sliding_simulator", "plain"))
    (tmp_path / "plain.py").write_text(NO_VALIDATION)
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric.*no validation split"):
        run_pipeline(load_pipeline(path, plugins=[str(tmp_path / "plain.py")]), run_dir=tmp_path / "run",
                     progress=None)


#: The simulator without its validation split (the trainer base's default).
NO_VALIDATION = """\
from flexkit import hookimpl
from flexkit.run.simulator import SimulatorConfig, SimulatorTrainer


class Plain(SimulatorTrainer):
    supports_validation = False


@hookimpl
def flexkit_register_trainers(register):
    register("plain", Plain, SimulatorConfig)
"""


@pytest.mark.parametrize("template", ["eval_accuracy/{}", "eval_accuracy", "flexkit/eval/accuracy/{}"])
def test_a_guard_that_reads_the_test_split_is_refused_with_the_migration(tmp_path: Path, template: str) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(_write(tmp_path).read_text().replace('"val_accuracy/{}"', f'"{template}"'))
    fix = "val_accuracy" + template.removeprefix("eval_accuracy") if template.startswith("eval_") else "val_accuracy/{}"
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector.*reads the test split.*set guard_metric = "
                                          + re.escape(repr(fix))):
        _load(path)
    with pytest.raises(ConfigError, match="reads the test split"):
        _guarded(guard_metric=template)


def test_a_slide_in_a_run_moves_draws_to_the_solved_level_until_the_next_evaluation(tmp_path: Path) -> None:
    def level_1_draws(slide: float) -> list[int]:
        folder = tmp_path / str(slide)
        folder.mkdir()
        path = _write(folder)
        (folder / "sliding.py").write_text(SLIDING.replace("-= 0.1", f"-= {slide}"))
        run_pipeline(_load(path), run_dir=folder / "run", progress=None)
        return [m["flexkit/level_mix"].get("1", 0) for m in read_metrics(folder / "run")[1:]]

    sliding, holding = level_1_draws(0.1), level_1_draws(0.0)
    # evaluations after steps 0-9, 10-19, 20-29: level 1 slides at the first and the third. Step 10's batch was
    # selected before the evaluation, in the background, so steps 11-19 and 31-39 see the slide
    assert sliding[:11] == holding[:11]
    slid = slice(11, 20), slice(31, 40)
    assert sum(sum(sliding[s]) for s in slid) > 1.25 * sum(sum(holding[s]) for s in slid)


def test_a_run_with_the_guard_resumes_exactly_after_a_crash(tmp_path: Path) -> None:
    path = _write(tmp_path)
    run_pipeline(_load(path), run_dir=tmp_path / "whole", progress=None)
    crash_run(_load(path), tmp_path / "crashed", 35)  # checkpoint after step 30, where level 1 slides
    run_pipeline(_load(path), run_dir=tmp_path / "crashed", resume=True, progress=io.StringIO())
    whole = [json.dumps(m, sort_keys=True) for m in without_clock(read_metrics(tmp_path / "whole"))]
    resumed = [json.dumps(m, sort_keys=True) for m in without_clock(read_metrics(tmp_path / "crashed"))]
    assert resumed == whole


def test_a_selector_that_fails_on_an_evaluation_is_named(tmp_path: Path) -> None:
    pipe = _load(_write(tmp_path))

    def broken(metrics):
        raise RuntimeError("cannot read it")

    pipe.scheduler.entries[1].selector.observe_evaluation = broken
    with pytest.raises(ComponentError, match=r"taskset 'plain'.*cannot read it.*evaluation"):
        pipe.evaluation({"val_accuracy/1": 1.0})


@pytest.mark.parametrize("bad", [None, 0.5, [("val_accuracy/1", 1.0)], "val_accuracy/1"])
def test_an_evaluation_that_is_not_a_mapping_is_refused_before_any_selector_sees_it(tmp_path: Path, bad) -> None:
    """Regression: used to fail inside ``dict()`` ("'float' object is not iterable"), or to take a list of
    pairs as an evaluation."""
    pipe = _load(_write(tmp_path))
    seen: list[dict] = []
    pipe.scheduler.entries[1].selector.observe_evaluation = seen.append
    with pytest.raises(FeedbackError, match=r"an evaluation is a mapping of metric name to value.*got "):
        pipe.evaluation(bad)
    assert seen == []


def test_each_selector_gets_its_own_copy_of_the_evaluation(tmp_path: Path) -> None:
    pipe = _load(_write(tmp_path))
    seen: list[dict] = []
    pipe.scheduler.entries[0].selector.observe_evaluation = lambda metrics: metrics.clear()
    pipe.scheduler.entries[1].selector.observe_evaluation = seen.append
    given = {"val_accuracy/1": 1.0}
    pipe.evaluation(given)
    assert seen == [{"val_accuracy/1": 1.0}] and given == {"val_accuracy/1": 1.0}


def test_plugin_selectors_without_the_method_are_skipped_and_a_prefetched_batch_keeps_its_tasks(
        tmp_path: Path) -> None:
    first, second = _load(_write(tmp_path)), _load(_write(tmp_path))
    for pipe in (first, second):
        pipe.scheduler.entries[1].selector = _NoEvaluation(pipe.scheduler.entries[1].selector)
        pipe.scheduler.read()
    first.evaluation({"val_accuracy/1": 1.0, "val_accuracy/2": 1.0})
    assert first.scheduler.entries[0].selector.held_out.best[:2].tolist() == [1.0, 1.0]
    assert [t.index for t in first.scheduler.read()] == [t.index for t in second.scheduler.read()]


class _NoEvaluation:
    """A selector as a plugin may write it: the protocol's methods only, no ``observe_evaluation``."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def get_indices(self, batch_size, return_extra_info=False):
        return self._inner.get_indices(batch_size, return_extra_info)

    def feedback(self, indices, values, *, out_of_range="clip"):
        self._inner.feedback(indices, values, out_of_range=out_of_range)

    def state_dict(self):
        return self._inner.state_dict()

    def load_state_dict(self, state):
        self._inner.load_state_dict(state)


def test_a_guard_without_a_floor_to_spend_is_refused(tmp_path: Path) -> None:
    """Regression: ``guard_metric`` with ``retain = 0`` was accepted and did nothing."""
    path = tmp_path / "guard.toml"
    path.write_text(_write(tmp_path).read_text().replace("retain = 1.0", "retain = 0.0"))
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector.*guard_metric = 'val_accuracy/\{\}'.*retain = 0"):
        _load(path)


def test_a_run_whose_guard_read_the_test_split_does_not_resume_under_the_new_name_and_says_why(
        tmp_path: Path) -> None:
    """A checkpoint of flexkit before the split records guard_metric = "eval_accuracy/{}": its selections saw the
    test split, so it does not continue under "val_accuracy/{}" (the guard's state itself, per group, would load)."""
    import copy

    from flexkit.pipeline._fingerprint import compare_fingerprints, fingerprint_hints

    pipe = _load(_write(tmp_path))
    old = copy.deepcopy(pipe.fingerprint())
    old["tasksets"][0]["params"]["guard_metric"] = "eval_accuracy/{}"
    diffs = compare_fingerprints(old, pipe.fingerprint(), pipe, "old")
    assert diffs == ["tasksets[0].params.guard_metric: 'eval_accuracy/{}' in the checkpoint, 'val_accuracy/{}' now"]
    assert "steered on the test split" in " ".join(fingerprint_hints(diffs))
    state = json_round_trip(pipe.state_dict(), back_to_arrays=True)
    _load(_write(tmp_path)).load_state_dict(state)  # the held-out state is per group, whatever the names


def test_the_summary_holds_each_groups_floor_and_guard_share() -> None:
    """What ``flexkit plot`` draws per group: the floor a learnt group keeps (0 while not learnt) and the guard's
    share, which a slide raises and a hold lowers to ``guard_min``."""
    sel = _guarded(guard_min=0.25, guard_raise=0.5, guard_lower=0.25)
    sel.feedback(np.arange(0, 200), np.ones(200))  # level 1 learnt (its 200 tasks solved)
    sel.observe_evaluation({f"val_accuracy/{level}": 1.0 for level in range(1, 7)})
    sel.observe_evaluation({"val_accuracy/1": 0.5, **{f"val_accuracy/{level}": 1.0 for level in range(2, 7)}})
    summary = sel.summary()
    assert summary["guard_share/level=1"] == 0.75 and summary["floor_share/level=1"] == 0.75  # raised by the slide
    assert summary["guard_share/level=2"] == 0.25 and summary["floor_share/level=2"] == 0.0  # held; not learnt
    plain = make_selector("frontier", size=len(LEVELS), seed=0, features={"level": LEVELS}, feature_keys=["level"],
                          retain=0.0)  # no floor, so no guard
    assert not any(key.startswith(("floor_share/", "guard_share/")) for key in plain.summary())


def test_regression_flexkit_run_records_each_groups_floor_and_guard_share(tmp_path: Path) -> None:
    """``metrics.jsonl`` held no per-group floor or guard share for ``flexkit plot`` to draw: each step's record now
    holds the selectors' summaries under the host metrics' names, after the step's evaluation."""
    run_pipeline(_load(_write(tmp_path)), run_dir=tmp_path / "run", progress=None)
    records = read_metrics(tmp_path / "run")[1:]
    pipe = _load(tmp_path / "pipeline.toml")
    pipe.load_checkpoint(tmp_path / "run" / "checkpoint")
    last = pipe.scheduler.entries[0].selector.summary()
    assert {f"flexkit/selector/graded/{key}": value for key, value in last.items()} == {
        key: value for key, value in records[-1].items() if key.startswith("flexkit/selector/graded/")}
    assert {"flexkit/selector/graded/floor_share/level=1", "flexkit/selector/graded/guard_share/level=1"} <= set(
        records[-1])
    floors = [m["flexkit/selector/graded/floor_share/level=1"] for m in records]
    assert floors[0] == 0.0 and max(floors) > 0  # not learnt at first; learnt and given the floor later
    assert not any(key.startswith("flexkit/selector/plain/") for key in records[-1])  # random keeps no summary


def test_regression_groups_the_first_evaluation_does_not_name_are_reported_not_silently_unguarded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A training group with no validation rows (a TRL eval_dataset without one of the sources, say) was never
    guarded, and nothing said so; the first evaluation that lacks some groups' metrics now warns, naming them,
    once, and changes nothing else (those groups get no floor until an evaluation names them)."""
    from structlog.testing import capture_logs

    from flexkit import _log

    monkeypatch.setattr(_log, "_cli_format", None)  # library use (a CLI test in this process may have set it)
    sel = _guarded()
    with capture_logs() as logs:
        sel.observe_evaluation({"val_accuracy/1": 1.0, "val_accuracy/2": 0.9, "eval_loss": 0.3})
        sel.observe_evaluation({"val_accuracy/1": 0.9})  # not the first: no second warning
    warned = [entry for entry in logs if entry["event"] == "guard_groups_not_evaluated"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert warned[0]["missing"] == [f"val_accuracy/{level}" for level in range(3, 7)]
    # it lists what the evaluation holds of the guard's own metrics, not every metric of the evaluation
    assert "It holds: val_accuracy/1, val_accuracy/2." in warned[0]["message"]
    assert "eval_loss" not in warned[0]["message"]
    assert sel.held_out.state_dict()["evaluated"].tolist() == [True, True, False, False, False, False]
    with capture_logs() as logs:
        _guarded().observe_evaluation({f"val_accuracy/{level}": 1.0 for level in range(1, 7)})
    assert not [entry for entry in logs if entry["event"] == "guard_groups_not_evaluated"]
    with capture_logs() as logs:  # named, but with no value (a group with no scored rows): unguarded all the same
        _guarded().observe_evaluation({**{f"val_accuracy/{level}": 1.0 for level in range(1, 5)},
                                       "val_accuracy/5": float("nan"), "val_accuracy/6": None})
    warned = [entry for entry in logs if entry["event"] == "guard_groups_not_evaluated"]
    assert [entry["missing"] for entry in warned] == [["val_accuracy/5", "val_accuracy/6"]]
