"""The contract of ``envs/README.md``, checked for every id of ``envs.ENV_IDS``: a newly registered environment is
covered without editing this file, as long as ``gymnasium.make(id)`` works offline without arguments (or its
arguments are added to ``MAKE_KWARGS``)."""
from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agents.prompts as prompts
import envs
from envs.base import INFO_KEYS, MAX_ACTION_CHARS, SUCCESS_REWARD
from trainer.config import KNOWN_ENV_IDS, EnvConfig

#: gymnasium.make arguments of the ids that need data to be made in a test; the fixture names a conftest fixture
MAKE_KWARGS = {"ALFWorld-v0": ("alfworld_data", lambda data: {"data_path": str(data)})}
MALFORMED = ["", "x" * (MAX_ACTION_CHARS + 1), "\x00\x07\x1b[2J", None, b"\xff\xfe", 12345]


@pytest.fixture(params=sorted(envs.ENV_IDS))
def env_id(request):
    return request.param


@pytest.fixture()
def make(request, env_id):
    def _make(**overrides):
        kwargs = {}
        if env_id in MAKE_KWARGS:
            fixture, to_kwargs = MAKE_KWARGS[env_id]
            kwargs = to_kwargs(request.getfixturevalue(fixture))
        return gym.make(env_id, **{**kwargs, **overrides})

    return _make


def _assert_normal_step(env, out, action, steps_before):
    obs, reward, terminated, truncated, info = out
    assert env.observation_space.contains(obs), (action, obs[:200])
    assert set(INFO_KEYS) <= set(info) and "error" not in info, (action, info)
    assert info["step"] == steps_before + 1 and reward in (0.0, SUCCESS_REWARD), (action, reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)


def test_the_config_and_gymnasium_know_every_env(env_id):
    assert KNOWN_ENV_IDS == tuple(envs.ENV_IDS)  # one list: trainer.config derives its ids from envs
    EnvConfig(id=env_id).validate()
    spec = gym.spec(env_id)
    assert spec.entry_point == envs.ENV_IDS[env_id] and spec.max_episode_steps is None


def test_tasks_reset_and_the_gymnasium_checker(env_id, make):
    env = make()
    inner = envs.unwrap(env)
    assert inner.splits and set(inner.eval_splits) <= set(inner.splits) and inner.max_steps >= 1
    for split in inner.splits:
        assert inner.num_tasks(split) >= 1, split
        obs, info = env.reset(seed=3, options={"split": split, "task_index": 0})
        assert env.observation_space.contains(obs) and set(INFO_KEYS) <= set(info)
        assert (info["step"], info["noop"]) == (0, False)
        if "split" in info:  # where the env picks its task with resolve_task (not WebShop)
            assert (info["split"], info["task_index"]) == (split, 0)
        assert info["task_family"] == inner.task_family_of(split, 0) and not info["won"]
        assert isinstance(info["admissible_actions"], list) and hash(info["state_key"]) is not None
    first = env.reset(seed=5)
    assert first[0] == make().reset(seed=5)[0] and first[1].get("split", inner.splits[0]) == inner.splits[0]
    with pytest.raises(ValueError):
        env.reset(seed=0, options={"split": "no-such-split"})
    check_env(inner)


def test_admissible_and_expert_actions_are_normal_steps(env_id, make):
    """Every admissible action of the first state (from a fresh reset each), then a seeded walk that takes a random
    admissible action (the expert's where the env lists none): each is a step that is not a no-op."""
    env = make()
    _obs, info = env.reset(seed=0)
    for action in info["admissible_actions"][:10]:
        env.reset(seed=0)
        out = env.step(action)
        _assert_normal_step(env, out, action, 0)
        assert not out[4]["noop"], (action, out[0][:200])
    rng = random.Random(0)
    _obs, info = env.reset(seed=0)
    expert = envs.expert_action(env)
    assert isinstance(expert, str) and expert
    for t in range(12):
        action = rng.choice(info["admissible_actions"]) if info["admissible_actions"] else envs.expert_action(env)
        out = env.step(action)
        _assert_normal_step(env, out, action, t)
        assert not out[4]["noop"], (action, out[0][:200])
        info = out[4]
        if out[2] or out[3]:
            break


@pytest.mark.parametrize("action", MALFORMED, ids=["empty", "too-long", "control", "none", "bytes", "int"])
def test_any_action_is_a_normal_step(env_id, make, action):
    env = make()
    obs, info = env.reset(seed=0)
    out = env.step(action)
    _assert_normal_step(env, out, repr(action)[:40], 0)
    assert out[4]["noop"] and out[4]["state_key"] == info["state_key"] and not out[2]


def test_a_prompt_builder_or_the_logged_fallback(env_id, make, caplog):
    """The env has a builder in ``agents.prompts.PROMPT_BUILDERS``, or gets the generic wording with a warning."""
    obs, info = make().reset(seed=0)
    prompts._warn_generic.cache_clear()
    with caplog.at_level("WARNING", logger="agents.prompts"):
        builder = prompts.get_prompt_builder(env_id)
    key = env_id.split("-")[0].lower()
    if key in prompts.PROMPT_BUILDERS:
        assert builder is prompts.PROMPT_BUILDERS[key] and not caplog.records
    else:
        assert builder.env_name == "text" and "no prompt builder" in caplog.text
    text = builder.build(prompts.Transcript.start(obs, info))
    assert obs.strip()[-40:] in text and "<action>" in text
