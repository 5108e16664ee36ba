"""The trainer: typed run config, the policy's forward pass, PPO loss, PPOActor (DeepSpeed), checkpoints, logging,
seeding.

See ``trainer/README.md``. Names are imported lazily so that ``import trainer.config`` stays light::

    from trainer import RunConfig, load_config, PPOActor, save_checkpoint, load_checkpoint, MetricLogger
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "RunConfig": "config", "load_config": "config", "save_config": "config", "config_from_argv": "config",
    "ConfigError": "config", "EnvConfig": "config", "ModelConfig": "config", "RolloutConfig": "config",
    "TrainerConfig": "config", "LoggingConfig": "config", "EvalConfig": "config", "SFTConfig": "config",
    "ForwardOutput": "forward", "policy_forward": "forward", "pack_rows": "forward", "hidden_state_module": "forward",
    "ppo_loss": "loss", "PPOLossSettings": "loss", "PPOActor": "ppo_actor", "NonFiniteError": "ppo_actor",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint", "MetricLogger": "logging",
    "seed_everything": "seeding", "Seeds": "seeding",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
