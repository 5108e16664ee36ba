"""``rollout.prompt_format: verl_agent``: the prompts equal, character for character, what verl-agent's own env
managers (commit 796ed31) build from the same observations (``data/verl_agent_prompts``: episodes played in this
repo's ALFWorld and WebShop, history lengths 2 and 0, a WebShop page long enough to pass the 13,000-character
fallback)."""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from agents.prompts import PromptConfig, Transcript, VerlAgentPromptBuilder, get_prompt_builder

DATA = Path(__file__).parent / "data" / "verl_agent_prompts" / "prompts.json.xz"
CASES = json.loads(lzma.decompress(DATA.read_bytes()))["cases"]


def _prompts(case: dict) -> list[str]:
    """Our prompt of every step of a recorded episode, built as the rollout builds it (a ``Transcript`` fed the
    env's observations, admissible actions and the executed actions)."""
    builder = get_prompt_builder(case["env"], "verl_agent")
    cfg = PromptConfig(history_length=case["history_length"])
    steps = case["steps"]
    t = Transcript.start(steps[0]["obs"], {"task": case["task"], "admissible_actions": steps[0]["admissible"]})
    out = [builder.messages(t, cfg)[0]["content"]]
    for k, st in enumerate(steps[1:], start=1):
        t.record(steps[k - 1]["action"], st["obs"], {"admissible_actions": st["admissible"], "step": k})
        out.append(builder.messages(t, cfg)[0]["content"])
    return out


def test_the_data_covers_what_it_claims():
    envs = {(c["env"], c["history_length"]) for c in CASES}
    assert envs == {("ALFWorld-v0", 2), ("ALFWorld-v0", 0), ("WebShop-v0", 2), ("WebShop-v0", 0)}
    shop = [p for c in CASES if c["env"] == "WebShop-v0" for p in c["prompts"]]
    assert any("'click[search]'," in p for p in shop)  # the search page's button
    assert any(len(p) > 10_000 for p in shop) and any("Prior to this step" in p for p in shop)
    assert any("do something odd" in s.get("action", "") for c in CASES for s in c["steps"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['env']}-{c['seed']}-h{c['history_length']}")
def test_prompts_equal_verl_agents(case):
    ours = _prompts(case)
    assert len(ours) == len(case["prompts"])
    for k, (a, b) in enumerate(zip(ours, case["prompts"])):
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert a == b, f"step {k}, character {first}: {a[first:first + 60]!r} vs {b[first:first + 60]!r}"


def test_the_history_falls_back_above_13000_characters():
    case = next(c for c in CASES if c["seed"] == "long" and c["history_length"] == 2)
    later = case["prompts"][1:]  # every prompt after the first has history unless it falls back
    assert any("Prior to this step" in p for p in later) and any("Prior to this step" not in p for p in later)
    assert all("Prior to this step" not in p or len(p) <= 13_000 for p in later)
    assert _prompts(case) == case["prompts"]


def test_formats_and_envs_are_checked():
    assert isinstance(get_prompt_builder("ALFWorld-v0", "verl_agent"), VerlAgentPromptBuilder)
    assert not isinstance(get_prompt_builder("WebShop-v0"), VerlAgentPromptBuilder)  # bipace is the default
    with pytest.raises(ValueError, match="exists for alfworld and webshop only .*rollout.prompt_format=bipace"):
        get_prompt_builder("TextCraft-v0", "verl_agent")
    with pytest.raises(ValueError, match="prompt format 'verl-agent' is not one of bipace, verl_agent"):
        get_prompt_builder("ALFWorld-v0", "verl-agent")


def test_the_config_key_is_checked_before_compute():
    from trainer.config import ConfigError, load_config

    cfg = load_config("configs/paper/webshop_qwen2.5-1.5b.yaml")
    assert cfg.rollout.prompt_format == "verl_agent"
    assert load_config("configs/paper/textcraft_qwen2.5-1.5b.yaml").rollout.prompt_format == "bipace"
    with pytest.raises(ConfigError, match="rollout.prompt_format='verl_agent' with env.id='TextCraft-v0'"):
        load_config("configs/paper/textcraft_qwen2.5-1.5b.yaml", ["rollout.prompt_format=verl_agent"])
    with pytest.raises(ConfigError, match="rollout.prompt_format"):
        load_config("configs/paper/webshop_qwen2.5-1.5b.yaml", ["rollout.prompt_format=verl"])
