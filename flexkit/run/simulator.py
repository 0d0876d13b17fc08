"""A learner simulator: an analytical stand-in for RL fine-tuning, to study selection strategies at scale.

No neural network: each task has a latent difficulty ``d`` (its level plus jitter), the learner has a skill
``s``, and a response to task ``i`` succeeds with probability ``p_i = sigmoid(slope·(s − d_i) + m_i)``, where
``m_i`` is what the learner has memorised of that very task. A GRPO-like update learns from the
**reward-variance signal** of each trained group: with ``k`` of ``G`` responses correct, ``v = (k/G)(1 − k/G)``
— groups that are all right or all wrong carry no gradient, exactly as with group-relative advantages. Each
step::

    s   += learning_rate · Σ_g w_g·v_g / n          (n: all groups, or the kept ones; see ``aggregation``)
    m_i += memorization · w_g·v_g                    (the trained task only; does not transfer)

with ``w_g`` the group's loss weight from the sample stage. Held-out evaluation uses fresh tasks per level
(no memorisation), so a strategy that inflates training reward by revisiting the same tasks does not look
better where it counts: a test set (``evaluate``, what runs are judged on) and a validation set of other tasks
(``validate``, what the selectors steer on), both the same for every run. Hard levels become learnable only once
the skill approaches them: that is where curricula matter. 10,000 steps take seconds.

Tasks come from the ``simulated`` storage (``storage_type = "simulated"``): rows with ``level``,
``difficulty`` and two reference pass rates (``weak_pass_rate``, ``strong_pass_rate``: the success
probability of a weaker and a stronger reference learner) for ``difficulty_based``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from flexkit.config import field
from flexkit.errors import ConfigError, ConfigIssue
from flexkit.plugins._contract import Rollout, Trainer
from flexkit.tasksets import InMemoryTaskset

#: Jitter of a task's difficulty around its level.
DIFFICULTY_JITTER = 0.4


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    """The logistic function, elementwise."""
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def draw_difficulties(levels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Difficulty of tasks at ``levels``: the level plus uniform jitter of ±:data:`DIFFICULTY_JITTER`."""
    return levels.astype(np.float64) + rng.uniform(-DIFFICULTY_JITTER, DIFFICULTY_JITTER, size=len(levels))


@attrs.frozen(kw_only=True)
class SimulatedTasksConfig:
    """Parameters of the ``simulated`` storage: a generated taskset with graded difficulty."""

    size: int = field(default=2000, ge=1, le=10**8, doc="Number of tasks (generated in memory: at most 10^8).")
    levels: tuple[int, ...] = field(
        default=(1, 2, 3, 4), min_items=1, doc="Difficulty levels the tasks are spread over evenly."
    )
    seed: int = field(default=0, ge=0, doc="Seed of the generated tasks (independent of the pipeline seed).")
    weak_skill: float = field(default=1.0, doc="Skill of the weaker reference learner (weak_pass_rate).")
    strong_skill: float = field(
        default=4.0,
        doc="Skill of the stronger reference learner (strong_pass_rate); above what the trained learner reaches.",
    )
    slope: float = field(default=3.0, gt=0, doc="Steepness of the success curve for the reference pass rates.")


def make_simulated_taskset(config: SimulatedTasksConfig, *, name: str, **_context: Any) -> InMemoryTaskset:
    """Generate the tasks: ``id``, ``level``, ``difficulty``, ``weak_pass_rate``, ``strong_pass_rate``."""
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(7,)))
    levels = np.asarray(config.levels, dtype=np.int64)[np.arange(config.size) % len(config.levels)]
    difficulty = draw_difficulties(levels, rng)
    weak = sigmoid(config.slope * (config.weak_skill - difficulty))
    strong = sigmoid(config.slope * (config.strong_skill - difficulty))
    columns = {
        "id": np.arange(config.size, dtype=np.float64),
        "level": levels.astype(np.float64),
        "difficulty": difficulty,
        "weak_pass_rate": weak,
        "strong_pass_rate": strong,
    }
    rows = [
        {"id": i, "level": int(levels[i]), "difficulty": float(difficulty[i]),
         "weak_pass_rate": float(weak[i]), "strong_pass_rate": float(strong[i])}
        for i in range(config.size)
    ]
    return InMemoryTaskset(name, rows=rows, columns=columns, digest=False)  # its parameters identify it


