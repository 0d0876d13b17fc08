"""The math of the components that came from DataFlex-RL's list (docs/porting-from-dataflex.md): GFPO and PODS
selectors (PODS against brute force), Advantage Reweighting and prioritised-replay reweighters, the DUMP and
TSCL mixers with their exact resume, the quantile mode of ``difficulty_band``, and ``softmax``'s mean at
B = 65,536."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from flexkit.config._converter import make_converter
from flexkit.errors import ConfigError, SampleError
from flexkit.sample import (
    AdvantageReweightConfig,
    AdvantageReweighter,
    DifficultyBandConfig,
    DifficultyBandReweighter,
    DumpUcbConfig,
    DumpUcbMixer,
    GfpoConfig,
    GfpoFilter,
    MaxVarianceConfig,
    MaxVarianceFilter,
    PerAdvantageConfig,
    PerAdvantageReweighter,
    RolloutBatch,
    SoftmaxConfig,
    SoftmaxReweighter,
    TsclConfig,
    TsclMixer,
)
from flexkit.sample.actuators.max_variance import max_variance_keep
from flexkit.sample.actuators.tscl import slopes
from tests.sample.test_algorithms_sample import crash_and_resume


def _responses(lengths: list[int], uid: list[int], taskset_id: list[int] | None = None) -> RolloutBatch:
    t = max(lengths)
    mask = torch.tensor(np.arange(t)[None, :] < np.asarray(lengths)[:, None], dtype=torch.int64)
    data = {"response_mask": mask, "uid": np.asarray(uid)}
    if taskset_id is not None:
        data["taskset_id"] = np.asarray(taskset_id)
    return RolloutBatch.from_dict(data)


# -- gfpo (GFPO, 2508.09726) --------------------------------------------------------------------------------


def test_gfpo_keeps_the_k_shortest_per_group_ties_to_the_earlier_sample() -> None:
    batch = _responses([5, 2, 9, 2, 7, 3, 3, 1], uid=[0, 0, 0, 0, 1, 1, 1, 1])
    keep = GfpoFilter(GfpoConfig(k=2, metric="short"))(torch.zeros(8), batch, step=0)
    assert keep.indices.tolist() == [1, 3, 5, 7]  # group 1: length 1 (7), then the tie 3 = 3 goes to 5
    keep = GfpoFilter(GfpoConfig(k=3, metric="short"))(torch.zeros(8), batch, step=0)
    assert keep.indices.tolist() == [0, 1, 3, 5, 6, 7]


def test_gfpo_efficiency_is_reward_per_token_and_small_groups_are_kept_whole() -> None:
    batch = _responses([4, 1, 2, 10, 5, 5], uid=["a", "a", "a", "a", "b", "b"])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # group a: 0.25, 0, 0.5, 0.1
    keep = GfpoFilter(GfpoConfig(k=2, metric="efficiency"))(rewards, batch, step=0)
    assert keep.indices.tolist() == [0, 2, 4, 5]
    empty = _responses([1, 1], uid=[0, 1])
    empty["response_mask"] = torch.zeros(2, 1)  # length clamped to 1: no division by zero
    assert GfpoFilter(GfpoConfig(k=1))(torch.tensor([1.0, 2.0]), empty, step=0).indices.tolist() == [0, 1]


def test_gfpo_needs_groups_and_masks() -> None:
    with pytest.raises(SampleError, match="'uid'"):
        GfpoFilter()(torch.zeros(2), RolloutBatch.from_dict({"response_mask": torch.ones(2, 1)}), step=0)
    with pytest.raises(ConfigError, match="metric"):
        make_converter().structure({"metric": "longest"}, GfpoConfig)


# -- max_variance (PODS, 2504.13818) ------------------------------------------------------------------------


def _brute_force_variance(values: np.ndarray, m: int) -> float:
    return max(float(np.var(values[list(c)])) for c in itertools.combinations(range(len(values)), m))


def _draw(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "binary":
        return rng.integers(0, 2, n).astype(float)
    if kind == "few_levels":
        return rng.integers(0, 4, n) / 3.0
    return rng.normal(size=n) + (1e6 if kind == "offset" else 0.0)


@pytest.mark.parametrize("kind", ["binary", "few_levels", "continuous", "offset"])
def test_max_variance_subset_is_optimal_against_brute_force(kind: str) -> None:
    rng = np.random.default_rng(["binary", "few_levels", "continuous", "offset"].index(kind))
    for _ in range(300):
        n = int(rng.integers(1, 10))
        m = int(rng.integers(1, n + 1))
        values = _draw(rng, kind, n)
        keep = max_variance_keep(values, np.zeros(n, dtype=np.int64), np.array([m]))
        assert keep.sum() == m
        assert np.var(values[keep]) == pytest.approx(_brute_force_variance(values, m), rel=1e-9, abs=1e-12)


def test_max_variance_many_groups_at_once_matches_each_group_alone() -> None:
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 9, size=40)
    gid = np.repeat(np.arange(40), sizes)
    perm = rng.permutation(len(gid))  # groups interleaved, as in a shuffled batch
    gid = gid[perm]
    values = rng.integers(0, 3, len(gid)).astype(float)
    m = rng.integers(1, 9, size=40)
    keep = max_variance_keep(values, gid, m)
    for g in range(40):
        members = np.flatnonzero(gid == g)
        want = min(int(m[g]), len(members))
        assert keep[members].sum() == want
        assert np.var(values[members][keep[members]]) == pytest.approx(
            _brute_force_variance(values[members], want), abs=1e-12)


def test_max_variance_binary_group_keeps_balanced_extremes_and_config_rounding() -> None:
    batch = _responses([1] * 8, uid=[0] * 8)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    keep = MaxVarianceFilter(MaxVarianceConfig(keep=4))(rewards, batch, step=0).indices.tolist()
    assert 6 in keep and len(keep) == 4  # the only wrong answer is kept
    five = _responses([1] * 5, uid=[0] * 5)
    scores = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0])
    assert len(MaxVarianceFilter()(scores, five, step=0).indices) == 3  # ceil(0.5 · 5)
    assert len(MaxVarianceFilter(MaxVarianceConfig(keep=2))(scores, five, step=0).indices) == 2
    assert len(MaxVarianceFilter(MaxVarianceConfig(keep=9))(scores, five, step=0).indices) == 5


# -- advantage_reweight (2505.12929) and per_advantage (1511.05952) -----------------------------------------


def test_advantage_reweight_is_alpha_pi_plus_one_minus_alpha_with_mean_one() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    batch = RolloutBatch.from_dict({"response_mask": mask})
    pi = torch.tensor([[0.1, 0.9, 7.0], [0.5, 1.0, 0.0]])
    w = AdvantageReweighter(AdvantageReweightConfig(alpha=0.4))(pi, batch, step=0).weights
    raw = 0.4 * pi + 0.6
    expected = torch.where(mask.bool(), raw, torch.zeros(())) * (5 / (raw * mask).sum())
    torch.testing.assert_close(w, expected)
    assert w[0, 2] == 0 and abs(float(w.sum()) - 5) < 1e-5
    unnormalised = AdvantageReweighter(AdvantageReweightConfig(alpha=0.4, normalize=False))(pi, batch, step=0)
    torch.testing.assert_close(unnormalised.weights, raw * mask)
    plain = AdvantageReweighter(AdvantageReweightConfig(alpha=0.0))(pi, batch, step=0).weights
    torch.testing.assert_close(plain, mask.float())
    with pytest.raises(SampleError, match="probabilities"):
        AdvantageReweighter()(torch.tensor([[-0.1, 0.5, 0.5], [0.5, 0.5, 0.5]]), batch, step=0)


def test_per_advantage_is_abs_score_to_the_alpha_with_mean_one() -> None:
    scores = torch.tensor([0.0, -1.0, 4.0, 0.25])
    batch = RolloutBatch.from_dict({"response_mask": torch.ones(4, 1)})
    w = PerAdvantageReweighter(PerAdvantageConfig(alpha=0.5, epsilon=0.0))(scores, batch, step=0).weights
    raw = torch.tensor([0.0, 1.0, 2.0, 0.5])
    torch.testing.assert_close(w, raw * 4 / raw.sum())
    uniform = PerAdvantageReweighter(PerAdvantageConfig(alpha=0.0))(scores, batch, step=0).weights
    assert uniform.tolist() == [1.0] * 4
    zeros = PerAdvantageReweighter()(torch.zeros(4), batch, step=0).weights  # ε keeps them uniform
    torch.testing.assert_close(zeros, torch.ones(4))
    tokens = RolloutBatch.from_dict({"response_mask": torch.tensor([[1, 0], [1, 1]])})
    tw = PerAdvantageReweighter(PerAdvantageConfig(alpha=1.0))(torch.tensor([[1.0, 9.0], [2.0, 3.0]]), tokens, step=0)
    torch.testing.assert_close(tw.weights, torch.tensor([[0.5, 0.0], [1.0, 1.5]]))


def test_an_actuator_error_names_the_actuator() -> None:
    """Regression: weights that overflow (|score|^α past the float maximum) raised a message naming no actuator."""
    batch = RolloutBatch.from_dict({"response_mask": torch.ones(2, 1)})
    with pytest.raises(SampleError, match=r"^actuator 'per_advantage'.*overflow"):
        PerAdvantageReweighter(PerAdvantageConfig(alpha=400.0))(torch.tensor([1e3, 2.0]), batch, step=0)
    with pytest.raises(SampleError, match=r"^actuator 'advantage_reweight' needs"):  # named once
        AdvantageReweighter()(torch.tensor([-0.1, 0.5]), batch, step=0)


# -- softmax precision ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_weights_have_mean_one_within_1e6_at_65536(dtype: torch.dtype) -> None:
    b = 65_536
    g = torch.Generator().manual_seed(0)
    scores = (torch.randn(b, generator=g) * 3).to(dtype)
    batch = RolloutBatch.from_dict({"response_mask": torch.ones(b, 1)})
    for temperature in (0.1, 1.0, 10.0):
        w = SoftmaxReweighter(SoftmaxConfig(temperature=temperature))(scores, batch, step=0).weights
        assert w.dtype == dtype
        assert abs(float(w.double().mean()) - 1.0) < 1e-6
    lengths = torch.randint(1, 5, (b,), generator=g)
    mask = torch.arange(4)[None, :] < lengths[:, None]
    tokens = RolloutBatch.from_dict({"response_mask": mask.to(torch.int64)})
    w = SoftmaxReweighter()(torch.randn(b, 4, generator=g).to(dtype), tokens, step=0).weights
    assert abs(float(w.double()[mask].mean()) - 1.0) < 1e-6 and float(w[~mask].abs().sum()) == 0.0


# -- difficulty_band quantile mode (DataFlex-RL's rule) ------------------------------------------------------


def _dataflex_band(scores: torch.Tensor, low_q: float, high_q: float, focus: float) -> torch.Tensor:
    """DataFlex-RL's documented rule: weight ``focus`` inside [quantile(low_q), quantile(high_q)], 1 outside,
    divided by the mean."""
    s = scores.float().flatten()
    q1, q2 = torch.quantile(s, low_q), torch.quantile(s, high_q)
    w = torch.where((s >= q1) & (s <= q2), torch.tensor(focus), torch.tensor(1.0))
    return w / w.mean()


def test_difficulty_band_quantile_mode_reproduces_the_dataflex_rule() -> None:
    rng = np.random.default_rng(0)
    rw = DifficultyBandReweighter(DifficultyBandConfig(mode="quantile"))
    for trial in range(200):
        b = int(rng.integers(2, 200))
        raw = rng.integers(0, 2, b) if trial % 2 else rng.random(b)
        scores = torch.tensor(raw, dtype=torch.float32)
        batch = RolloutBatch.from_dict({"response_mask": torch.ones(b, 1)})
        w = rw(scores, batch, step=0).weights
        torch.testing.assert_close(w, _dataflex_band(scores, 0.25, 0.75, 2.0), rtol=1e-6, atol=1e-6)
    custom = DifficultyBandReweighter(DifficultyBandConfig(mode="quantile", low_q=0.1, high_q=0.5, focus_weight=3.0))
    scores = torch.arange(10, dtype=torch.float32)
    batch = RolloutBatch.from_dict({"response_mask": torch.ones(10, 1)})
    torch.testing.assert_close(custom(scores, batch, step=0).weights, _dataflex_band(scores, 0.1, 0.5, 3.0))
    one = RolloutBatch.from_dict({"response_mask": torch.ones(1, 1)})
    assert rw(torch.tensor([0.3]), one, step=0).weights.tolist() == [1.0]


def test_difficulty_band_quantile_mode_on_tokens_uses_response_tokens_only() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    batch = RolloutBatch.from_dict({"response_mask": mask})
    scores = torch.tensor([[0.0, 1.0, 100.0], [2.0, 3.0, 4.0]])
    w = DifficultyBandReweighter(DifficultyBandConfig(mode="quantile"))(scores, batch, step=0).weights
    # response tokens 0..4: quantiles 1 and 3 -> tokens 1, 2, 3 inside (2), 0 and 4 outside (1); padding 0
    raw = torch.tensor([[1.0, 2.0, 0.0], [2.0, 2.0, 1.0]])
    torch.testing.assert_close(w, raw * 5 / raw.sum())


def test_difficulty_band_modes_refuse_each_others_keys_and_absolute_stays_default() -> None:
    assert DifficultyBandConfig().mode == "absolute"
    conv = make_converter()
    with pytest.raises(ConfigError, match="apply to mode = \"quantile\""):
        conv.structure({"low_q": 0.1}, DifficultyBandConfig)
    with pytest.raises(ConfigError, match="apply to mode = \"absolute\""):
        conv.structure({"mode": "quantile", "outside": 0.5}, DifficultyBandConfig)
    with pytest.raises(ConfigError, match="low_q must be <= high_q"):
        conv.structure({"mode": "quantile", "low_q": 0.8, "high_q": 0.2}, DifficultyBandConfig)
    config = conv.structure({"mode": "quantile", "high_q": 0.9}, DifficultyBandConfig)
    assert (config.quantile("low_q"), config.quantile("high_q"), config.quantile("focus_weight")) == (0.25, 0.9, 2.0)


# -- dump_ucb (DUMP, 2504.09710) ----------------------------------------------------------------------------


def _mix(scores: list[float], tasksets: list[int]) -> tuple[torch.Tensor, RolloutBatch]:
    return torch.tensor(scores, dtype=torch.float64), RolloutBatch.from_dict({"taskset_id": np.array(tasksets)})


def test_dump_ucb_formula_with_visit_counts() -> None:
    mixer = DumpUcbMixer(DumpUcbConfig(window=2, exploration=0.5, temperature=0.2, floor=0.1))
    mixer.bind(["a", "b", "c"])
    mixer(*_mix([1.0, 0.5, 0.2, 0.2, 0.2, 0.0], [0, 0, 1, 1, 1, 2]), step=0)
    p = mixer(*_mix([0.3, 0.9], [0, 1]), step=1).proportions
    n = np.array([3.0, 4.0, 1.0])
    value = np.array([1.8 / 3, 1.5 / 4, 0.0])
    ucb = value + 0.5 * np.sqrt(2 * np.log(8) / n)
    soft = np.exp(ucb / 0.2) / np.exp(ucb / 0.2).sum()
    np.testing.assert_allclose([p[0], p[1], p[2]], 0.1 / 3 + 0.9 * soft)
    np.testing.assert_allclose(mixer.visits, n)
    # step 0 leaves the 2-step window at step 2: taskset 2 has no sample left, it takes the others' mean
    p = mixer(*_mix([0.5], [0]), step=2).proportions
    value = np.array([0.8 / 2, 0.9, (0.4 + 0.9) / 2])
    n = np.array([4.0, 4.0, 1.0])
    ucb = value + 0.5 * np.sqrt(2 * np.log(9) / n)
    soft = np.exp(ucb / 0.2) / np.exp(ucb / 0.2).sum()
    np.testing.assert_allclose([p[0], p[1], p[2]], 0.1 / 3 + 0.9 * soft)


def test_dump_ucb_samples_unvisited_tasksets_first() -> None:
    mixer = DumpUcbMixer(DumpUcbConfig(floor=0.2))
    mixer.bind(["a", "b", "c", "d"])
    assert mixer.current_proportions() == {i: 0.25 for i in range(4)}
    p = mixer(*_mix([1.0, 1.0], [0, 1]), step=0).proportions
    np.testing.assert_allclose([p[i] for i in range(4)], [0.05, 0.05, 0.45, 0.45])
    with pytest.raises(SampleError, match="backwards"):
        mixer(*_mix([1.0], [0]), step=-1)
    greedy = DumpUcbMixer(DumpUcbConfig(exploration=0.0, temperature=1.0))  # c = 0: no bonus, no infinite bound
    greedy.bind(["a", "b", "c"])
    p = greedy(*_mix([1.0, 0.0], [0, 1]), step=0).proportions
    soft = np.exp([1.0, 0.0, 0.5]) / np.exp([1.0, 0.0, 0.5]).sum()  # unseen c: the others' mean
    np.testing.assert_allclose([p[0], p[1], p[2]], soft)


def _drive_mixer(mixer, steps: range, seed: int = 0) -> list[dict[int, float]]:
    out = []
    for step in steps:
        rng = np.random.default_rng([seed, step])
        ids = rng.integers(0, 3, 12)
        out.append(mixer(*_mix(rng.random(12).tolist(), ids.tolist()), step=step).proportions)
    return out


@pytest.mark.parametrize("make", [lambda: DumpUcbMixer(DumpUcbConfig(window=3)),
                                  lambda: TsclMixer(TsclConfig(window=4, temperature=0.05))],
                         ids=["dump_ucb", "tscl"])
def test_windowed_mixers_resume_exactly_and_refuse_bad_state(make) -> None:
    straight = make()
    straight.bind(["x", "y", "z"])
    expected = _drive_mixer(straight, range(10))
    first = make()
    first.bind(["x", "y", "z"])
    got = _drive_mixer(first, range(5))
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.bind(["x", "y", "z"])
    resumed.load_state_dict(state)
    got += _drive_mixer(resumed, range(5, 10))
    assert got == expected and resumed.state_dict() == straight.state_dict()
    before = resumed.state_dict()
    bad_states = [
        {**state, "num_tasksets": 5},
        {**state, "window": [{"step": 0, "sums": [1.0], "counts": [1.0, 2.0]}]},
        {**state, "window": list(reversed(state["window"]))},
        {**state, "last_step": 0},
    ]
    if "visits" in state:
        bad_states += [{**state, "visits": [1.0, -1.0, 0.0]}, {**state, "visits": [1.0] * 4}]
    for bad in bad_states:
        with pytest.raises(ValueError):
            resumed.load_state_dict(bad)
        assert resumed.state_dict() == before  # nothing changed


# -- tscl (Teacher–Student Curriculum Learning, 1707.00183) -------------------------------------------------


def test_tscl_slope_is_the_least_squares_slope_over_samples() -> None:
    rng = np.random.default_rng(3)
    mixer = TsclMixer(TsclConfig(window=5, temperature=0.01, floor=0.0))
    mixer.bind(["a", "b"])
    samples: dict[int, list[tuple[int, float]]] = {0: [], 1: []}
    for step in range(8):
        ids = rng.integers(0, 2, 6)
        ids[0] = 0
        values = rng.random(6) + (0.1 * step) * (ids == 0)  # taskset 0 improves
        for i, v in zip(ids, values, strict=True):
            samples[int(i)].append((step, float(v)))
        p = mixer(*_mix(values.tolist(), ids.tolist()), step=step).proportions
    beta = []
    for d in (0, 1):
        pts = np.array([(s, v) for s, v in samples[d] if s > 7 - 5])
        beta.append(np.polyfit(pts[:, 0], pts[:, 1], 1)[0])
    np.testing.assert_allclose(np.abs(beta), mixer.progress())
    soft = np.exp(np.abs(beta) / 0.01) / np.exp(np.abs(beta) / 0.01).sum()
    np.testing.assert_allclose([p[0], p[1]], soft)


def test_tscl_signed_keeps_only_improving_tasksets_and_undetermined_slopes_are_zero() -> None:
    steps = np.array([0.0, 1.0, 2.0])
    sums = np.array([[0.0, 3.0, 0.0], [1.0, 2.0, 0.0], [2.0, 1.0, 5.0]])
    counts = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 2.0]])
    np.testing.assert_allclose(slopes(steps, sums, counts), [1.0, -1.0, 0.0])
    mixer = TsclMixer(TsclConfig(window=3, temperature=1.0, signed=True))
    mixer.bind(["up", "down"])
    for step in range(3):
        mixer(*_mix([0.5 * step, 1.0 - 0.5 * step], [0, 1]), step=step)
    np.testing.assert_allclose(mixer.progress(), [0.5, 0.0])
    with pytest.raises(SampleError, match="no taskset"):
        TsclMixer().current_proportions()


# -- in a pipeline ------------------------------------------------------------------------------------------


def _simulated(sample: dict) -> dict:
    return {
        "run": {"batch_size": 8, "seed": 0, "total_steps": 6, "eval_every": 3, "checkpoint_every": 3},
        "tasksets": [{"name": f"t{i}", "storage_type": "simulated", "size": 50, "levels": [i + 1],
                      "selector": {"type": "random"}} for i in range(2)],
        "trainer": {"type": "simulator", "group_size": 4},
        "sample": sample,
    }


@pytest.mark.parametrize("sample", [
    {"mechanism": "select", "scorer": {"type": "reward"}, "actuator": {"type": "gfpo", "k": 2}},
    {"mechanism": "select", "scorer": {"type": "reward"}, "actuator": {"type": "max_variance"}},
    {"mechanism": "reweight", "scorer": {"type": "advantage_magnitude"}, "actuator": {"type": "per_advantage"}},
    {"mechanism": "reweight", "scorer": {"type": "reward"},
     "actuator": {"type": "difficulty_band", "mode": "quantile"}},
    {"mechanism": "mix", "scorer": {"type": "advantage_magnitude"}, "actuator": {"type": "dump_ucb"}},
    {"mechanism": "mix", "scorer": {"type": "reward"}, "actuator": {"type": "tscl"}},
], ids=lambda s: s["actuator"]["type"])
def test_new_components_run_and_resume_in_a_pipeline(tmp_path: Path, sample: dict) -> None:
    full, resumed = crash_and_resume(_simulated(sample), tmp_path)
    steps = [json.loads(line)["step"] for line in full.splitlines()]
    assert full == resumed and [s for s in steps if s >= 0] == list(range(6))
    assert ("flexkit/sample/proportion/1" if sample["mechanism"] == "mix" else "flexkit/sample/") in full
