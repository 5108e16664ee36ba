"""Prompt builders: protocol sections, history window, bounded length with markers."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.prompts import (
    CUT_MARKER,
    HISTORY_MARKER,
    PromptConfig,
    Transcript,
    build_messages,
    get_prompt_builder,
)


def alfworld_transcript(steps=3, obs_len=40):
    info = {"task": "put a clean mug in cabinet", "admissible_actions": ["go to cabinet 1", "look"], "step": 0}
    t = Transcript.start("You are in the middle of a room.", info)
    for k in range(1, steps + 1):
        t.record(f"action {k}", f"observation {k} " + "x" * obs_len, dict(info, step=k))
    return t


def test_first_step_has_no_history_and_all_sections():
    info = {"task": "put a clean mug in cabinet", "admissible_actions": ["go to cabinet 1", "look"], "step": 0}
    messages = build_messages("ALFWorld-v0", Transcript.start("Welcome!", info))
    assert len(messages) == 1 and messages[0]["role"] == "user"
    text = messages[0]["content"]
    assert "ALFWorld" in text and "Your task: put a clean mug in cabinet" in text
    assert "You have taken 0 step(s)" in text and "recent steps" not in text
    assert "What you see now:\nWelcome!" in text
    assert "'go to cabinet 1'\n'look'" in text and text.rstrip().endswith("inside <action> </action>.")
    assert "<think> </think>" in text
    assert text.index("Your task") < text.index("What you see now") < text.index("'look'") < text.index("<think>")


def test_history_window_keeps_the_last_pairs_and_only_actions():
    t = alfworld_transcript(steps=4)
    text = get_prompt_builder("alfworld").build(t)
    assert "You have taken 4 step(s)" in text
    assert "[Step 3] You did: action 3" in text and "[Step 4] You did: action 4" in text
    assert "action 2" not in text and "[Step 3] You saw: observation 2" in text
    assert get_prompt_builder("alfworld").build(t, PromptConfig(history_length=0)).count("You did") == 0


def test_textcraft_keeps_the_recipe_block_and_omits_admissible():
    info = {"task": "craft stick", "admissible_actions": [], "step": 0}
    t = Transcript.start("Crafting commands:\ncraft 4 stick using 2 planks\n\nGoal: craft stick.", info)
    first = get_prompt_builder("TextCraft-v0").build(t)
    assert first.count("craft 4 stick using 2 planks") == 1 and "Actions you can take now" not in first
    for k in range(3):
        t.record("get 1 oak logs", "Got 1 oak logs", {"step": k + 1})
    later = get_prompt_builder("TextCraft-v0").build(t)
    assert "craft 4 stick using 2 planks" in later and "Crafting commands you were given" in later


def test_webshop_and_unknown_envs_get_builders(caplog):
    assert get_prompt_builder("WebShop-v0").env_name == "webshop"
    with caplog.at_level("WARNING", logger="agents.prompts"):
        assert get_prompt_builder("MyEnv-v3").env_name == "text"
        assert get_prompt_builder("MyEnv-v4").env_name == "text"  # the fallback is not silent, and said once
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "no prompt builder for 'myenv' in agents.prompts.PROMPT_BUILDERS"]


def test_long_history_is_cut_oldest_first_with_marker():
    t = alfworld_transcript(steps=3, obs_len=3000)
    cfg = PromptConfig(max_chars=7000)
    text = get_prompt_builder("alfworld").build(t, cfg)
    assert len(text) <= 7000 and HISTORY_MARKER.format(n=1) in text and "action 3" in text


def test_long_page_is_cut_from_its_start_with_marker():
    t = alfworld_transcript(steps=0)
    t.observation = "START " + "page " * 5000 + "THE END"
    text = get_prompt_builder("webshop").build(t, PromptConfig(max_chars=3000))
    assert len(text) <= 3000 and CUT_MARKER.strip() in text and "THE END" in text and "START" not in text


def test_token_budget_with_a_counter():
    count = lambda s: len(s.split())  # noqa: E731  (a whitespace "tokenizer")
    t = alfworld_transcript(steps=5, obs_len=10)
    t.observation = " ".join(f"w{i}" for i in range(3000))
    cfg = PromptConfig(max_tokens=600, count_tokens=count, reserve_tokens=50)
    text = get_prompt_builder("alfworld").build(t, cfg)
    assert count(text) <= 550 and "w2999" in text
    with pytest.raises(ValueError, match="count_tokens"):
        PromptConfig(max_tokens=10)


def test_impossible_budget_is_reported():
    with pytest.raises(ValueError, match="prompt budget 100 characters"):
        get_prompt_builder("alfworld").build(alfworld_transcript(), PromptConfig(max_chars=100))


@given(st.lists(st.tuples(st.text(max_size=300), st.text(max_size=40)), max_size=6), st.text(max_size=3000),
       st.lists(st.text(max_size=30), max_size=60), st.integers(min_value=1200, max_value=4000))
@settings(max_examples=150, deadline=None)
def test_length_is_always_bounded(pairs, obs, admissible, budget):
    t = Transcript(task="find the thing " * 5, first_observation="first", observation=obs, admissible=admissible,
                   step=len(pairs), pairs=list(pairs))
    for env in ("alfworld", "textcraft", "webshop"):
        text = get_prompt_builder(env).build(t, PromptConfig(max_chars=budget))
        assert len(text) <= budget and "<action> </action>" in text


def test_finite_worlds_get_their_own_builders_on_real_observations():
    """FiniteCraft keeps its recipe book in the prompt after the first step; FiniteRooms lists admissible actions."""
    import gymnasium as gym

    import envs

    craft = gym.make("FiniteCraft-v0", n_intermediates=2, n_base_per=1)
    obs, info = craft.reset(seed=0, options={"task_index": 0})
    builder = get_prompt_builder(envs.unwrap(craft).env_name)
    assert builder.env_name == get_prompt_builder("FiniteCraft-v0").env_name == "finitecraft"
    t = Transcript.start(obs, info)
    for _ in range(3):
        a = envs.expert_action(craft)
        obs, _, term, _, info = craft.step(a)
        t.record(a, obs, info)
        if term:
            break
    text = builder.build(t)
    assert "The recipe book:" in text and "craft 1" in text.split("The recipe book:")[1]
    rooms = gym.make("FiniteRooms-v0", n_locations=4)
    obs, info = rooms.reset(seed=0, options={"task_index": 0})
    text = get_prompt_builder("FiniteRooms-v0").build(Transcript.start(obs, info))
    assert "household robot" in text and f"'{info['admissible_actions'][0]}'" in text
