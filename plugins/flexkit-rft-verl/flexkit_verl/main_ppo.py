"""``python -m flexkit_verl.main_ppo``: verl's PPO entry point with flexkit in the v1 trainer.

The same Hydra config as ``python -m verl.trainer.main_ppo`` plus ``+flexkit.pipeline=/abs/path.toml`` (see
:mod:`flexkit_verl.config`). :func:`prepare_config` points ``trainer.v1.sampler.custom_sampler`` at flexkit's
replay buffer when it is unset; :class:`FlexkitTaskRunnerV1` runs the trainer class ``trainer.v1.trainer_mode``
names with :class:`~flexkit_verl.trainer_v1.FlexkitV1TrainerMixin` mixed in. The legacy trainer
(``trainer.use_v1=false``) has its own task runner: see docs/integrations/verl.md.
"""

from __future__ import annotations

from typing import Any

import hydra
import ray
from omegaconf import DictConfig, OmegaConf, open_dict

from flexkit import ConfigError
from flexkit_verl.config import flexkit_settings

#: Where verl loads flexkit's replay buffer from.
REPLAY_BUFFER_PATH = "pkg://flexkit_verl.replay_buffer"


def replay_buffer_name(trainer_mode: str) -> str:
    """The flexkit replay buffer class for a ``trainer.v1.trainer_mode``."""
    return "FlexkitReplayBuffer" if trainer_mode == "sync" else "FlexkitReplayBufferAsync"


def prepare_config(config: DictConfig) -> None:
    """Check the config names a pipeline and runs the v1 trainer; set ``custom_sampler`` when unset."""
    if flexkit_settings(config) is None:
        raise ConfigError("flexkit: no pipeline; add +flexkit.pipeline=/abs/path/pipeline.toml")
    if not config.trainer.get("use_v1", True):
        raise ConfigError("trainer.use_v1=false: flexkit_verl.main_ppo runs the v1 trainer; for the legacy "
                          "RayPPOTrainer use the task runner of docs/integrations/verl.md")
    sampler = config.trainer.v1.sampler
    custom = sampler.get("custom_sampler") or {}
    if not custom.get("path"):
        with open_dict(config):
            sampler.custom_sampler = {"path": REPLAY_BUFFER_PATH,
                                      "name": replay_buffer_name(config.trainer.v1.trainer_mode)}


@ray.remote
class FlexkitTaskRunnerV1:
    """Ray task runner of the v1 trainer with flexkit (what verl's ``TaskRunnerV1`` does, flexkit's class)."""

    def run(self, config: DictConfig) -> None:
        """Build, initialise and fit the trainer with TransferQueue up."""
        import transfer_queue as tq  # type: ignore[import-untyped]
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ, get_trainer_cls
        from verl.utils.import_utils import load_class_from_fqn

        from flexkit_verl.trainer_v1 import flexkit_trainer_class

        trainer_cls = flexkit_trainer_class(get_trainer_cls(config.trainer.v1.trainer_mode))
        config.transfer_queue.enable = True
        OmegaConf.resolve(config)
        tq.init(config.transfer_queue)
        trainer: Any = None
        succeeded = False
        try:
            trainer = trainer_cls(config=config)
            trainer.init()
            manager_fqn = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
            manager_cls: Any = (load_class_from_fqn(manager_fqn, "AgentLoopManager") if manager_fqn
                                else AgentLoopManagerTQ)
            manager = manager_cls.create(config=config, llm_client=trainer.get_llm_client(),
                                         teacher_client=trainer.get_teacher_client(),
                                         reward_loop_worker_handles=trainer.get_reward_handles())
            trainer.fit(manager)
            succeeded = True
        finally:
            tracking = trainer.logger if trainer is not None else None  # declared on FlexkitV1TrainerMixin
            if tracking is not None:
                tracking.finish(exit_code=0 if succeeded else 1)
            tq.close()


@hydra.main(config_path="pkg://verl.trainer.config", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """verl's checks, :func:`prepare_config`, then verl's ``run_ppo`` with :class:`FlexkitTaskRunnerV1`."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    prepare_config(config)
    run_ppo(config, task_runner_class=FlexkitTaskRunnerV1)


if __name__ == "__main__":
    main()
