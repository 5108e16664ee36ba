"""How many WebShop purchase scores each correction of the original's reward changes, on a catalogue's triples.

    python -m experiments.webshop_reward_modes                     # generated 1,000 products
    python -m experiments.webshop_reward_modes --goals 300 --out -  # smaller, print only
    WEBSHOP_DATA=/path/to/official python -m experiments.webshop_reward_modes

Triples (goal, product, chosen options) per sampled goal: its own product with the goal's options, its own product
with a seeded random combination of options, and a product of the same query with a random combination (synthetic
goals), the same for a sample of human goals. Each is scored with ``reward.mode=original`` (the public code's rules),
with each correction of ``envs.webshop.config.CORRECTIONS`` switched on alone, and with ``reward.mode=corrected``
(all of them), and with all of them but one. The table counts the triples whose score changes. The corrections
interact (comparing values with values without exact sizes lets "x-small" satisfy "small"), so the rows of one
correction alone do not add up to the corrected mode's. A second table does the same on the official-format records
of the committed human-goal reference sample (``--records``; hand-made records with title case, accents, two spaces
and "/" in option values, besides products of the generated catalogue), all of whose goals it samples. Writes
``results/webshop/reward_modes.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from envs.paths import portable_text
from envs.webshop import RewardConfig, WebShopConfig, load_catalogue
from envs.webshop.config import CORRECTIONS
from envs.webshop.data import iter_combinations
from envs.webshop.reward import score_purchase
from envs.webshop.text import NounExtractor

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "webshop" / "reward_modes.md"
RECORDS = ROOT / "tests" / "envs" / "data" / "webshop_original_human_scores.json"


def write_records(sample: Path, folder: Path) -> Path:
    """The official-format records of a reference sample file (``records``), written as official files."""
    data = json.loads(Path(sample).read_text(encoding="utf-8"))
    for name, key in (("items_shuffle_1000.json", "items_shuffle"), ("items_ins_v2_1000.json", "items_ins_v2"),
                      ("items_human_ins.json", "items_human_ins")):
        (folder / name).write_text(json.dumps(data["records"][key], ensure_ascii=False), encoding="utf-8")
    return folder


def triples(cat, num_goals: int, rng: random.Random):
    """(goal, product index, chosen options) triples of ``num_goals`` sampled goals (see module docstring)."""
    by_query: dict[str, list[int]] = {}
    for i, p in enumerate(cat.products):
        by_query.setdefault(p.query, []).append(i)
    picks = rng.sample(range(cat.num_goals), min(num_goals, cat.num_goals))
    for gi in picks:
        g = cat.goal(gi)
        own = cat.products[g.product_index]
        wanted = {n: v for n, v in g.goal_options if n is not None}
        yield g, g.product_index, {k: v for k, v in wanted.items() if v in own.options.get(k, ())}
        combos = list(iter_combinations(own))
        if combos:
            yield g, g.product_index, rng.choice(combos)
        others = [i for i in by_query.get(g.query, []) if i != g.product_index]
        if others:
            j = rng.choice(others)
            combos = list(iter_combinations(cat.products[j]))
            yield g, j, (rng.choice(combos) if combos else {})


def count_changes(cat, items, nouns, timing: dict | None = None) -> tuple[list[tuple[str, int]], int]:
    """[(configuration, triples whose score differs from the original's)], and the number of triples; ``timing``
    (if given) accumulates the seconds spent scoring in the original and in the corrected mode."""
    base = RewardConfig(mode="original", noun_extractor=nouns.mode)
    configs = [(f"`{c}` alone", dataclasses.replace(base, **{c: "missing_group" if c == "option_text_fallback"
                                                          else True})) for c in CORRECTIONS]
    corrected = RewardConfig(mode="corrected", noun_extractor=nouns.mode)
    configs.append(("`mode: corrected` (all)", corrected))
    configs += [(f"all but `{c}`", dataclasses.replace(corrected, **{c: "never" if c == "option_text_fallback"
                                                                     else False})) for c in CORRECTIONS]
    counts = [0] * len(configs)
    timing = timing if timing is not None else {}
    all_k = len(CORRECTIONS)
    for g, i, chosen in items:
        p, price = cat.products[i], float(cat.prices[i])
        t = time.perf_counter()
        ref = score_purchase(p, g, price, chosen, base, nouns).score
        timing["original"] = timing.get("original", 0.0) + time.perf_counter() - t
        for k, (_, cfg) in enumerate(configs):
            t = time.perf_counter()
            changed = abs(score_purchase(p, g, price, chosen, cfg, nouns).score - ref) > 1e-9
            if k == all_k:
                timing["corrected"] = timing.get("corrected", 0.0) + time.perf_counter() - t
            counts[k] += changed
    return [(name, n) for (name, _), n in zip(configs, counts)], len(items)


def _table(data_dir, args, nouns, timing: dict, num_goals: int) -> tuple[list[str], int, str, str]:
    """The table's rows for one catalogue (synthetic goals: ``num_goals``; human goals: a quarter)."""
    rows, sources, total = {}, [], 0
    for goals, n in (("synthetic", num_goals), ("human", max(1, num_goals // 4))):
        cfg = WebShopConfig(data_dir=data_dir, generated_num_products=args.num_products,
                            generated_seed=args.seed, goals=goals, share_catalogue=False)
        cat = load_catalogue(cfg)
        nouns.use_table(cat.noun_table(nouns))
        items = list(triples(cat, n, random.Random(args.seed)))
        counts, m = count_changes(cat, items, nouns, timing)
        total += m
        sources.append(f"{m} triples of {min(n, cat.num_goals)} {goals} goals")
        for name, c in counts:
            rows.setdefault(name, []).append(c)
    lines = ["| configuration | synthetic | human | all | share |", "|---|---|---|---|---|"]
    for name, (syn, hum) in rows.items():
        lines.append(f"| {name} | {syn} | {hum} | {syn + hum} | {100 * (syn + hum) / max(total, 1):.1f}% |")
    return lines, total, portable_text(str(cat.source)), ", ".join(sources)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.webshop_reward_modes",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-products", type=int, default=1000, help="generated catalogue size (no WEBSHOP_DATA)")
    ap.add_argument("--seed", type=int, default=0, help="generated catalogue seed; also seeds the triples")
    ap.add_argument("--goals", type=int, default=2000, help="synthetic goals sampled (human goals: a quarter)")
    ap.add_argument("--data-dir", default=None, help="a catalogue folder (default: $WEBSHOP_DATA or the generated one)")
    ap.add_argument("--records", default=str(RECORDS),
                    help="a reference sample file whose official-format records get a second table, or none")
    ap.add_argument("--noun-extractor", default="auto", choices=("auto", "spacy", "heuristic"))
    ap.add_argument("--out", default=str(OUT), help=f"markdown output, or - to print only (default {OUT})")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    nouns = NounExtractor(args.noun_extractor)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# WebShop reward: what each correction of the original changes",
        "",
        f"Command: `python -m experiments.webshop_reward_modes{' ' + command if command else ''}`",
    ]
    timing: dict = {}
    total = 0
    body, n, source, sampled = _table(args.data_dir, args, nouns, timing, args.goals)
    total += n
    lines += [f"Catalogue: {source}; {sampled}; noun extractor `{nouns.backend}`."]
    body_records = []
    if args.records != "none":
        with tempfile.TemporaryDirectory() as tmp:
            folder = write_records(Path(args.records), Path(tmp))
            body_records, n, _, sampled = _table(str(folder), args, nouns, timing, 10 ** 6)
        total += n
        records = Path(args.records).resolve()
        records = records.relative_to(ROOT) if records.is_relative_to(ROOT) else portable_text(str(records))
        lines += [f"Official-format records: those of `{records}`; {sampled}."]
    lines += [f"Machine: {platform.machine()}, Python {platform.python_version()}; {time.perf_counter() - t0:.0f} s.",
              "",
              "Triples whose score differs from `reward.mode: original` (the public code's rules, the default), on the "
              "catalogue:", ""] + body
    if body_records:
        lines += ["", "## Official-format records", "", "The same on the official-format records:", ""] + body_records
    lines += ["", f"Time per score (the noun table read, not tagged): original {1e6 * timing['original'] / total:.0f} "
              "µs, "
                  f"corrected {1e6 * timing['corrected'] / total:.0f} µs (thefuzz 0.19 is pure Python over difflib)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out != "-":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
