"""ADaPT's TextCraft evaluation set (Prasad et al. 2024, archiki/ADaPT) as facts the ``adapt`` split plays.

ADaPT's ``TextCraft.reset(seed)`` picks goal index ``seed % n`` of the items of crafting depth >= 2 sorted
deepest first, and its ``run_textcraft.py`` evaluates seeds 0..199. Its committed results file
(``results/ADaPT_maxd3_textcraft_gpt-3.5-turbo-instruct.json``) lists, per seed, the goal ("problem") and
the reward of ADaPT with GPT-3.5-turbo-instruct (104 of 200 won: the paper's 52%). ``envs/data/
textcraft_adapt_goals.json`` holds those two facts per seed, written from that file by

    python -m envs.textcraft_adapt <path to ADaPT_maxd3_textcraft_gpt-3.5-turbo-instruct.json>

Why the within-depth order cannot be recomputed here: ADaPT reads the recipe files in ``os.listdir`` order,
and both the order of its items and which recipe of a two-way cycle it drops depend on it. This repo reads
them sorted, so 2 of the 200 goals differ (``MISSING``): see ``envs/README.md``, "TextCraft against ADaPT".
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

__all__ = ["DATA_FILE", "SOURCE", "MISSING", "AdaptGoal", "adapt_goals", "build_from_results", "main"]

DATA_FILE = Path(__file__).resolve().parent / "data" / "textcraft_adapt_goals.json"
SOURCE = {"repo": "archiki/ADaPT", "path": "results/ADaPT_maxd3_textcraft_gpt-3.5-turbo-instruct.json",
          "commit": "24adb5c756b3bce363d73c0a1490067505575180"}
#: ADaPT goals this repo's recipe tables cannot pose as they were posed there, and why
MISSING = {
    "minecraft:honey_bottle": "no recipe here: honey_block.json sorts before honey_bottle.json, so the package keeps "
                              "'honey block from 4 honey bottles' and drops 'honey bottle from a honey block' as a "
                              "cycle (ADaPT's listdir order kept the other one); the goal cannot be crafted",
    "minecraft:golden_carrot": "depth 1 here, not 2: gold_ingot_from_nuggets.json sorts before gold_nugget.json, so "
                               "gold nuggets are a base item (ADaPT crafted them from ingots); playable, but easier",
}


class AdaptGoal(NamedTuple):
    """One seed ADaPT evaluated: its goal item id, the goal as ADaPT's observation wrote it, ADaPT's reward."""

    seed: int
    goal: str
    problem: str
    reward: int


def _goal_id(problem: str) -> str:
    text = problem.strip()
    if not (text.startswith("craft ") and text.endswith(".")):
        raise ValueError(f"ADaPT problem {problem!r} is not of the form 'craft <item>.'")
    return "minecraft:" + text[len("craft "):-1].replace(" ", "_")


def build_from_results(results: dict) -> dict:
    """The data file's content from ADaPT's results JSON (``env_<seed>`` entries and ``overall``)."""
    seeds = sorted(int(k[len("env_"):]) for k in results if k.startswith("env_"))
    if seeds != list(range(len(seeds))):
        raise ValueError(f"ADaPT results: expected env_0..env_{len(seeds) - 1}, got seeds {seeds[:5]}...")
    goals = []
    for s in seeds:
        entry = results[f"env_{s}"]
        goals.append({"seed": s, "goal": _goal_id(entry["problem"]), "problem": entry["problem"].strip(),
                      "reward": int(entry["reward"])})
    return {"source": SOURCE, "overall_rate": results.get("overall", {}).get("rate"), "goals": goals}


@lru_cache(maxsize=1)
def adapt_goals() -> tuple[AdaptGoal, ...]:
    """ADaPT's 200 evaluated goals in seed order (seed k at position k)."""
    if not DATA_FILE.is_file():
        raise FileNotFoundError(f"{DATA_FILE} is missing (it is committed; rebuild it with python -m "
                                "envs.textcraft_adapt <ADaPT results json>)")
    data = json.loads(DATA_FILE.read_text())
    return tuple(AdaptGoal(int(g["seed"]), g["goal"], g["problem"], int(g["reward"])) for g in data["goals"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.textcraft_adapt", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help=f"ADaPT's {SOURCE['path']} (from {SOURCE['repo']})")
    ap.add_argument("--out", default=str(DATA_FILE))
    args = ap.parse_args(argv)
    data = build_from_results(json.loads(Path(args.results).read_text()))
    lines = ",\n".join("  " + json.dumps(g) for g in data["goals"])
    head = json.dumps({k: v for k, v in data.items() if k != "goals"})[:-1]
    Path(args.out).write_text(f'{head}, "goals": [\n{lines}\n]}}\n')
    won = sum(g["reward"] for g in data["goals"])
    print(f"wrote {args.out}: {len(data['goals'])} goals, ADaPT won {won} ({data['overall_rate']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