@attrs.frozen(kw_only=True)
class SimulatorConfig:
    """Parameters of the ``simulator`` trainer."""

    group_size: int = field(default=8, ge=2, le=4096,
                            doc="Responses per task (G; the reward-variance signal needs 2 or more).")
    initial_skill: float = field(default=1.5, doc="Skill after the (simulated) warm start.")
    slope: float = field(default=3.0, gt=0, doc="Steepness of the success curve sigmoid(slope·(skill − d)).")
    learning_rate: float = field(default=0.05, ge=0, doc="Skill gained per unit of reward-variance signal.")
    memorization: float = field(
        default=0.5, ge=0, doc="Per-task logit gained per unit of signal on that task (does not transfer)."
    )
    aggregation: Literal["token-mean", "kept-token-mean"] = field(
        default="token-mean",
        doc="Average the signal over all groups (token-mean: dropped groups dilute the step) or kept ones only.",
    )
    eval_levels: tuple[int, ...] = field(default=(1, 2, 3, 4), min_items=1,
                                         doc="Levels of the held-out test and validation sets.")
    eval_tasks_per_level: int = field(default=200, ge=1, le=10**6, doc="Held-out test tasks per level.")
    val_tasks_per_level: int = field(
        default=200, ge=1, le=10**6,
        doc="Validation tasks per level (at eval_levels; tasks of their own, not the test set's): the evaluation "
            "the selectors steer on (frontier's guard_metric = \"val_accuracy/{}\").",
    )


def _difficulty(row: Any, taskset_id: int, taskset: str, index: int) -> float:
    """A task row's numeric ``difficulty``; a :class:`~flexkit.ConfigError` naming the taskset and task without one."""
    d = row.get("difficulty") if isinstance(row, Mapping) else None
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise ConfigError([ConfigIssue(
            f"tasksets[{taskset_id}]",
            f"the simulator needs a numeric 'difficulty' in every task row; task {index} of {taskset!r} has {d!r} "
            "(use storage_type = \"simulated\")")])
    return float(d)


