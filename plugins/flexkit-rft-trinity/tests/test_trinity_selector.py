"""flexkit selectors inside Trinity-RFT's own TasksetScheduler, config check, explorer checkpoint and monitor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trinity", reason="the Trinity-RFT adapter's tests need trinity-rft (the test extra)")

import numpy as np
from flexkit_trinity import FlexkitSelector, state
from trinity_testkit import FLEXKIT, checked, checkpoint, config_yaml, run, taskset, write_taskset

from flexkit import CheckpointError, ConfigError

FEATURES = ["weak", "strong"]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_taskset(tmp_path / "math", 40)


def two_tasksets(tmp_path: Path, data: Path, **top: object) -> Path:
    """A learning selector (Thompson-free difficulty_based with tau > 0: RNG and estimates) and a shuffle."""
    other = write_taskset(tmp_path / "code", 24, seed=1)
    return config_yaml(tmp_path, [
        taskset("math", data, feature_keys=FEATURES, selector="difficulty_based", m=8, tau=0.3, target_reward=0.5),
        taskset("code", other, selector="shuffle", seed=7),
    ], **top)


def test_the_yaml_selects_flexkit_selectors_in_trinitys_scheduler(tmp_path: Path, data: Path) -> None:
    config = checked(two_tasksets(tmp_path, data))
    batches, scheduler = run(config, range(5))
    assert type(scheduler).__name__ == "TasksetScheduler"
    selectors = [t.reader.selector for t in scheduler.tasksets]
    assert all(isinstance(s, FlexkitSelector) for s in selectors)
    assert [s.selector_name for s in selectors] == ["difficulty_based", "shuffle"]
    assert all(len(b) == 4 for b in batches)
    assert selectors[0].selector.num_feedback > 0  # Trinity's feedback reached the flexkit selector


@pytest.mark.parametrize("cut", [3, 16, 22])  # 64 tasks / batch 4: an epoch is 16 steps
def test_resume_through_trinitys_explorer_checkpoint_is_exact(tmp_path: Path, data: Path, cut: int) -> None:
    config = checked(two_tasksets(tmp_path, data))
    steps = 30
    straight, _ = run(config, range(steps))
    first, scheduler = run(config, range(cut))
    saved = checkpoint(config, cut, scheduler)
    math_state = saved["taskset_states"][0]
    assert set(math_state) == {"current_index", "flexkit"}  # the estimator travels, not only a position
    rest, resumed = run(config, range(cut, steps), state=saved)
    assert first + rest == straight
    before = scheduler.tasksets[0].reader.selector.selector
    after = resumed.tasksets[0].reader.selector.selector
    assert after.num_feedback > before.num_feedback  # the resumed selector went on learning


def test_trinitys_own_difficulty_based_keeps_only_a_position(tmp_path: Path, data: Path) -> None:
    path = config_yaml(tmp_path, [taskset("math", data, selector_type="difficulty_based", feature_keys=FEATURES,
                                          m=8, tau=0.0, target_reward=0.5)])
    config = checked(path)
    straight, _ = run(config, range(10))
    first, scheduler = run(config, range(5))
    saved = checkpoint(config, 5, scheduler)
    assert saved["taskset_states"] == [{"current_index": 20}]
    rest, _ = run(config, range(5, 10), state=saved)
    assert first + rest != straight  # its Beta posteriors restart from Beta(1, 1) after a resume


def test_bad_parameters_fail_in_trinitys_config_check_with_key_paths(tmp_path: Path, data: Path) -> None:
    path = config_yaml(tmp_path, [
        taskset("math", data, feature_keys=FEATURES, selector="difficulty_based", tau=-1, tua=2),
        taskset("code", data, selector="no_such_selector"),
        taskset("more", data, feature_keys=["weak"], selector="shuffle"),
    ])
    with pytest.raises(ConfigError) as caught:
        checked(path)
    paths = {issue.path for issue in caught.value.issues}
    assert paths == {"buffer.explorer_input.tasksets[0].data_selector.kwargs.tau",
                     "buffer.explorer_input.tasksets[0].data_selector.kwargs.tua",
                     "buffer.explorer_input.tasksets[1].data_selector.kwargs.selector",
                     "buffer.explorer_input.tasksets[2].data_selector.feature_keys"}
    assert "did you mean 'tau'" in str(caught.value)


def test_a_missing_selector_name_and_a_bad_feature_count_are_reported(tmp_path: Path, data: Path) -> None:
    path = config_yaml(tmp_path, [taskset("math", data, feature_keys=["weak"], selector="difficulty_based"),
                                  taskset("code", data, m=3)])
    with pytest.raises(ConfigError) as caught:
        checked(path)
    assert {i.path for i in caught.value.issues} == {
        "buffer.explorer_input.tasksets[0].data_selector.feature_keys",
        "buffer.explorer_input.tasksets[1].data_selector.kwargs.selector"}


def test_a_missing_feature_column_fails_when_trinity_builds_the_reader(tmp_path: Path, data: Path) -> None:
    config = checked(config_yaml(tmp_path, [taskset("math", data, feature_keys=["weak", "nope"],
                                                    selector="difficulty_based")]))
    with pytest.raises(ConfigError, match=r"taskset 'math': data_selector\.feature_keys: column 'nope'"):
        run(config, range(1))


def test_a_checkpoint_of_another_selector_is_refused(tmp_path: Path, data: Path) -> None:
    config = checked(config_yaml(tmp_path, [taskset("math", data, selector="shuffle")]))
    _, scheduler = run(config, range(2))
    saved = checkpoint(config, 2, scheduler)
    other = checked(config_yaml(tmp_path / "b", [taskset("math", data, selector="random")]))
    with pytest.raises(CheckpointError, match="'shuffle' over 40 tasks, but the config builds 'random'"):
        run(other, range(1), state=saved)


def test_the_state_survives_json_exactly() -> None:
    original = {"alpha": np.arange(5, dtype=np.float64) / 3, "n": np.int64(4), "rng": {"state": 2**100},
                "pairs": {(1, 2): [np.float32(0.5)]}, "empty": np.zeros((0, 2), dtype=np.int32)}
    back = state.decode(json.loads(json.dumps(state.encode(original))))
    assert np.array_equal(back["alpha"], original["alpha"]) and back["alpha"].dtype == np.float64
    assert back["empty"].shape == (0, 2) and back["empty"].dtype == np.int32
    assert back["n"] == 4 and back["rng"] == {"state": 2**100} and back["pairs"] == {(1, 2): [0.5]}
    with pytest.raises(ValueError, match="not a flexkit selector state"):
        state.decode({"format": 99})


def test_the_monitor_adds_flexkit_metrics_to_trinitys_tensorboard(tmp_path: Path, data: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trinity.utils.monitor import MONITOR

    config = checked(two_tasksets(tmp_path, data, monitor={"monitor_type": "flexkit_trinity.FlexkitMonitor",
                                                          "monitor_args": {"flexkit_wraps": "tensorboard"}}))
    _, scheduler = run(config, range(3))
    monitor = MONITOR.get(config.monitor.monitor_type)(project=config.project, group=config.group,
                                                       name=config.name, role="explorer", config=config)
    monitor.log({"rollout/model_version": 0.0}, step=3)
    monitor.log({"explore/time/sync_interval": 1.0}, step=3)  # the same step: added once
    monitor.close()
    events = EventAccumulator(str(Path(config.monitor.cache_dir) / "tensorboard" / "explorer"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert "flexkit/selector/math/predicted_pass_rate_mean" in tags and "rollout/model_version" in tags
    value = events.Scalars("flexkit/selector/math/predicted_pass_rate_mean")
    assert len(value) == 1 and 0.0 < value[0].value < 1.0
    estimate = scheduler.tasksets[0].reader.selector.metrics()["flexkit/selector/math/predicted_pass_rate_mean"]
    assert value[0].value == pytest.approx(estimate, rel=1e-6)


def test_selector_type_resolves_through_trinitys_registry() -> None:
    from trinity.buffer.selector import SELECTORS

    assert SELECTORS.get(FLEXKIT) is FlexkitSelector


def test_regression_a_guard_trinity_never_feeds_is_refused(tmp_path: Path, data: Path) -> None:
    """A guarded frontier used to be accepted and never see an evaluation (Trinity-RFT hands a data selector
    none): it is refused where the selector is built, naming the key and what to do."""
    config = checked(config_yaml(tmp_path, [
        taskset("math", data, feature_keys=["weak"], selector="frontier", bins=2, retain=1.0,
                guard_metric="val_accuracy"),
    ]))
    with pytest.raises(ConfigError, match=r"data_selector\.guard_metric: the Trinity-RFT data selector .* does not "
                                          r"honour this.*turn the guard off \(guard_metric = \"\""):
        run(config, range(1))
    plain = checked(config_yaml(tmp_path, [taskset("math", data, feature_keys=["weak"], selector="frontier",
                                                   bins=2)]))
    batches, _ = run(plain, range(2))  # the same selector without the guard runs
    assert all(len(b) == 4 for b in batches)


def test_the_recipes_default_guard_is_refused_and_runs_turned_off(tmp_path: Path, data: Path) -> None:
    """frontier grouped by a column guards by default: Trinity-RFT refuses it, naming how to turn it off."""
    guarded = checked(config_yaml(tmp_path, [taskset("math", data, feature_keys=["level"], selector="frontier")]))
    with pytest.raises(ConfigError, match=r"data_selector\.guard_metric.*guard_metric = \"\""):
        run(guarded, range(1))
    off = checked(config_yaml(tmp_path, [taskset("math", data, feature_keys=["level"], selector="frontier",
                                                 guard_metric="")]))
    batches, _ = run(off, range(2))
    assert all(len(b) == 4 for b in batches)
