"""Projection of responses to actions (docs/protocol.md, "Agent loop"): examples and hypothesis properties."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.projection import NOOP_ACTION, project, project_batch

TAGS = st.sampled_from(["<think>", "</think>", "<action>", "</action>", "<ACTION>", "</Action>", "<act", ">", "\n"])
JUNK = st.text(max_size=40)


def test_examples():
    assert project("<think>go</think><action> Go To Cabinet 1 </action>") == ("go to cabinet 1", True, "")
    assert project("<think>x</think> <action>take apple</action> <action>other</action>").action == "take apple"
    assert project("<action>look</action>") == (NOOP_ACTION, False, "no <think>...</think>")
    assert project("<think>hmm</think> look") == (NOOP_ACTION, False, "no <action>...</action>")
    assert project("<think></think><action>look") .valid is False
    assert project("<think>a</think></action> early <action>late</action>").action == "late"
    nested = project("<think>a</think><action><action>inner</action></action>")
    assert nested.valid and nested.action == "<action>inner"
    assert project("<THINK>a</THINK><ACTION>Inventory</ACTION>") == ("inventory", True, "")
    assert project("<think>a</think><action></action>") == ("", True, "")
    assert project(None).valid is False and project(b"<think>a</think><action>x</action>").action == "x"
    big = "<think>" + "a" * 100_000 + "</think><action>look</action>"
    assert project(big) == ("look", True, "")
    assert project("<think>日本</think><action>gö</action>") == ("gö", True, "")
    assert project_batch(["<think>a</think><action>b</action>", ""]) == (["b", ""], [True, False])


@given(st.lists(st.one_of(TAGS, JUNK), max_size=12).map("".join))
@settings(max_examples=400, deadline=None)
def test_never_raises_and_is_consistent(response):
    action, valid, reason = project(response)
    assert isinstance(action, str) and isinstance(valid, bool)
    low = response.lower()
    if valid:
        assert "<think>" in low and "</think>" in low and "<action>" in low and reason == ""
        assert "</action>" not in action and action == action.strip()
        start = low.index("<action>") + len("<action>")
        assert low[start:start + len(low)].find("</action>") >= 0
    else:
        assert action == NOOP_ACTION and reason


@given(st.text(max_size=200).filter(lambda s: "<" not in s and ">" not in s),
       st.text(max_size=50).filter(lambda s: "<" not in s))
@settings(max_examples=200, deadline=None)
def test_well_formed_round_trip(body, thought):
    action, valid, _ = project(f"<think>{thought}</think>\n<action>{body}</action>")
    assert valid and action == body.lower().strip()


@given(st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=64), st.lists(st.text(max_size=5))))
def test_non_text_inputs(x):
    action, valid, _ = project(x)
    assert isinstance(action, str) and (valid is False or isinstance(x, bytes))