class SimulatorTrainer(Trainer):
    """The analytical learner of this module's docstring, as a ``flexkit run`` backend."""

    Config = SimulatorConfig
    supports_validation = True

    def __init__(self, config: SimulatorConfig | None = None, *, seed: int | np.random.SeedSequence = 0) -> None:
        super().__init__(config)
        config = self.config
        self.rng = np.random.default_rng(seed)
        self.skill = float(config.initial_skill)
        self._memo: list[np.ndarray] = []
        eval_rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(8,)))
        levels = np.repeat(np.asarray(config.eval_levels, dtype=np.int64), config.eval_tasks_per_level)
        self._eval_levels = levels
        self._eval_difficulty = draw_difficulties(levels, eval_rng)
        val_rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(9,)))  # not the test set's stream
        self._val_levels = np.repeat(np.asarray(config.eval_levels, dtype=np.int64), config.val_tasks_per_level)
        self._val_difficulty = draw_difficulties(self._val_levels, val_rng)

    def check_setup(self, pipeline: Any) -> None:
        """Refuse tasksets whose first row has no numeric ``difficulty`` (the simulator's rows come from the
        ``simulated`` storage); a later row without one is refused when it is drawn."""
        for number, entry in enumerate(pipeline.scheduler.entries):
            if entry.size:
                _difficulty(entry.taskset.read([0])[0], number, entry.name, 0)

    def setup(self, pipeline: Any) -> None:
        """Check the rows (:meth:`check_setup`); allocate per-task memorisation for every taskset of ``pipeline``."""
        self.check_setup(pipeline)
        self._memo = [np.zeros(size) for size in pipeline.scheduler.sizes]

    def _difficulties(self, tasks: Sequence[Any]) -> np.ndarray:
        return np.asarray([_difficulty(t.data, t.taskset_id, t.taskset, t.index) for t in tasks], dtype=np.float64)

    def success_probability(self, tasks: Sequence[Any]) -> np.ndarray:
        """Each task's current success probability (skill, difficulty and memorisation)."""
        memo = np.asarray([self._memo[t.taskset_id][t.index] for t in tasks]) if self._memo else 0.0
        return sigmoid(self.config.slope * (self.skill - self._difficulties(tasks)) + memo)

    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Draw ``group_size`` Bernoulli outcomes per task."""
        import torch

        from flexkit.sample._batch import RolloutBatch

        g = self.config.group_size
        p = self.success_probability(tasks)
        rewards = (self.rng.random((len(tasks), g)) < p[:, None]).astype(np.float32).reshape(-1)
        taskset_ids = np.repeat([t.taskset_id for t in tasks], g)
        indices = np.repeat([t.index for t in tasks], g)
        batch = RolloutBatch.from_dict({
            "token_level_scores": torch.from_numpy(rewards[:, None].copy()),
            "response_mask": torch.ones(len(rewards), 1),
            "uid": np.repeat(np.arange(len(tasks)), g),
            "taskset_id": taskset_ids,
            "index": indices,
        })
        return Rollout(batch=batch,  # the feedback reads the batch's taskset_id, index and rewards
                       metrics={"reward_mean": float(rewards.mean()), "expected_success": float(p.mean())})

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """GRPO advantages: (r − group mean) / (group std + 1e-6)."""
        import torch

        g = self.config.group_size
        r = batch["token_level_scores"][:, 0].reshape(-1, g).double()
        adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + 1e-6)
        batch["advantages"] = adv.reshape(-1, 1).to(torch.float32)

    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """Learn from each group's reward variance, scaled by its loss weight."""
        g = self.config.group_size
        rewards = batch["token_level_scores"][:, 0].numpy().reshape(-1, g)
        solved = rewards.mean(axis=1)
        signal = solved * (1.0 - solved)
        w = np.ones(len(signal)) if weights is None else weights[:, 0].double().numpy().reshape(-1, g).mean(axis=1)
        denominator = len(signal) if self.config.aggregation == "token-mean" else max(int((w > 0).sum()), 1)
        gain = float((w * signal).sum()) / denominator
        self.skill += self.config.learning_rate * gain
        if self._memo and self.config.memorization:
            tids = batch["taskset_id"].reshape(-1, g)[:, 0]
            idx = batch["index"].reshape(-1, g)[:, 0]
            for tid, i, wv in zip(tids, idx, w * signal, strict=True):
                self._memo[int(tid)][int(i)] += self.config.memorization * wv
        return {"skill": self.skill, "signal": gain}

    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Expected test accuracy, overall and per level (no memorisation)."""
        return self._accuracy("eval_accuracy", self._eval_difficulty, self._eval_levels)

    def validate(self, *, step: int) -> Mapping[str, float]:
        """Expected validation accuracy, overall and per level (tasks apart from the test set's)."""
        return self._accuracy("val_accuracy", self._val_difficulty, self._val_levels)

    def _accuracy(self, name: str, difficulty: np.ndarray, levels: np.ndarray) -> dict[str, float]:
        p = sigmoid(self.config.slope * (self.skill - difficulty))
        out = {name: float(p.mean())}
        for level in self.config.eval_levels:
            out[f"{name}/{level}"] = float(p[levels == level].mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        """Skill, per-task memorisation and the RNG."""
        return {"skill": self.skill, "memo": list(self._memo), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.skill = float(state["skill"])
        self._memo = [np.array(m, dtype=np.float64) for m in state["memo"]]
        self.rng.bit_generator.state = state["rng"]

