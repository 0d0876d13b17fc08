"""The policy both verl replay harnesses train (verl_legacy_harness.py, verl_v1_policy.py): a unigram policy over a
small vocabulary, one SGD step of verl's own vanilla PPO loss per mini-batch, its parameters in the actor
checkpoint."""

from __future__ import annotations

import os
from typing import Any

import torch
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

#: Vocabulary of the toy rollouts.
VOCAB = 8


def log_probs(theta: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """The unigram policy ``theta``'s log-probability of each response token."""
    return torch.log_softmax(theta, dim=-1)[responses]


class ToyPolicy:
    """An actor worker group's policy: ``theta``, trained by :meth:`ppo_step`; ``calls`` is for the harnesses to
    record what each update received."""

    def __init__(self, lr: float = 2.0) -> None:
        self.theta = torch.zeros(VOCAB)
        self.lr = lr
        #: What each update_actor call received, and the policy before it.
        self.calls: list[dict[str, Any]] = []

    def ppo_step(self, mini: Any) -> None:
        """One SGD step of verl's vanilla PPO loss on a mini-batch (``old_log_probs``, ``responses``,
        ``advantages``, ``response_mask`` and, when present, ``rollout_is_weights``, padded)."""
        config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1)
        loss_fn = core_algos.get_policy_loss_fn("vanilla")
        theta = self.theta.clone().requires_grad_(True)
        weights = mini["rollout_is_weights"] if "rollout_is_weights" in mini.keys() else None  # noqa: SIM118
        loss, _ = loss_fn(old_log_prob=mini["old_log_probs"], log_prob=log_probs(theta, mini["responses"]),
                          advantages=mini["advantages"], response_mask=mini["response_mask"],
                          loss_agg_mode="token-mean", config=config, rollout_is_weights=weights)
        loss.backward()
        self.theta = (theta - self.lr * theta.grad).detach()

    def save_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        os.makedirs(local_path, exist_ok=True)
        torch.save(self.theta, os.path.join(local_path, "theta.pt"))

    def load_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        self.theta = torch.load(os.path.join(local_path, "theta.pt"), weights_only=True)
