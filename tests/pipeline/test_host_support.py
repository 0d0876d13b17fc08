"""One rule for what a host does not honour (flexkit.host): every adapter and flexkit run refuse, before any
training, a pipeline part they would ignore, naming its key; flexkit validate --for HOST answers the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flexkit import ConfigError, load_pipeline, make_selector
from flexkit.host import HostSupport, check_support, pipeline_needs, selector_needs, unmet_needs
from flexkit.run._runner import check_run_support, new_trainer, run_support
from tests.fixtures import ROOT

QUICKSTART = ROOT / "examples" / "quickstart.toml"
SIMULATED = ROOT / "examples" / "simulated.toml"


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flexkit", "validate", *args], capture_output=True, text=True,
                          check=False, cwd=ROOT)


def _with(path: Path, tmp_path: Path, extra: str) -> Path:
    out = tmp_path / path.name
    out.write_text(path.read_text(encoding="utf-8").replace("eval_every = 25", extra), encoding="utf-8")
    return out


def test_the_quickstart_needs_replay_and_evaluations() -> None:
    needs = pipeline_needs(load_pipeline(QUICKSTART))
    assert [(n.part, n.key) for n in needs] == [("replay", "replay"),
                                                ("evaluation", "tasksets[0].selector.guard_metric"),
                                                ("group_accuracy", "tasksets[0].selector.guard_metric")]


def test_a_host_with_evaluations_but_not_per_group_accuracy_refuses_the_recipes_guard_once() -> None:
    """A host that hands its own validation metrics, never val_accuracy/<group> (verl's legacy trainer did, until
    it pooled its validation rewards by group): validate used to call the quickstart valid there and the trainer
    refused it at construction."""
    pipe = load_pipeline(QUICKSTART)
    own_names = HostSupport(name="h", replay=True, evaluation=True, group_accuracy=False,
                            advice={"group_accuracy": "name my metrics"})
    issues = unmet_needs(pipeline_needs(pipe), own_names)
    assert [i.path for i in issues] == ["tasksets[0].selector.guard_metric"]
    assert "reports each group's validation accuracy as val_accuracy/<group>; name my metrics" in issues[0].message
    none = HostSupport(name="h", replay=True)  # no evaluation at all: one issue for the key, not two
    assert [i.path for i in unmet_needs(pipeline_needs(pipe), none)] == ["tasksets[0].selector.guard_metric"]
    assert HostSupport(name="h", evaluation=True).group_accuracy  # by default wherever evaluations are given


def test_a_host_that_gives_nothing_refuses_every_need_with_its_advice() -> None:
    pipe = load_pipeline(QUICKSTART)
    host = HostSupport(name="my loop", advice={"replay": "do X instead"})
    with pytest.raises(ConfigError) as err:
        check_support(pipe, host)
    keys = [issue.path for issue in err.value.issues]
    assert keys == ["replay", "tasksets[0].selector.guard_metric"]
    assert "my loop does not honour this" in str(err.value) and "do X instead" in str(err.value)
    assert "remove tasksets[0].selector.guard_metric" in str(err.value)  # the default advice names the key
    check_support(pipe, HostSupport(name="all", replay=True, evaluation=True))  # nothing unmet: no error


def test_regression_flexkit_run_refuses_a_guard_with_no_evaluations() -> None:
    """[run] eval_every = 0 with guard_metric used to be accepted: the guard never fired, rc 0."""
    pipe = load_pipeline(QUICKSTART, overrides=["run.eval_every=0"])
    assert not run_support(pipe, new_trainer(pipe)).evaluation
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric.*eval_every = 0"):
        check_run_support(pipe, new_trainer(pipe))
    check_run_support(load_pipeline(QUICKSTART), new_trainer(load_pipeline(QUICKSTART)))


def test_regression_validate_refuses_a_guard_with_no_evaluations(tmp_path: Path) -> None:
    done = _validate(str(_with(QUICKSTART, tmp_path, "eval_every = 0")))
    assert done.returncode == 1 and "guard_metric" in done.stderr and "eval_every = 0" in done.stderr


@pytest.mark.parametrize(("host", "key"), [("ray", "replay")])
def test_validate_for_an_adapter_refuses_what_it_does_not_honour(host: str, key: str) -> None:
    pytest.importorskip(f"flexkit_{host}")
    done = _validate(str(QUICKSTART), "--for", host)
    assert done.returncode == 1, done.stdout
    assert f"{key}: " in done.stderr and "does not honour this" in done.stderr


def test_validate_for_verl_accepts_the_quickstart_with_its_replay_and_guard() -> None:
    """verl's v1 trainer refused the quickstart's [replay]; FlexkitV1TrainerMixin now trains on replayed groups, and
    validate lists what they need of verl's settings."""
    pytest.importorskip("flexkit_verl")
    done = _validate(str(QUICKSTART), "--for", "verl")
    assert done.returncode == 0, done.stderr
    assert "valid for verl's v1 trainer" in done.stdout and "needs at run time: replay: " in done.stdout


