"""Text environments (TextCraft, ALFWorld, WebShop, and the finite worlds of ``envs.finite``) behind one gymnasium
interface, and the group pool.

Importing ``envs`` registers the gymnasium ids (lazily: the environment modules load on ``make``):

=============== ================================== ===========================================
id              entry point                        default horizon (``max_steps``)
=============== ================================== ===========================================
TextCraft-v0    ``envs.textcraft:TextCraftEnv``    50
ALFWorld-v0     ``envs.alfworld:ALFWorldEnv``      50
WebShop-v0      ``envs.webshop:WebShopEnv``        15
FiniteCraft-v0  ``envs.finite.textenv:CraftEnv``   50 (the MDP's horizon)
FiniteRooms-v0  ``envs.finite.textenv:RoomsEnv``   50 (the MDP's horizon)
=============== ================================== ===========================================

The two finite worlds take ``surface`` (``envs.finite.text`` presets), ``alias`` and the family's size options as
keyword arguments (``env.kwargs`` in a config); their ``info["state_key"]`` is the MDP state, whose exact
values ``groundtruth.onpolicy`` computes.

No ``max_episode_steps`` is registered: the horizon is the env's own ``max_steps`` argument (it sets
``truncated``), so gymnasium's ``TimeLimit`` never doubles it. ``expert_action(env)`` returns the next
action of the env's expert through any gymnasium wrappers.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym

from envs.base import INFO_KEYS, SUCCESS_REWARD, TextEnv

__all__ = ["ENV_IDS", "INFO_KEYS", "SUCCESS_REWARD", "TextEnv", "expert_action", "make", "unwrap", "register_envs"]

#: gymnasium id -> entry point [contract]
ENV_IDS = {
    "TextCraft-v0": "envs.textcraft:TextCraftEnv",
    "ALFWorld-v0": "envs.alfworld:ALFWorldEnv",
    "WebShop-v0": "envs.webshop:WebShopEnv",
    "FiniteCraft-v0": "envs.finite.textenv:CraftEnv",
    "FiniteRooms-v0": "envs.finite.textenv:RoomsEnv",
}


def register_envs() -> None:
    """Register ``ENV_IDS`` with gymnasium (idempotent)."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)


register_envs()


def unwrap(env: Any) -> TextEnv:
    """The ``TextEnv`` inside any stack of gymnasium wrappers."""
    inner = getattr(env, "unwrapped", env)
    if not isinstance(inner, TextEnv):
        raise TypeError(f"expected a TextEnv (or a wrapper of one), got {type(inner).__name__}")
    return inner


def expert_action(env: Any) -> str:
    """The next action of ``env``'s expert in its current state (``env`` may be wrapped).

    TextCraft: the recipe-tree planner; ALFWorld: ALFWorld's hand-coded expert; WebShop: its own.
    """
    return unwrap(env).expert_action()


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make(env_id, **kwargs)`` with a clear error for unknown ids."""
    if env_id not in gym.registry:
        known = sorted(ENV_IDS)
        raise ValueError(f"unknown environment id {env_id!r}; registered by this repo: {known}")
    return gym.make(env_id, **kwargs)
