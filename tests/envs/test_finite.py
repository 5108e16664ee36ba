"""The finite MDPs behind the repo's TextEnv contract."""
from __future__ import annotations

import pytest

from envs.base import INFO_KEYS
from envs.finite.textenv import FiniteMDPEnv


@pytest.mark.parametrize("family,kw",
                         [("craft", dict(n_intermediates=2, n_base_per=2)), ("rooms", dict(n_locations=5))])
def test_expert_wins_every_task(family, kw):
    env = FiniteMDPEnv(family, surface="high", alias=0.5, max_steps=50, **kw)
    for k in range(env.num_tasks("train")):
        obs, info = env.reset(seed=k, options={"split": "train", "task_index": k})
        assert set(INFO_KEYS) <= set(info) and info["anchor_obs"] == obs and info["step"] == 0
        for _ in range(50):
            action = env.expert_action()
            if family == "rooms":
                assert action in info["admissible_actions"]
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["state_key"] == env._s
            if terminated or truncated:
                break
        assert terminated and info["won"] and reward == 10.0, (family, k)


def test_unknown_action_is_a_noop_and_reset_is_reproducible():
    env = FiniteMDPEnv("rooms", surface="high", alias=0.0)
    obs1, info1 = env.reset(seed=3, options={"task_index": 1})
    obs2, info2 = env.reset(seed=3, options={"task_index": 1})
    assert obs1 == obs2 and info1["state_key"] == info2["state_key"]
    obs, r, term, trunc, info = env.step("dance wildly")
    assert info["noop"] and info["state_key"] == info1["state_key"] and r == 0.0 and not term
    obs, r, term, trunc, info = env.step(12345)  # not a string: the base class answers
    assert info["noop"]
    with pytest.raises(ValueError, match="task_index"):
        env.reset(seed=0, options={"task_index": 99})
    with pytest.raises(ValueError, match="split"):
        env.reset(seed=0, options={"split": "test"})


@pytest.mark.parametrize("env_id,family,kw", [("FiniteCraft-v0", "craft", dict(n_intermediates=2, n_base_per=1)),
                                              ("FiniteRooms-v0", "rooms", dict(n_locations=4))])
def test_gymnasium_ids_play_the_same_world(env_id, family, kw):
    """The registered ids make the family's env (options passed through) and the expert wins through wrappers."""
    import gymnasium as gym

    import envs

    env = gym.make(env_id, surface="high", alias=0.5, max_steps=30, **kw)
    direct = FiniteMDPEnv(family, surface="high", alias=0.5, max_steps=30, **kw)
    assert envs.unwrap(env).mdp.num_states == direct.mdp.num_states
    obs, info = env.reset(seed=1, options={"task_index": 0})
    assert obs == direct.reset(seed=1, options={"task_index": 0})[0]
    for _ in range(30):
        obs, reward, terminated, truncated, info = env.step(envs.expert_action(env))
        if terminated or truncated:
            break
    assert terminated and info["won"]
    with pytest.raises(ValueError, match="alias"):
        gym.make(env_id, alias=2.0)


def test_a_config_may_name_the_finite_worlds():
    from trainer.config import EnvConfig

    EnvConfig(id="FiniteRooms-v0", kwargs={"surface": "low", "alias": 0.0}).validate()
    with pytest.raises(ValueError, match="did you mean 'FiniteRooms-v0'"):
        EnvConfig(id="FiniteRoom-v0").validate()


@pytest.mark.parametrize("name", ["finiterooms", "finitecraft"])
def test_the_warm_start_presets_of_the_worlds_are_winnable_within_their_horizon(name):
    """``ENV_PRESETS``' max_steps is also the MDP's horizon: the expert must win every task within it, or the warm
    start learns from nothing and the truth of every unwinnable task is 0 (the first tiny preset's horizon of 6 made
    the 8-step task 0 of the rooms world unwinnable)."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)
    from warmstart.config import ENV_PRESETS, WarmStartConfig

    env_id, kw = ENV_PRESETS[name]
    assert WarmStartConfig(env=name).env_id == env_id
    env = gym.make(env_id, **kw)
    try:
        u = env.unwrapped
        for k in range(u.num_tasks("train")):
            _, info = env.reset(seed=k, options={"task_index": k})
            for _ in range(kw["max_steps"]):
                _, _, term, trunc, info = env.step(u.expert_action())
                if term or trunc:
                    break
            assert info["won"], f"{name}: the expert does not win task {k} within {kw['max_steps']} steps"
    finally:
        env.close()
