"""The experts' responses: the expert's action wrapped in the protocol's response format, with a rationale.

An SFT warm start imitates ``<think>RATIONALE</think><action>EXPERT ACTION</action>`` (docs/protocol.md). The
rationale is a short scratchpad that restates what the expert's next action depends on, written only from what the
prompt shows [choice]; ``style`` is ``trace | goal | none``. TextCraft's ``trace`` walks the recipe planner's chain
from the goal down to the item the action acts on, with the counts that decide it, e.g.::

    <think>goal: craft 3 acacia sign using 6 acacia planks, 1 stick. need 1 stick, have 0.
    craft 1 stick using 2 bamboo. need 2 bamboo, have 0. get 2 bamboo.</think><action>get 2 bamboo</action>

Other envs restate the task (``generic_rationale``). ``TextEnv.expert_response(info, style)`` calls
``expert_response`` on an env, so a pool can label states inside its workers (``envs.pool.EnvPool.call``).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

__all__ = ["RATIONALE_STYLES", "RationaleStyle", "RATIONALES", "format_response", "textcraft_rationale",
           "generic_rationale", "expert_response", "ExpertStep", "ExpertEpisode", "expert_episode"]

RationaleStyle = Literal["trace", "goal", "none"]
RATIONALE_STYLES = get_args(RationaleStyle)


# =============================================================================================== responses
def format_response(think: str, action: str) -> str:
    """The protocol's response text: ``<think>{think}</think><action>{action}</action>`` (docs/protocol.md)."""
    return f"<think>{think}</think><action>{action}</action>"


_CRAFT_RE = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_GET_RE = re.compile(r"^get (\d+) (.+)$")
_INPUT_RE = re.compile(r"^(\d+) (.+)$")


def _parse_craft(action: str) -> tuple[str, int, list[tuple[str, int]]] | None:
    """``craft N item using k a, m b`` -> (item, N, [(a, k), (b, m)]); None when not a craft command."""
    m = _CRAFT_RE.match(action)
    if not m:
        return None
    inputs = []
    for part in m.group(3).split(","):
        mi = _INPUT_RE.match(part.strip())
        if not mi:
            return None
        inputs.append((mi.group(2), int(mi.group(1))))
    return m.group(2), int(m.group(1)), inputs


def _name(item_id: str) -> str:
    return item_id.replace("minecraft:", "").replace("_", " ")


def textcraft_rationale(env, info: dict, action: str, style: str = "trace") -> str:
    """TextCraft scratchpad for the expert's ``action`` in the current state (see module docstring).

    Built from the planner's remaining plan (``env.expert_plan()``) and the inventory in ``info["state_key"]``:
    the recipe chain from the goal to the item that ``action`` gets or crafts, with need/have counts computed as
    the planner does (an input of a recipe crafted c = ceil(missing / yield) times is needed k * c times). Every
    fact in it is visible in the prompt (the recipe list, the goal, the inventory line when the env's
    ``show_inventory`` option is on). Falls back to the goal recipe alone when the chain does not reproduce the
    action (never seen on the expert's own states; counted by the tests).
    """
    if style == "none":
        return ""
    inner = getattr(env, "unwrapped", env)
    goal = _name(inner.goal)
    inventory = Counter({_name(k): int(v) for k, v in (info.get("state_key") or ("", "", ()))[2]})
    plan = inner.expert_plan()
    recipes: dict[str, tuple[str, int, list[tuple[str, int]]]] = {}
    for a in plan:
        parsed = _parse_craft(a)
        if parsed is not None and parsed[0] not in recipes:
            recipes[parsed[0]] = (a, parsed[1], parsed[2])
    goal_line = recipes[goal][0] if goal in recipes else None
    if style == "goal" or goal_line is None:
        return f"goal: {goal_line}." if goal_line else f"goal: {goal}."

    # the planner's depth-first walk, with its recipe choices taken from the plan
    def walk(item: str, need: int, frames: list) -> list | None:
        have = inventory[item]
        if have >= need:
            return None
        if item not in recipes:  # a base item: the next action gets it
            return frames + [(item, need, have, None)]
        line, out_count, inputs = recipes[item]
        crafts = math.ceil((need - have) / out_count)
        here = frames + [(item, need, have, line)]
        for inp, k in inputs:
            found = walk(inp, k * crafts, here)
            if found is not None:
                return found
        return here  # every input held: the next action crafts this item

    frames = walk(goal, inventory[goal] + 1, [])
    if not frames:
        return f"goal: {goal_line}."
    item, need, have, line = frames[-1]
    expected = line if line is not None else f"get {need - have} {item}"
    if expected != action:
        return f"goal: {goal_line}."
    parts = []
    for j, (it, nd, hv, ln) in enumerate(frames):
        if j > 0:
            parts.append(f"need {nd} {it}, have {hv}.")
        if ln is not None:
            parts.append(f"goal: {ln}." if j == 0 else f"{ln}.")
    parts.append(f"{action}." if line is None else "inputs ready.")
    return " ".join(parts)


def generic_rationale(env, info: dict, action: str, style: str = "trace") -> str:
    """Any env: restate the task (what every action depends on) [choice]."""
    if style == "none":
        return ""
    task = str(info.get("task", "")).strip()
    return f"task: {task}." if task else ""


#: env name (``TextEnv.env_name``) -> rationale builder ``(env, info, action, style) -> str``
RATIONALES: dict[str, Callable[[Any, dict, str, str], str]] = {"textcraft": textcraft_rationale}


def expert_response(env, info: dict, style: str = "trace") -> tuple[str, str]:
    """``(response text, action)`` of the env's expert in the current state, with a ``style`` rationale."""
    if style not in RATIONALE_STYLES:
        raise ValueError(f"rationale style {style!r} is not one of {RATIONALE_STYLES}")
    inner = getattr(env, "unwrapped", env)
    action = inner.expert_action()
    builder = RATIONALES.get(inner.env_name, generic_rationale)
    return format_response(builder(inner, info, action, style), action), action


class ExpertStep(NamedTuple):
    """One step of an expert episode: the response and action taken, then what the env answered."""

    response: str
    action: str
    obs: str
    info: dict


@dataclass
class ExpertEpisode:
    """``obs`` / ``info``: the reset's; ``steps``: one ``ExpertStep`` per action; ``won``: the last info's."""

    obs: str
    info: dict
    steps: list[ExpertStep] = field(default_factory=list)
    won: bool = False


def expert_episode(env, reset_kwargs: dict, style: str = "trace") -> ExpertEpisode:
    """Play one episode of ``env`` (reset with ``reset_kwargs``) with its expert, each action with a ``style``
    rationale, until the episode ends (the env's horizon bounds it)."""
    obs, info = env.reset(**reset_kwargs)
    ep = ExpertEpisode(obs, info)
    while True:
        response, action = expert_response(env, info, style)
        obs, _r, term, trunc, info = env.step(action)
        ep.steps.append(ExpertStep(response, action, obs, info))
        if term or trunc:
            ep.won = bool(info.get("won"))
            return ep
