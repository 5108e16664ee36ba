"""Making through ``envs.make`` and expert access through wrappers (the ids themselves: ``test_every_env.py``)."""
from __future__ import annotations

import gymnasium as gym
import pytest

import envs


def test_make_wraps_and_expert_action_unwraps():
    env = gym.make("TextCraft-v0")
    assert env.unwrapped is not env
    env.reset(seed=0)
    action = envs.expert_action(env)
    assert action.startswith(("get", "craft"))
    obs, *_ = env.step(action)
    assert not obs.startswith("Could not")
    with pytest.raises(TypeError, match="TextEnv"):
        envs.expert_action(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="registered by this repo"):
        envs.make("TextKraft-v0")
