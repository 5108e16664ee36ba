"""The shared TextEnv contract: task resolution, action/observation cleaning, errors as no-op steps."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.base import (
    INFO_KEYS,
    MAX_ACTION_CHARS,
    MAX_OBS_CHARS,
    TEXT_CHARSET,
    clean_action,
    clean_observation,
)
from tests.envs.helpers import CounterEnv


@given(st.one_of(st.text(max_size=3000), st.binary(max_size=200), st.none(), st.integers(), st.lists(st.text())))
@settings(max_examples=200, deadline=None)
def test_clean_action_never_raises_and_is_clean(x):
    out = clean_action(x)
    if out is not None:
        assert isinstance(out, str)
        assert out == out.strip()
        assert "  " not in out
        assert all(c.isprintable() for c in out)
        assert len(out) <= MAX_ACTION_CHARS
    kept = clean_action(x, collapse_spaces=False)  # runs of spaces kept, otherwise the same
    assert (kept is None) == (out is None)
    if kept is not None:
        assert " ".join(kept.split()) == out and kept == kept.strip() and all(c.isprintable() for c in kept)


def test_clean_action_examples():
    assert clean_action("  go   to\tcabinet 1\n") == "go to cabinet 1"
    assert clean_action(b"inc") == "inc"
    assert clean_action("x" * (MAX_ACTION_CHARS + 1)) is None
    assert clean_action(None) is None
    assert clean_action("a\x00b") == "a b"
    # collapse_spaces=False keeps inner runs (WebShop's values may hold two spaces); ends are still stripped
    assert clean_action("  click[pack of  2] ", collapse_spaces=False) == "click[pack of  2]"
    assert clean_action("click[a\tb\u00a0 c]\n", collapse_spaces=False) == "click[a b  c]"
    assert clean_action("click[a\tb\u00a0 c]\n") == "click[a b c]"


@given(st.text(max_size=500))
@settings(max_examples=200, deadline=None)
def test_clean_observation_is_in_the_space(text):
    out = clean_observation(text)
    assert all(c in TEXT_CHARSET for c in out)


def test_clean_observation_folds_and_cuts():
    assert clean_observation("café\tau lait") == "cafe au lait"
    long = clean_observation("y" * (MAX_OBS_CHARS + 10))
    assert len(long) == MAX_OBS_CHARS and "observation cut" in long


def test_reset_resolves_tasks_and_validates_options():
    env = CounterEnv()
    obs, info = env.reset(seed=7)
    assert (info["split"], info["task_index"]) == ("train", 7 % 5)
    obs, info = env.reset(seed=7, options={"split": "eval", "task_index": 1})
    assert (info["split"], info["task_index"], info["task_family"]) == ("eval", 1, "odd")
    assert set(INFO_KEYS) <= set(info) and info["step"] == 0 and info["noop"] is False
    with pytest.raises(ValueError, match="unknown split 'test'"):
        env.reset(seed=0, options={"split": "test"})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(seed=0, options={"split": "eval", "task_index": 3})
    with pytest.raises(ValueError, match="unknown option"):
        env.reset(seed=0, options={"splt": "eval"})
    with pytest.raises(ValueError, match="must be an integer"):
        env.reset(seed=0, options={"task_index": "1"})


@pytest.mark.parametrize("action",
                         ["", " ", "x" * 100_000, "\x00\x1b[31m", "go to 火", None, 3.5, b"\xff\xfe", ["inc"]])
def test_any_action_is_a_normal_step(action):
    env = CounterEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and env.observation_space.contains(obs)
    assert reward == 0.0 and not terminated and info["noop"] is True and info["step"] == 1
    assert info["anchor_obs"] == obs


def test_env_exception_becomes_a_noop_with_error():
    env = CounterEnv()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("raise")
    assert info["noop"] is True and "ValueError: boom" in info["error"] and not terminated


def test_horizon_truncates_and_win_terminates():
    env = CounterEnv(max_steps=3)
    env.reset(seed=0, options={"task_index": 4})  # target 6: cannot be reached in 3 steps
    results = [env.step("inc") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("inc")
    env.reset(seed=0, options={"task_index": 0})  # target 2
    env.step("inc")
    obs, reward, terminated, truncated, info = env.step("inc")
    assert terminated and not truncated and reward == 10.0 and info["won"]


def test_bad_constructor_arguments_are_reported():
    with pytest.raises(ValueError, match="max_steps"):
        CounterEnv(max_steps=0)
    with pytest.raises(ValueError, match="render_mode"):
        CounterEnv(render_mode="human")
