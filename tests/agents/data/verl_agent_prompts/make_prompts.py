"""Write ``prompts.json.xz``: episodes played in this repo's ALFWorld and WebShop, and the prompts verl-agent's own env
managers build from the same observations.

Not run by the tests (they read the committed ``prompts.json.xz``); README.md beside this file says how it was run.
Usage (from the repository root):

    python tests/agents/data/verl_agent_prompts/make_prompts.py --verl-agent SRC_DIR --out prompts.json.xz

``SRC_DIR`` holds verl-agent's ``agent_system/`` package, unchanged, and a stub module ``omegaconf.py`` defining only
``OmegaConf`` (``env_manager.py`` imports it at module level; the prompt code never uses it). This script holds no
verl-agent code: it plays episodes here, then hands the same observations to verl-agent's
``AlfWorldEnvironmentManager`` / ``WebshopEnvironmentManager`` through a vectorised stand-in env that replays them,
and records the ``text`` prompts those managers return.
"""
from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO))


def play(env_id: str, seed: int, steps: int, rng: np.random.Generator, expert_share: float, **kwargs) -> dict:
    """One episode: the expert's action with probability ``expert_share``, else a random admissible one (WebShop's
    search page: the expert's query), plus one malformed action at step 1; each step's observation, admissible
    actions and the executed action."""
    import envs

    env = envs.make(env_id, **kwargs)
    obs, info = env.reset(seed=seed)
    rec = {"env": env_id, "seed": seed, "task": info.get("task", ""), "steps": [
        {"obs": obs, "admissible": list(info.get("admissible_actions") or [])}]}
    for k in range(steps):
        adm = rec["steps"][-1]["admissible"]
        if k == 1:
            action = "do something odd"
        elif rng.random() < expert_share or not adm or adm == ["search[<your query>]"]:
            action = envs.expert_action(env)
        else:
            action = str(adm[int(rng.integers(len(adm)))])
        obs, _, term, trunc, info = env.step(action)
        rec["steps"][-1]["action"] = action
        rec["steps"].append({"obs": obs, "admissible": list(info.get("admissible_actions") or [])})
        if term or trunc:
            break
    return rec


class _Replay:
    """verl-agent's vectorised env, replaying recorded episodes (one per env slot, all of the same length)."""

    def __init__(self, episodes: list[dict], webshop: bool):
        self.episodes, self.webshop, self.t = episodes, webshop, 0

    def _avail(self, adm: list[str]) -> dict:
        # the original's get_available_actions: the search page has the bar and its "search" button
        if adm == ["search[<your query>]"]:
            return {"has_search_bar": True, "clickables": ["search"]}
        return {"has_search_bar": False, "clickables": [a[len("click["):-1] for a in adm]}

    def _infos(self) -> list[dict]:
        return [{"available_actions": self._avail(e["steps"][self.t]["admissible"])} if self.webshop else {}
                for e in self.episodes]

    @property
    def get_admissible_commands(self) -> list[list[str]]:
        return [e["steps"][self.t]["admissible"] for e in self.episodes]

    def reset(self):
        self.t = 0
        obs = [e["steps"][0]["obs"] for e in self.episodes]
        return (obs, self._infos()) if self.webshop else (obs, None, self._infos())

    def step(self, actions):
        self.t += 1
        obs = [e["steps"][self.t]["obs"] for e in self.episodes]
        n = len(self.episodes)
        if self.webshop:
            return obs, [0.0] * n, [False] * n, self._infos()
        return obs, None, [0.0] * n, [False] * n, self._infos()


def verl_agent_prompts(episodes: list[dict], history_length: int) -> list[list[str]]:
    """verl-agent's prompt of every step of ``episodes`` (same env, same length), slot by slot."""
    from agent_system.environments import env_manager as em

    webshop = episodes[0]["env"].startswith("WebShop")
    cls = em.WebshopEnvironmentManager if webshop else em.AlfWorldEnvironmentManager
    config = SimpleNamespace(env=SimpleNamespace(history_length=history_length))

    def project(texts, *pools):  # the executed actions as recorded (verl-agent's projection is not what is compared)
        return list(texts), [1] * len(texts)

    mgr = cls(_Replay(episodes, webshop), project, config)
    obs, _ = mgr.reset({})
    out = [[p] for p in obs["text"]]
    for t in range(len(episodes[0]["steps"]) - 1):
        obs, *_ = mgr.step([e["steps"][t]["action"] for e in episodes])
        for slot, p in enumerate(obs["text"]):
            out[slot].append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verl-agent", required=True, help="folder with verl-agent's agent_system/ and a stub omegaconf")
    ap.add_argument("--out", default=str(Path(__file__).with_name("prompts.json.xz")))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(args.verl_agent).resolve()))
    rng = np.random.default_rng(5)
    cases = []
    # ALFWorld: 2 games of the generated test fixture, 6 steps each (the expert half of the time)
    from envs.paths import cache_dir

    fixture = sorted(cache_dir("test-fixtures").glob("alfworld-v*"))[-1]
    alf = [play("ALFWorld-v0", s, 6, rng, 0.5, data_path=str(fixture)) for s in (0, 3)]
    # WebShop: the generated 1,000-product catalogue, 7 steps each (search, results, an item, options, sub-pages)
    shop = [play("WebShop-v0", s, 7, rng, 0.6) for s in (1, 2)]
    # a page long enough that the prompt with history passes 13,000 characters (verl-agent then drops the history)
    long_ep = json.loads(json.dumps(shop[0]))
    long_ep["seed"] = "long"
    for st in long_ep["steps"][2:]:
        st["obs"] = st["obs"] + " [SEP] " + " ".join(["a very long product description"] * 150)
    shop.append(long_ep)
    for group in (alf, shop):
        n = min(len(e["steps"]) for e in group)
        group[:] = [{**e, "steps": e["steps"][:n]} for e in group]
        for e in group:
            e["steps"][-1].pop("action", None)
        for h in (2, 0):
            for e, prompts in zip(group, verl_agent_prompts(group, h)):
                cases.append({**e, "history_length": h, "prompts": prompts})
    text = json.dumps({"verl_agent_commit": "796ed310287fa605c9292a0fce07a86d79fde05e", "cases": cases}, indent=1,
                      ensure_ascii=False) + "\n"
    Path(args.out).write_bytes(lzma.compress(text.encode(), preset=9))
    print(f"{len(cases)} episodes, {sum(len(c['prompts']) for c in cases)} prompts -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
