"""Resuming any registered selector (built-ins and installed plugins, from the plugin registry) from its
state_dict continues exactly the uninterrupted stream, and the state is plain data (survives a JSON round trip).
A newly registered selector is covered with its default config; the ones below also get hand-picked variants."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexkit.selectors import (
    DifficultyBasedConfig,
    DifficultyBasedSelector,
    LearnabilityConfig,
    LearnabilitySelector,
    OfflineEasy2HardConfig,
    OfflineEasy2HardSelector,
    PrioritizedReplayConfig,
    PrioritizedReplaySelector,
    Selector,
    TargetDifficultyConfig,
    TargetDifficultySelector,
    ThompsonTargetConfig,
    ThompsonTargetSelector,
    ZeroVarianceSkipConfig,
    ZeroVarianceSkipSelector,
)
from flexkit.testing._registry import default_config, feature_columns, host, registered, synthetic_features

#: Every registered selector: one added to the registry gets resume coverage without an edit here.
KINDS = [c.name for c in registered("selector")]

#: Two parameter variants of each selector from the literature (docs/algorithms.md): defaults, and one that
#: exercises the other code paths (sampling temperature, forgetting, buffer eviction, pools).
ALGORITHM_VARIANTS: dict[str, list[tuple[type, dict[str, Any]]]] = {
    "learnability": [(LearnabilityConfig, {}), (LearnabilityConfig, {"tau": 0.5, "decay": 0.8, "candidates": 1.5})],
    "thompson_target": [(ThompsonTargetConfig, {}), (ThompsonTargetConfig, {"discount": 1.0, "target": 0.3, "m": 3})],
    "zero_variance_skip": [(ZeroVarianceSkipConfig, {}),
                           (ZeroVarianceSkipConfig, {"p_easy": 0.2, "adjust_step": 0.1, "tolerance": 0.2})],
    "target_difficulty": [(TargetDifficultyConfig, {"feature_keys": ("f0",)}),
                          (TargetDifficultyConfig,
                           {"feature_keys": ("f1",), "harder": "lower", "pool": 2.0, "eta": 0.3})],
    "prioritized_replay": [(PrioritizedReplayConfig, {}),
                           (PrioritizedReplayConfig, {"buffer_size": 3, "replay_prob": 0.9, "staleness": 0.5})],
}
ALGORITHM_CLASSES: dict[str, type] = {
    "learnability": LearnabilitySelector,
    "thompson_target": ThompsonTargetSelector,
    "zero_variance_skip": ZeroVarianceSkipSelector,
    "target_difficulty": TargetDifficultySelector,
    "prioritized_replay": PrioritizedReplaySelector,
}


def json_round_trip(state: dict[str, Any], *, back_to_arrays: bool = True) -> dict[str, Any]:
    """Serialise a state as strict JSON (arrays as lists via ``.tolist()``; nothing else is allowed) and parse
    it back, turning lists into arrays with ``np.asarray`` when ``back_to_arrays``."""

    def default(obj: object) -> object:
        if isinstance(obj, np.ndarray):
            return obj.tolist()
        raise TypeError(f"state holds a {type(obj).__name__}, which is not plain data")

    loaded = json.loads(json.dumps(state, default=default, allow_nan=False))
    return _lists_to_arrays(loaded) if back_to_arrays else loaded


def _lists_to_arrays(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _lists_to_arrays(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return np.asarray(obj)
    return obj


def build(kind: str, n: int, seed: Any, params: dict[str, Any]) -> Selector:
    """A selector of ``kind`` over ``n`` tasks with deterministic features."""
    frng = np.random.default_rng(n)
    features = {"f0": frng.random(n) * 0.5, "f1": 0.5 + frng.random(n) * 0.5, "len": frng.integers(0, 4, n)}
    if kind == "offline_easy2hard":
        cfg = OfflineEasy2HardConfig(feature_keys=("len", "f0"), order=params.get("order", "descending"))
        return OfflineEasy2HardSelector(cfg, size=n, seed=seed, features=features)
    variant = params.pop("variant", 0)
    if kind in ALGORITHM_VARIANTS:
        config_cls, kwargs = ALGORITHM_VARIANTS[kind][variant]
        return ALGORITHM_CLASSES[kind](config_cls(**kwargs), size=n, seed=seed, features=features)
    if kind == "difficulty_based":
        fold_below = params.pop("fold_below", None)
        sel = DifficultyBasedSelector(DifficultyBasedConfig(**params), size=n, seed=seed, features=features)
        if fold_below is not None:
            sel.fold_below = fold_below
        return sel
    # any other registered selector: its default config, synthetic columns for the features it names
    component = host().component("selector", kind)
    config = default_config(component)
    extra = synthetic_features([k for k in feature_columns(config) if k not in features], n)
    return component.build(config, size=n, seed=seed, features={**features, **extra})


def step(sel: Selector, batch_size: int, plan: np.random.Generator) -> list[int]:
    """One training step: select, then feed back (sometimes late or partial) values drawn from ``plan``."""
    idx = sel.get_indices(batch_size)
    values = plan.random(sel.size)
    late = plan.random() < 0.3
    fb = np.unique(idx) if not late else plan.choice(sel.size, size=plan.integers(1, sel.size + 1), replace=False)
    if plan.random() < 0.8:
        sel.feedback(fb, values[: fb.size])
    return idx.tolist()


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert json_round_trip(a, back_to_arrays=False) == json_round_trip(b, back_to_arrays=False)


difficulty_params = st.fixed_dictionaries(
    {
        "m": st.integers(1, 32),
        "lamb": st.sampled_from([0.0, 0.2, 0.9]),
        "rho": st.sampled_from([0.0, 0.2, 1.0]),
        "adaptive_rho": st.booleans(),
        "target_reward": st.sampled_from([0.5, 1.0]),
        "tau": st.sampled_from([0.0, 0.5, 2.0]),
        "do_sample": st.booleans(),
        "fold_below": st.sampled_from([1e-30, 0.3]),
        "variant": st.integers(0, 1),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 25),
    seed=st.integers(0, 2**63),
    plan_seed=st.integers(0, 2**32),
    before=st.integers(0, 8),
    after=st.integers(1, 6),
    params=difficulty_params,
    order=st.sampled_from(["descending", "ascending"]),
    back_to_arrays=st.booleans(),
)
def test_resume_continues_the_uninterrupted_stream(
    kind: str,
    n: int,
    seed: int,
    plan_seed: int,
    before: int,
    after: int,
    params: dict[str, Any],
    order: str,
    back_to_arrays: bool,
) -> None:
    params = {**params, "order": order} if kind == "offline_easy2hard" else dict(params)
    sizes = np.random.default_rng(plan_seed).integers(1, n + 1, size=before + after).tolist()

    straight = build(kind, n, seed, dict(params))
    plan = np.random.default_rng(plan_seed + 1)
    expected = [step(straight, k, plan) for k in sizes]

    first = build(kind, n, seed, dict(params))
    plan = np.random.default_rng(plan_seed + 1)
    got = [step(first, k, plan) for k in sizes[:before]]
    state = json_round_trip(first.state_dict(), back_to_arrays=back_to_arrays)
    resumed = build(kind, n, seed + 1, dict(params))  # another seed: the RNG must come from the state
    resumed.load_state_dict(state)
    got += [step(resumed, k, plan) for k in sizes[before:]]

    assert got == expected
    assert_same_state(resumed.state_dict(), straight.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_resume_after_every_step(kind: str) -> None:
    params: dict[str, Any] = {}
    if kind == "difficulty_based":  # every piece of state in play: Thompson draws, Gumbel noise, ρ, folds
        params = {"tau": 0.5, "do_sample": True, "adaptive_rho": True, "lamb": 0.9, "fold_below": 0.3}
    if kind in ALGORITHM_VARIANTS:
        params = {"variant": 1}
    straight = build(kind, 5, 3, dict(params))
    plan = np.random.default_rng(0)
    expected = [step(straight, 3, plan) for _ in range(20)]

    sel = build(kind, 5, 3, dict(params))
    plan = np.random.default_rng(0)
    got = []
    for i in range(20):
        got.append(step(sel, 3, plan))
        fresh = build(kind, 5, 100 + i, dict(params))
        fresh.load_state_dict(json_round_trip(sel.state_dict()))
        sel = fresh
    assert got == expected


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_is_a_snapshot(kind: str) -> None:
    sel = build(kind, 6, 0, {})
    plan = np.random.default_rng(1)
    step(sel, 4, plan)
    state = sel.state_dict()
    frozen = json_round_trip(state, back_to_arrays=False)
    for _ in range(3):
        step(sel, 4, plan)
    assert json_round_trip(state, back_to_arrays=False) == frozen


@pytest.mark.parametrize("kind", ["shuffle", "difficulty_based", "learnability", "thompson_target",
                                  "zero_variance_skip"])
def test_state_of_another_size_is_refused(kind: str) -> None:
    small = build(kind, 4, 0, {})
    small.get_indices(2)
    with pytest.raises(ValueError, match="shape"):
        build(kind, 5, 0, {}).load_state_dict(small.state_dict())


def _pipeline(tmp_path: Any, selector: str) -> Any:
    from flexkit import load_pipeline

    rows = [{"prompt": f"p{i}", "level": 1 + i % 4, "weak_pass_rate": (i % 7) / 7} for i in range(40)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "p.toml").write_text(
        '[run]\nbatch_size = 8\ntotal_steps = 3\n\n[[tasksets]]\nname = "t"\npath = "tasks.jsonl"\n\n'
        f"[tasksets.selector]\n{selector}\n")
    pipe = load_pipeline(tmp_path / "p.toml")
    tasks = pipe.scheduler.read()
    pipe.feedback([{"reward": float(t.index % 2), "taskset_id": t.taskset_id, "index": t.index} for t in tasks])
    return pipe


@pytest.mark.parametrize(("saved", "loading", "message"), [
    ('type = "learnability"', 'type = "learnability"\nfeature_keys = ["level"]', "no 'groups'"),
    ('type = "learnability"', 'type = "learnability"\nexplore = true\nfeature_keys = ["level"]', "no 'groups'"),
    ('type = "frontier"\nfeature_keys = ["level"]', 'type = "frontier"\nfeature_keys = ["weak_pass_rate"]\nbins = 4',
     "another feature_keys or bins"),
    ('type = "random"', 'type = "frontier"\nfeature_keys = ["level"]', "groups"),
])
def test_a_state_of_another_selector_config_is_refused_and_changes_nothing(
        tmp_path: Any, saved: str, loading: str, message: str) -> None:
    from flexkit.errors import StateMismatchError

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    state = _pipeline(tmp_path / "a", saved).state_dict()
    pipe = _pipeline(tmp_path / "b", loading)
    before = json_round_trip(pipe.state_dict(), back_to_arrays=False)
    with pytest.raises(StateMismatchError, match=message):
        pipe.load_state_dict(state)
    assert json_round_trip(pipe.state_dict(), back_to_arrays=False) == before


@pytest.mark.parametrize("damage", [
    lambda s: s.pop("informative"),
    lambda s: s.update(groups="x"),
    lambda s: s.update(informative="ab"),
    lambda s: s.update(rng=3),
    lambda s: s["held_out"].update(evaluated=["x", "y", "z", "w"]),
])
def test_a_damaged_frontier_state_is_refused_with_state_mismatch(tmp_path: Any, damage: Any) -> None:
    from flexkit.errors import StateMismatchError

    pipe = _pipeline(tmp_path, 'type = "frontier"\nfeature_keys = ["level"]\nretain = 1.0\n'
                               'guard_metric = "val_accuracy/{}"')
    state = json_round_trip(pipe.state_dict(), back_to_arrays=False)
    damage(state["scheduler"]["selectors"][0])
    with pytest.raises(StateMismatchError):
        pipe.load_state_dict(state)
