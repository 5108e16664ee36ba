"""Random admissible walks through ALFWorld games, recording what a state diagnostic needs per row.

Used by ``python -m experiments.grouping_diagnostic state-facts``: every row's game, observation, dynamic PDDL facts and
admissible commands, from uniformly random admissible actions (not a policy's rows).
"""
from __future__ import annotations

import random

from envs.alfworld.env import ALFWorldEnv

__all__ = ["random_walk_rows"]


def random_walk_rows(env: ALFWorldEnv, games: int, episodes: int, steps: int, seed: int) -> list[tuple]:
    """(game, observation, facts, admissible commands) for each step of ``episodes`` random walks of at most
    ``steps`` steps from the start of each of the first ``games`` training games (a prompt group's rollouts share
    one game and start)."""
    rng = random.Random(seed)
    rows = []
    for g in range(min(games, env.num_tasks("train"))):
        for _ in range(episodes):
            obs, info = env.reset(seed=g, options={"split": "train"})
            for _ in range(steps):
                rows.append((info["game"], obs, tuple(env.state_facts()), tuple(info["admissible_actions"])))
                obs, _, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
                if terminated or truncated:
                    break
    return rows
