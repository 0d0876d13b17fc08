"""``toyrl``: GRPO fine-tuning of a tiny transformer on generated arithmetic problems, on a CPU in minutes.

The task family is ``operation`` (:mod:`flexkit_toyrl.families`): addition by default, multiplication by a
one-digit number, or subtraction with borrows; every phase below uses it, and :meth:`ToyRLTrainer.setup`
refuses an ``arithmetic`` taskset of another family.

The run, as real RL fine-tuning does it:

1. **Warm start** (before the first evaluation): a short supervised phase on problems drawn mostly from the
   easy levels (``warmup_level_weights``). It leaves a spread of success rates — high on the easy levels,
   middling on the medium ones, near zero on the hardest — like a pretrained model facing a new task family.
   A policy trained with GRPO from scratch collapses here (every group all-wrong, no gradient). For the
   examples' configurations the warm-started weights ship with the plugin (``pretrained``,
   :mod:`flexkit_toyrl.pretrained`), so the RL phase starts from the same policy on every machine.
2. **GRPO** (Shao et al. 2024, arXiv 2402.03300): for each task, ``group_size`` sampled answers; exact-match
   reward; group-relative advantages ``(r − mean_g) / (std_g + ε)`` on every answer token; the PPO clipped loss
   of :func:`flexkit.policy_loss` with the sample stage's per-token weights, plus an entropy bonus
   (aggregated over the kept tokens, see :func:`flexkit.policy_loss`) that keeps the policy from collapsing onto one
   answer. Groups whose answers all got the same reward carry no gradient — the waste task selection avoids.
3. **Held-out evaluations**: greedy answers to fixed sets of fresh problems per level, the same for every
   pipeline seed, so runs are comparable: a **test** split (:meth:`ToyRLTrainer.evaluate`, ``eval_accuracy``: what
   runs are judged on) and a **validation** split of other problems (:meth:`ToyRLTrainer.validate`,
   ``val_accuracy``: the only evaluation the selectors steer on), none in both (:mod:`flexkit_toyrl.splits`).

Everything is deterministic given the pipeline seed, and :meth:`ToyRLTrainer.state_dict` holds the model,
the optimiser and both random streams, so ``flexkit run --resume`` ends exactly where an uninterrupted run does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np
import torch

from flexkit import (
    ConfigError,
    ConfigIssue,
    FlexkitError,
    Pipeline,
    Rollout,
    Trainer,
    ValidationRows,
    aggregate,
    keep_mask,
    policy_loss,
)
from flexkit_toyrl.arithmetic import text_pool_width, validation_prompts
from flexkit_toyrl.config import ToyRLConfig
from flexkit_toyrl.families import FAMILIES
from flexkit_toyrl.model import TinyTransformer, answer_log_probs, generate
from flexkit_toyrl.splits import EVAL_SPAWN_KEY, VAL_SPAWN_KEY, held_out_splits

__all__ = ["EVAL_SPAWN_KEY", "VAL_SPAWN_KEY", "WARMUP_SPAWN_KEY", "ToyRLTrainer", "warmup_schedule"]
#: Spawn key of the initial weights and the warm-start problems (with ``warmup_seed``).
WARMUP_SPAWN_KEY = (13,)


def warmup_schedule(step: int, total: int) -> float:
    """Learning-rate factor of the warm start: linear ramp over the first 10% of steps, cosine decay to 0.1."""
    ramp = max(1, total // 10)
    if step < ramp:
        return (step + 1) / ramp
    progress = (step - ramp) / max(1, total - ramp)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def _torch_seed(seq: np.random.SeedSequence, key: int) -> int:
    return int(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, key)).generate_state(1)[0])


class ToyRLTrainer(Trainer):
    """The embedded GRPO backend of this module's docstring."""

    #: ``[replay]``'s rows are weighed by their generating policy's log-probabilities (:meth:`update`).
    supports_replay = True
    #: :meth:`validate` answers a validation split apart from :meth:`evaluate`'s test split.
    supports_validation = True

    def __init__(self, config: ToyRLConfig, *, seed: int | np.random.SeedSequence = 0) -> None:
        self.config = config
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self.family = FAMILIES[config.operation]
        self.width = config.max_digits
        self.prompt_len = self.family.prompt_len(self.width)
        self.answer_len = self.width + 1
        warm_seq = np.random.SeedSequence(config.warmup_seed, spawn_key=WARMUP_SPAWN_KEY)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_torch_seed(warm_seq, 0))
            self.model = TinyTransformer(self.family.vocab_size, self.prompt_len + self.answer_len, config.d_model,
                                         config.n_layers, config.n_heads, 4 * config.d_model)
        self.generator = torch.Generator().manual_seed(_torch_seed(seq, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.learning_rate)
        self.warmup_rng = np.random.default_rng(np.random.SeedSequence(config.warmup_seed,
                                                                         spawn_key=(*WARMUP_SPAWN_KEY, 2)))
        self.warm = False
        self.warmup_loss: float | None = None
        held_out = held_out_splits(self.family, config.eval_levels, config.eval_tasks_per_level,
                                   config.val_tasks_per_level, self.width, config.base)
        test, val = held_out.test, held_out.validation
        self.eval_levels = test.levels
        self.eval_prompts = torch.from_numpy(self.family.prompts(test.a, test.b, self.width, config.base))
        self.eval_answers = torch.from_numpy(self.family.answers(test.a, test.b, self.width, config.base))
        self.val_levels = val.levels
        self.val_problems = val
        #: The digits the pool's prompt texts pad operands to (set by :meth:`setup` from the tasksets; ``None``: no
        #: pool holds a prompt text, or pools of several widths do).
        self.text_width: int | None = None
        self._val_rows: ValidationRows | None = None
        #: (prompt width, which validation problems are given, their columns), built once per width.
        self._val_columns: tuple[int | None, np.ndarray, dict[str, list[Any]]] | None = None
        self.val_prompts = torch.from_numpy(self.family.prompts(val.a, val.b, self.width, config.base))
        self.val_answers = torch.from_numpy(self.family.answers(val.a, val.b, self.width, config.base))

    def setup(self, pipeline: Any) -> None:
        """Refuse ``arithmetic`` tasksets of another family or base than ``operation`` and ``base``, or with levels
        above ``max_digits`` (before any work is done)."""
        issues = []
        cfg = self.config
        for i, taskset in enumerate(pipeline.config.tasksets):
            storage = taskset.storage
            if storage.type != "arithmetic":
                continue
            ts = storage.config
            if ts.operation != cfg.operation:
                issues.append(ConfigIssue(
                    f"tasksets[{i}]",
                    f'the taskset {taskset.name!r} generates operation = "{ts.operation}" problems but the toyrl '
                    f'trainer has operation = "{cfg.operation}": set the same operation in both ([trainer] '
                    f"operation and the taskset's operation)"))
            if ts.base != cfg.base:
                issues.append(ConfigIssue(
                    f"tasksets[{i}].base",
                    f"the taskset {taskset.name!r} generates base-{ts.base} problems but the toyrl trainer has base = "
                    f"{cfg.base}: set the same base in both"))
            if max(ts.levels) > cfg.max_digits:
                issues.append(ConfigIssue(
                    f"tasksets[{i}].levels",
                    f"the taskset {taskset.name!r} has levels up to {max(ts.levels)} but the toyrl trainer has "
                    f"max_digits = {cfg.max_digits}: set max_digits = {max(ts.levels)} or drop the higher levels"))
        if issues:
            raise ConfigError(issues, pipeline.source if isinstance(pipeline, Pipeline) else None)
        self.text_width = text_pool_width(pipeline)

    # -- warm start -------------------------------------------------------------------------------------

    def warm_start(self) -> None:
        """The supervised phase (once; a loaded checkpoint counts as warm), reported as progress phase
        ``"warm start"`` (:meth:`~flexkit.Trainer.report_progress`). With ``pretrained`` and shipped
        weights for this configuration, those are loaded instead (:mod:`flexkit_toyrl.pretrained`)."""
        if self.warm:
            return
        cfg = self.config
        if cfg.pretrained and self._load_shipped_warm_start():
            return
        weights = np.asarray(cfg.warmup_level_weights, dtype=np.float64)
        weights /= weights.sum()
        optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.warmup_learning_rate)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: warmup_schedule(i, cfg.warmup_steps))
        loss = torch.zeros(())
        for i in range(cfg.warmup_steps):
            levels = 1 + self.warmup_rng.choice(len(weights), size=cfg.warmup_batch_size, p=weights)
            a, b = self.family.draw(levels, cfg.base, self.warmup_rng)
            seq = torch.from_numpy(np.concatenate([self.family.prompts(a, b, self.width, cfg.base),
                                                   self.family.answers(a, b, self.width, cfg.base)], axis=1))
            logp, _ = answer_log_probs(self.model, seq, self.answer_len, cfg.base)
            loss = -logp.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            schedule.step()
            self.report_progress("warm start", i + 1, cfg.warmup_steps)
        self.warmup_loss = float(loss.detach())
        self.warm = True

    def _load_shipped_warm_start(self) -> bool:
        """Load the shipped warm start of this configuration (:mod:`flexkit_toyrl.pretrained`), if one ships."""
        from flexkit_toyrl.pretrained import load_shipped

        shapes = {name: tuple(value.shape) for name, value in self.model.state_dict().items()}
        shipped = load_shipped(self.config, shapes)
        if shipped is None:
            return False
        arrays, self.warmup_loss = shipped
        self.model.load_state_dict({name: torch.from_numpy(array) for name, array in arrays.items()})
        self.report_progress("warm start", self.config.warmup_steps, self.config.warmup_steps)
        self.warm = True
        return True

    # -- the RL step ------------------------------------------------------------------------------------

    def _operands(self, tasks: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        a = np.empty(len(tasks), dtype=np.int64)
        b = np.empty(len(tasks), dtype=np.int64)
        cfg = self.config
        limit, b_limit = cfg.base ** self.width, self.family.b_limit(self.width, cfg.base)
        for i, task in enumerate(tasks):
            row = task.data if isinstance(task.data, Mapping) else {}
            x, y = row.get("a"), row.get("b")
            operation = row.get("operation", "add")
            if operation != cfg.operation:
                raise ConfigError([ConfigIssue(
                    f"tasksets[{task.taskset_id}]",
                    f'task {task.index} of {task.taskset!r} is an operation = "{operation}" problem but the toyrl '
                    f'trainer has operation = "{cfg.operation}": set the same operation in both')])
            if not (_is_int(x) and 0 <= x < limit and _is_int(y) and 0 <= y < b_limit):
                raise ConfigError([ConfigIssue(
                    f"tasksets[{task.taskset_id}]",
                    f"the toyrl trainer needs integer operands 'a' in [0, {limit}) and 'b' in [0, {b_limit}) "
                    f"(operation = \"{cfg.operation}\", max_digits = {self.width}, base = {cfg.base}); task "
                    f"{task.index} of {task.taskset!r} has a={x!r}, b={y!r} (use storage_type = \"arithmetic\" with "
                    f"matching levels)")])
            a[i], b[i] = x, y
        return a, b

    def rollout(self, tasks: Sequence[Any], *, step: int) -> Rollout:
        """Sample ``group_size`` answers per task and score them by exact match."""
        from flexkit import RolloutBatch

        self.warm_start()
        cfg, g = self.config, self.config.group_size
        a, b = self._operands(tasks)
        prompts = torch.from_numpy(self.family.prompts(a, b, self.width, cfg.base))
        target = torch.from_numpy(self.family.answers(a, b, self.width, cfg.base)).repeat_interleave(g, dim=0)
        self.model.eval()
        answers, logps = generate(self.model, prompts, self.answer_len, temperature=cfg.temperature,
                                  generator=self.generator, allowed=cfg.base, samples=g)
        prompts = prompts.repeat_interleave(g, dim=0)
        correct = (answers == target).all(dim=1).to(torch.float32)
        scores = torch.zeros(len(correct), self.answer_len)
        scores[:, -1] = correct
        n = len(tasks)
        taskset_ids = np.repeat([t.taskset_id for t in tasks], g)
        indices = np.repeat([t.index for t in tasks], g)
        levels = np.repeat([_level(t, int(x), cfg.base) for t, x in zip(tasks, a, strict=True)], g)
        batch = RolloutBatch.from_dict({
            "input_ids": torch.cat([prompts, answers], dim=1),
            "response_mask": torch.ones(n * g, self.answer_len),
            "token_level_scores": scores,
            "old_log_probs": logps,
            "uid": np.repeat(np.arange(n), g),
            "taskset_id": taskset_ids,
            "index": indices,
            "level": levels,
        })
        rewards = correct.numpy()
        solved = rewards.reshape(n, g).mean(axis=1)
        metrics = {"reward_mean": float(rewards.mean()),
                   "zero_variance_groups": float(((solved == 0) | (solved == 1)).mean())}
        return Rollout(batch=batch, metrics=metrics)  # the feedback reads the batch's taskset_id, index and rewards

    def compute_advantages(self, batch: Any, *, step: int) -> None:
        """GRPO advantages ``(r − group mean) / (group std + 1e-6)``, on every answer token."""
        g = self.config.group_size
        r = batch["token_level_scores"].sum(dim=1).reshape(-1, g).double()
        adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + 1e-6)
        batch["advantages"] = (adv.reshape(-1, 1) * batch["response_mask"]).to(torch.float32)

    def update(self, batch: Any, weights: Any, *, step: int) -> Mapping[str, float]:
        """One clipped policy-gradient step with per-token ``weights`` and an entropy bonus. Rows this step
        generated have importance ratio 1; rows ``[replay]`` hands back are weighed against the policy that
        generated them (their ``old_log_probs``), clipped at ``clip_ratio`` as PPO does."""
        cfg = self.config
        self.model.train()
        mask = batch["response_mask"]
        logp, entropy = answer_log_probs(self.model, batch["input_ids"], self.answer_len, cfg.base)
        pg = policy_loss(logp, _behaviour_log_probs(batch, logp), batch["advantages"], mask, weights,
                         clip_ratio=cfg.clip_ratio, aggregation=cfg.aggregation)
        ent = aggregate(entropy, mask, keep_mask(weights, mask), aggregation=cfg.aggregation)
        loss = pg - cfg.entropy_coef * ent
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        if not (torch.isfinite(loss) and torch.isfinite(norm)):
            raise FlexkitError(f"toyrl: step {step}: the loss ({float(loss):g}) or gradient norm ({float(norm):g}) is "
                               "not finite: the policy diverged; lower learning_rate or entropy_coef")
        self.optimizer.step()
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise FlexkitError(f"toyrl: step {step}: the update left weights that are not finite: the policy "
                               "diverged; lower learning_rate")
        return {"loss": float(loss.detach()), "entropy": float(entropy.detach().mean()), "grad_norm": float(norm)}

    # -- evaluation -------------------------------------------------------------------------------------

    def evaluate(self, *, step: int) -> Mapping[str, float]:
        """Greedy exact-match accuracy on the held-out test problems, overall and per level."""
        correct = self._greedy_correct(self.eval_prompts, self.eval_answers)
        out = {"eval_accuracy": float(correct.mean())}
        for level in self.config.eval_levels:
            out[f"eval_accuracy/{level}"] = float(correct[self.eval_levels == level].mean())
        return out

    def validate(self, *, step: int) -> Mapping[str, float]:
        """Greedy exact-match accuracy on the validation problems, per level and (``val_accuracy``) the mean of the
        levels' (a split level has fewer problems than the others: :mod:`flexkit_toyrl.splits`)."""
        correct = self._greedy_correct(self.val_prompts, self.val_answers)
        given, columns = self._validation_columns()
        self._val_rows = ValidationRows(columns, correct[given].astype(np.float64))
        per_level = {level: float(correct[self.val_levels == level].mean())
                     for level in dict.fromkeys(self.config.eval_levels)}
        return {"val_accuracy": float(np.mean(list(per_level.values()))),
                **{f"val_accuracy/{level}": value for level, value in per_level.items()}}

    def _validation_columns(self) -> tuple[np.ndarray, dict[str, list[Any]]]:
        """Which validation problems :meth:`validation_rows` gives and their columns (:meth:`validation_rows`)."""
        if self._val_columns is None or self._val_columns[0] != self.text_width:
            val, cfg = self.val_problems, self.config
            given = np.ones(len(val.levels), dtype=bool)
            prompts: list[str] | None = None
            if self.text_width is not None:
                given, prompts = validation_prompts(val.levels, val.a, val.b, cfg.operation, self.text_width,
                                                    cfg.base)
            columns: dict[str, list[Any]] = {"level": val.levels[given].tolist(), "a": val.a[given].tolist(),
                                             "b": val.b[given].tolist()}
            if prompts is not None:
                columns["prompt"] = prompts
            self._val_columns = (self.text_width, given, columns)
        return self._val_columns[1], self._val_columns[2]

    def validation_rows(self) -> ValidationRows | None:
        """The problems the latest :meth:`validate` scored, in the columns of the ``arithmetic`` storage's rows
        (``level``, ``a``, ``b``), each scored 1 when its greedy answer was right; ``None`` before the first
        validation. Where the pipeline's pools hold a ``prompt`` text (``label = "none"`` or ``"source"``, one
        width), the rows carry it as those pools write it, and only the problems such a pool could hold are given
        (a level above its width does not fit its format); with pools of several widths, no ``prompt``."""
        return self._val_rows

    def _greedy_correct(self, prompts: torch.Tensor, answers: torch.Tensor) -> np.ndarray:
        """Whether each greedy answer to ``prompts`` is exactly ``answers``' (no random stream is used)."""
        self.warm_start()
        self.model.eval()
        greedy, _ = generate(self.model, prompts, self.answer_len, temperature=0, allowed=self.config.base)
        correct: np.ndarray = (greedy == answers).all(dim=1).numpy()
        return correct

    # -- state --------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser, both random streams: plain arrays and JSON values."""
        opt = self.optimizer.state_dict()
        return {
            "warm": self.warm,
            "model": {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()},
            "optimizer": {
                "state": {str(k): {n: v.numpy().copy() for n, v in s.items()} for k, s in opt["state"].items()},
                "param_groups": opt["param_groups"],
            },
            "generator": self.generator.get_state().numpy().copy(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state["model"].items()})
        opt = state["optimizer"]
        self.optimizer.load_state_dict({
            "state": {int(k): {n: torch.from_numpy(np.array(v)) for n, v in s.items()}
                      for k, s in opt["state"].items()},
            "param_groups": [dict(group) for group in opt["param_groups"]],
        })
        self.generator.set_state(torch.from_numpy(np.array(state["generator"], dtype=np.uint8)))
        self.warm = bool(state["warm"])


def _behaviour_log_probs(batch: Any, logp: torch.Tensor) -> torch.Tensor:
    """The importance ratio's denominator: the current policy's (detached) log-probabilities for the rows this
    step generated, and the generating policy's ``old_log_probs`` for the rows ``[replay]`` hands back
    (``replay_age`` > 0, :class:`flexkit.host.ReplayBuffer`)."""
    old = logp.detach()
    age = batch.get("replay_age")
    if age is None:
        return old
    replayed = torch.from_numpy(np.asarray(age) > 0)
    if not bool(replayed.any()):
        return old
    return torch.where(replayed[:, None], batch["old_log_probs"].to(old.dtype), old)


def _level(task: Any, a: int, base: int) -> int:
    """A task's level: its row's ``level``, or in a pool without one (``label = "none"``) the digits of ``a``
    (every family draws a level-``L`` problem's ``a`` with exactly ``L`` digits, any digit at level 1)."""
    row = task.data if isinstance(task.data, Mapping) else {}
    level = row.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    digits = 1
    while a >= base ** digits:
        digits += 1
    return digits


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
