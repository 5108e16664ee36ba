"""The oracle expert solves generated goals; search plus a blind first click does not."""
from __future__ import annotations

import numpy as np
import pytest

from envs.webshop.policies import first_result_policy, run_episode
from tests.envs.webshop_helpers import make_env, play_expert, small_catalogue


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_env(small_catalogue(tmp_path_factory, 300, seed=2), num_test_goals=60)


def test_expert_scores_high_on_the_test_split(env):
    results = [play_expert(env, "test", k) for k in range(env.num_tasks("test"))]
    scores = np.array([r[0] for r in results])
    steps = np.array([len(r[1]) for r in results])
    assert scores.mean() >= 0.97 and (scores == 1.0).mean() >= 0.93, (scores.mean(), (scores == 1.0).mean())
    assert steps.max() <= env.max_steps
    # the expert is a function of the state: replaying its actions gives the same episode
    again = play_expert(env, "test", 5)
    assert again[1] == results[5][1] and again[0] == results[5][0]


def test_expert_actions_are_admissible(env):
    for k in range(10):
        _, info = env.reset(options={"split": "train", "task_index": k})
        done = False
        while not done:
            a = env.expert_action()
            allowed = info["admissible_actions"]
            assert a in allowed or (a.startswith("search[") and allowed == ["search[<your query>]"])
            _, _, term, trunc, info = env.step(a)
            assert not info["noop"]
            done = term or trunc


def test_expert_recovers_from_detours(env):
    # wander first: open the last result, read its reviews; the expert must still finish well
    scores = []
    for k in range(15):
        env.reset(options={"split": "test", "task_index": k})
        _, _, _, _, info = env.step(env.expert_action())
        last = info["admissible_actions"][-1]
        if last.startswith("click[b0"):
            env.step(last)
            env.step("click[reviews]")
        done = False
        while not done:
            _, _, term, trunc, info = env.step(env.expert_action())
            done = term or trunc
        scores.append(info["raw_score"] or 0.0)
    assert np.mean(scores) >= 0.95


def test_search_alone_does_not_solve_the_task(env):
    wins = [run_episode(env, first_result_policy, "test", k)["won"] for k in range(env.num_tasks("test"))]
    assert np.mean(wins) <= 0.75  # near misses rank with the target: reading the page matters


def _hostile(env, task_index: int, kind: str) -> int:
    """Make the goal product of ``task_index`` hostile in a private copy of the env's catalogue: 2,000 extra option
    groups after its own, or a 200 KB value first in each of its groups. Returns the goal product's index."""
    import dataclasses
    import random

    env.reset(options={"split": "test", "task_index": task_index})
    i = env.goal.product_index
    products = list(env.catalogue.products)
    p = products[i]
    rng = random.Random(0)
    words = "cotton wool extra soft pack ounce bottle count piece inch set".split()
    if kind == "groups":
        options = dict(p.options)
        for k in range(2000):
            options[f"style {k}"] = tuple(f"{rng.choice(words)} {rng.choice(words)} {k}-{j}" for j in range(5))
    else:
        big = " ".join(f"{rng.choice(words)}{rng.randrange(10**6)}" for _ in range(20_000))[:200_000]
        options = {group: (big, *values) for group, values in p.options.items()} or {"style": (big, "plain")}
    products[i] = dataclasses.replace(p, options=options)
    shared = env.catalogue
    env.catalogue = dataclasses.replace(shared, products=products)  # the shared catalogue stays as it was
    env.catalogue.goal = shared.goal  # the goal as before: the product only offers more
    return i


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["groups", "big_value"])
def test_expert_is_bounded_on_a_hostile_product(tmp_path_factory, monkeypatch, kind):
    """A product with 2,000 option groups or a 200 KB option value: the expert chooses a product's options once per
    episode (not at every step) within EXPERT_MAX_COMPARISONS value comparisons, never compares an oversized value,
    plays admissible actions and wins as on the unchanged product (the goal's own groups are scanned first)."""
    import envs.webshop.env as webshop_env

    env = make_env(small_catalogue(tmp_path_factory, 300, seed=2), num_test_goals=60)
    task = next(k for k in range(20) if play_expert(env, "test", k)[0] == 1.0 and env.goal.goal_options)
    _hostile(env, task, kind)
    calls: list[int] = []
    real = webshop_env.option_value_matches

    def counted(g_name, g_value, value, cfg):
        calls.append(len(value))
        return real(g_name, g_value, value, cfg)

    monkeypatch.setattr(webshop_env, "option_value_matches", counted)
    _, info = env.reset(options={"split": "test", "task_index": task})
    actions, done = [], False
    while not done:
        a = env.expert_action()
        allowed = info["admissible_actions"]
        assert a in allowed or (a.startswith("search[") and allowed == ["search[<your query>]"]), a
        actions.append(a)
        _, _, term, trunc, info = env.step(a)
        done = term or trunc
    assert info["raw_score"] == 1.0 and info["won"], actions
    # the hostile product within its budget once, the 13 other results' few values (the unbounded expert: 80,152
    # comparisons for 2,000 groups, and the 200 KB value compared at every step)
    assert len(calls) <= 2 * webshop_env.EXPERT_MAX_COMPARISONS, len(calls)
    assert max(calls, default=0) <= webshop_env.EXPERT_MAX_VALUE_CHARS
