"""Small generated catalogues and env factories shared by the WebShop tests."""
from __future__ import annotations

from pathlib import Path

from envs.webshop import WebShopEnv
from envs.webshop.generate import write_catalogue

_MADE: dict[tuple[int, int], Path] = {}


def small_catalogue(tmp_path_factory, num_products: int = 150, seed: int = 1) -> Path:
    """A generated catalogue folder (written once per test session and size)."""
    key = (num_products, seed)
    if key not in _MADE:
        folder = tmp_path_factory.mktemp(f"webshop_n{num_products}_s{seed}")
        write_catalogue(folder, num_products, seed, progress=False)
        _MADE[key] = folder
    return _MADE[key]


def make_env(folder: Path, **overrides) -> WebShopEnv:
    overrides.setdefault("num_test_goals", 50)
    reward = dict(overrides.pop("reward", {}))
    reward.setdefault("noun_extractor", "heuristic")  # no spaCy start-up in most tests
    return WebShopEnv(data_dir=str(folder), reward=reward, **overrides)


def play_expert(env: WebShopEnv, split: str, task_index: int) -> tuple[float, list[str], dict]:
    obs, info = env.reset(options={"split": split, "task_index": task_index})
    actions = []
    done = False
    while not done:
        a = env.expert_action()
        actions.append(a)
        obs, reward, term, trunc, info = env.step(a)
        done = term or trunc
    return (info["raw_score"] or 0.0), actions, info
