"""Reference policies on WebShop, for tests, sanity checks and the expert report.

``expert_policy`` is the environment's oracle (``WebShopEnv.expert_action``). ``first_result_policy`` is the
"search is enough" baseline: it searches like the expert, opens the first result, chooses the goal's options
there and buys. The gap between the two measures how much the near-miss products demand reading the pages.
"""
from __future__ import annotations

from .env import WebShopEnv

__all__ = ["expert_policy", "first_result_policy", "run_episode"]


def expert_policy(env: WebShopEnv) -> str:
    return env.expert_action()


def first_result_policy(env: WebShopEnv) -> str:
    if env.page == "search":
        return env.expert_action()
    if env.page == "results":
        items = [a for a in env.admissible_actions() if env._clickables()[a[6:-1]][0] == "item"]
        return items[0] if items else "click[back to search]"
    action = env.expert_action()  # on the item page: the expert's option choices, but never going back
    return "click[buy now]" if action == "click[< prev]" else action


def run_episode(env: WebShopEnv, policy, split: str, task_index: int) -> dict:
    """Play one task; returns score (0 without a purchase), won, steps and the actions taken."""
    _, info = env.reset(options={"split": split, "task_index": task_index})
    actions = []
    done = False
    while not done:
        action = policy(env)
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    score = info["raw_score"] if info["raw_score"] is not None else 0.0
    return {"score": float(score), "won": bool(info["won"]), "steps": len(actions), "actions": actions,
            "family": info["task_family"]}