def test_validate_for_trl_accepts_the_quickstart_with_its_replay_and_guard() -> None:
    """Regression: TRL refused the quickstart's [replay]; FlexkitGRPOTrainer now trains on replayed groups."""
    pytest.importorskip("flexkit_trl")
    done = _validate(str(QUICKSTART), "--for", "trl")
    assert done.returncode == 0, done.stderr
    assert "valid for FlexkitGRPOTrainer (TRL)" in done.stdout


def test_validate_for_sampler_answers_for_the_torch_sampler_in_your_own_loop() -> None:
    """The core's own host (the flexkit.hosts entry point ``sampler``): a plain loop gives no part."""
    done = _validate(str(QUICKSTART), "--for", "sampler")
    assert done.returncode == 1, done.stdout
    assert "replay: FlexkitSampler in your own loop does not honour this" in done.stderr
    assert "tasksets[0].selector.guard_metric: FlexkitSampler in your own loop" in done.stderr
    plain = _validate(str(ROOT / "examples" / "multi_taskset_difficulty.toml"), "--for", "sampler")
    assert plain.returncode == 0, plain.stderr
    assert "valid for FlexkitSampler in your own loop" in plain.stdout


def test_validate_for_run_says_the_host_when_valid() -> None:
    done = _validate(str(QUICKSTART), "--for", "run")
    assert done.returncode == 0, done.stderr
    assert "valid for flexkit run with the trainer 'toyrl'" in done.stdout


def test_validate_for_an_unknown_host_names_the_known_ones() -> None:
    done = _validate(str(SIMULATED), "--for", "nosuch")
    assert done.returncode == 1 and "no such host installed (known: run" in done.stderr


def _guarded(**extra: object) -> object:
    levels = np.repeat(np.arange(1, 4), 10)
    return make_selector("frontier", size=levels.size, features={"level": levels}, feature_keys=["level"],
                         guard_metric="val_accuracy/{}", retain=1.0, **extra)


def test_a_selector_declares_the_keys_that_need_evaluations() -> None:
    assert [(n.part, n.key) for n in selector_needs(_guarded(), "data_selector")] == [
        ("evaluation", "data_selector.guard_metric"), ("group_accuracy", "data_selector.guard_metric")]
    levels = np.repeat(np.arange(1, 4), 10)
    plain = make_selector("frontier", size=levels.size, features={"level": levels}, feature_keys=["level"],
                          guard_metric="")
    assert selector_needs(plain, "data_selector") == []
    by_default = make_selector("frontier", size=levels.size, features={"level": levels}, feature_keys=["level"])
    assert {n.key for n in selector_needs(by_default, "s")} == {"s.guard_metric"}  # the recipe's guard
    assert unmet_needs(selector_needs(_guarded(), "s"), HostSupport(name="h", evaluation=True)) == []


def test_regression_a_guard_whose_metrics_the_first_evaluation_lacks_is_an_error() -> None:
    """A misspelt or unmatched guard_metric used to match nothing, silently, for the whole run."""
    selector = _guarded()
    with pytest.raises(ConfigError, match=r"none of the guard's metrics \(val_accuracy/1, val_accuracy/2"
                                          r".*it holds: eval_loss, eval_reward"):
        selector.observe_evaluation({"eval_reward": 0.5, "eval_loss": 1.0})


def test_regression_a_binned_guard_names_metrics_no_trainer_reports() -> None:
    levels = np.repeat(np.arange(1, 7), 10).astype(np.float64)
    selector = make_selector("frontier", size=levels.size, features={"level": levels}, feature_keys=["level"],
                             bins=2, guard_metric="val_accuracy/{}", retain=1.0)
    report = {f"val_accuracy/{k}": 0.5 for k in range(1, 7)}
    with pytest.raises(ConfigError, match="none of the guard's metrics"):
        selector.observe_evaluation(report)


def test_a_guard_that_saw_its_metrics_once_takes_later_evaluations_without_them() -> None:
    selector = _guarded()
    selector.observe_evaluation({f"val_accuracy/{k}": 0.5 for k in (1, 2, 3)})
    selector.observe_evaluation({"eval_reward": 0.5})  # evaluated before: a partial report is not an error
    assert selector.state_dict()["held_out"]["evaluated"].tolist() == [True, True, True]


def test_validate_lists_what_a_host_needs_at_run_time_for_the_parts_it_gives(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`flexkit validate --for trl` said "valid" for the quickstart without saying its guard needs an eval_dataset
    that train() evaluates; a host's requirements for the parts the pipeline uses are now listed, each once."""
    from flexkit.cli import _pipeline

    host = HostSupport(name="my host", replay=True, evaluation=True,
                       requirements={"evaluation": "a validation file", "replay": "one process",
                                     "sample": "never shown: the pipeline has no [sample]"})
    pipe = load_pipeline(QUICKSTART)
    assert host.run_time_requirements(pipe) == ["replay: one process",
                                                "tasksets[0].selector.guard_metric: a validation file"]
    assert HostSupport(name="none", replay=True, evaluation=True).run_time_requirements(pipe) == []
    monkeypatch.setattr(_pipeline, "host_support", lambda name: host)
    from flexkit.cli.main import main

    assert main(["validate", str(QUICKSTART), "--for", "mine"]) == 0
    out = capsys.readouterr().out
    assert "valid for my host\n  needs at run time: replay: one process\n" in out
    assert out.count("needs at run time") == 2
