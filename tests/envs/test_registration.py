"""The gymnasium ids, their entry points, and expert access through wrappers."""
from __future__ import annotations

import importlib.util

import gymnasium as gym
import pytest

import envs


def test_ids_are_registered_with_their_entry_points():
    for env_id, entry in {"TextCraft-v0": "envs.textcraft:TextCraftEnv", "ALFWorld-v0": "envs.alfworld:ALFWorldEnv",
                          "WebShop-v0": "envs.webshop:WebShopEnv",
                          "FiniteCraft-v0": "envs.finite.textenv:CraftEnv",
                          "FiniteRooms-v0": "envs.finite.textenv:RoomsEnv"}.items():
        spec = gym.spec(env_id)
        assert spec.entry_point == entry and spec.max_episode_steps is None


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


@pytest.mark.skipif(importlib.util.find_spec("envs.webshop") is None, reason="WebShop lives in its own branch")
def test_webshop_makes_and_resets():
    env = gym.make("WebShop-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and set(envs.INFO_KEYS) <= set(info)
