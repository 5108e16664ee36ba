"""Score of the WebShop oracle expert and of the first-result baseline on a catalogue.

    python -m experiments.eval_webshop_expert                      # generated 1,000 products, test split
    python -m experiments.eval_webshop_expert --split train --tasks 500
    python -m experiments.eval_webshop_expert --goals human
    python -m experiments.eval_webshop_expert --search-fields bullets_attributes --out expert_old_search.md
    WEBSHOP_DATA=/path/to/official python -m experiments.eval_webshop_expert

Prints a table per goal set (synthetic and human goals by default: mean score, success = score 1.0, mean steps;
success per task family; how often the goal product is on the first results page of the expert's first search)
and writes them to ``results/webshop/expert.md``. Results on the generated catalogue are not comparable to
published WebShop numbers (template text; its "human" instructions are template-made too).
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from envs.paths import portable_text
from envs.webshop import WebShopEnv
from envs.webshop.config import SEARCH_FIELD_SETS
from envs.webshop.policies import expert_policy, first_result_policy, run_episode

OUT = Path(__file__).resolve().parents[1] / "results" / "webshop" / "expert.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-products", type=int, default=1000, help="generated catalogue size (no WEBSHOP_DATA)")
    ap.add_argument("--seed", type=int, default=0, help="generated catalogue seed")
    ap.add_argument("--split", default="test", choices=("test", "train"))
    ap.add_argument("--tasks", type=int, default=None, help="evaluate this many tasks (seeded sample); default all")
    ap.add_argument("--goals", nargs="+", default=["synthetic", "human"], choices=("synthetic", "human"),
                    help="goal sets to evaluate, one table each (default both)")
    ap.add_argument("--search-fields", default="original", choices=sorted(SEARCH_FIELD_SETS),
                    help="the product text searched (WebShopConfig.search_fields; default: the original's document)")
    ap.add_argument("--noun-extractor", default="auto", choices=("auto", "spacy", "heuristic"))
    ap.add_argument("--out", type=Path, default=OUT, help=f"markdown output (default {OUT})")
    if argv is None:
        import sys

        argv = sys.argv[1:]
    args = ap.parse_args(argv)

    lines = ["# WebShop reference policies", "",
             "Command: `" + " ".join(["python -m experiments.eval_webshop_expert", *(argv or [])]) + "`",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}.",
             "Not comparable to published WebShop numbers: the generated catalogue is template text."]
    for goals in args.goals:
        lines += ["", f"## {goals.capitalize()} goals", ""] + _evaluate(args, goals)
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}")
    return 0


def _evaluate(args, goals: str) -> list[str]:
    env = WebShopEnv(generated_num_products=args.num_products, generated_seed=args.seed, goals=goals,
                     search_fields=args.search_fields, reward={"noun_extractor": args.noun_extractor})
    n = env.num_tasks(args.split)
    tasks = list(range(n))
    if args.tasks is not None and args.tasks < n:
        tasks = sorted(random.Random(0).sample(tasks, args.tasks))
    rows, families = [], {}
    for name, policy in (("oracle expert", expert_policy), ("first result + right options", first_result_policy)):
        t0 = time.perf_counter()
        eps = [run_episode(env, policy, args.split, k) for k in tasks]
        dt = time.perf_counter() - t0
        scores = np.array([e["score"] for e in eps])
        rows.append((name, scores.mean(), np.mean([e["won"] for e in eps]), np.mean([e["steps"] for e in eps]),
                     sum(e["steps"] for e in eps) / dt, int(np.sum(scores < 1.0))))
        fam = defaultdict(list)
        for e in eps:
            fam[e["family"]].append(e["won"])
        families[name] = {k: (np.mean(v), len(v)) for k, v in sorted(fam.items())}
    on_page_1 = sum(env.goal_on_first_results_page(args.split, k) for k in tasks)
    lines = [
        f"Catalogue: {portable_text(str(env.catalogue.source))} ({len(env.catalogue.products)} products, "
        f"{env.catalogue.num_goals} {goals} goals); split `{args.split}`, {len(tasks)} tasks; noun extractor "
        f"`{env.nouns.planned_backend()}`; reward mode `{env.config.reward.mode}`; horizon {env.max_steps}; "
        f"search fields `{args.search_fields}` ({', '.join(env.config.search_fields)}).",
        "",
        f"Goal product on the first results page of the expert's first search: {on_page_1} of {len(tasks)}.",
        "",
        "| policy | mean score | success (score = 1.0) | tasks below 1.0 | mean steps | env steps/s |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[5]} | {r[3]:.2f} | {r[4]:.0f} |" for r in rows]
    lines += ["", "Success per task family (product category):", "",
              "| policy | " + " | ".join(families[rows[0][0]]) + " |",
              "|---|" + "---|" * len(families[rows[0][0]])]
    for name, fam in families.items():
        lines.append(f"| {name} | " + " | ".join(f"{s:.3f} (n={c})" for s, c in fam.values()) + " |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
