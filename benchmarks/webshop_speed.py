"""WebShop environment speed and memory.

    python -m benchmarks.webshop_speed            # 1,000- and 10,000-product generated catalogues
    python -m benchmarks.webshop_speed --quick    # fewer steps (a smoke run)

Measures, each in a fresh Python process so that memory numbers are clean:

* steps/s of ``search[...]`` steps and of ``click[...]`` steps, timed separately (one environment);
* resident memory of a process holding one environment, before and after a purchase (the type reward reads
  title nouns from a table computed once per machine with spaCy, so these processes never import spaCy);
* resident memory of one process holding 16 environments (the pool's group size on one worker), with the
  catalogue and index shared (default) and, as the comparison, loaded once per environment; the 16 shared
  environments must stay under 2 GiB.

Prints a table and writes it to ``results/benchmarks/webshop.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "webshop.md"
GIB = 1024 ** 3


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _speed(num_products: int, steps: int) -> dict:
    from envs.webshop import WebShopEnv
    from envs.webshop.generate import ensure_generated

    ensure_generated(num_products, 0)
    rss0 = _rss()
    t0 = time.perf_counter()
    env = WebShopEnv(generated_num_products=num_products, max_steps=10 ** 9, num_test_goals=500)
    load_s = time.perf_counter() - t0
    rss_env = _rss()
    queries = [env.catalogue.goal(g).base_instruction for g in range(env.catalogue.num_goals)][: max(steps, 1)]
    env.reset(options={"split": "train", "task_index": 0})
    search_t, n_search, click_t, n_click = 0.0, 0, 0.0, 0

    def click(a):
        nonlocal click_t, n_click
        t = time.perf_counter()
        out = env.step(a)
        click_t += time.perf_counter() - t
        n_click += 1
        assert not out[4]["noop"], a
        return out

    qi = 0
    while n_search < steps or n_click < steps:
        q = queries[qi % len(queries)]
        qi += 1
        t = time.perf_counter()
        _, _, _, _, info = env.step(f"search[{q}]")
        search_t += time.perf_counter() - t
        n_search += 1
        items = [a for a in info["admissible_actions"] if env._clickables()[a[6:-1]][0] == "item"][:3]
        for a in items:
            info = click(a)[4]
            opts = [x for x in info["admissible_actions"] if env._clickables()[x[6:-1]][0] == "option"]
            if opts:
                click(opts[0])
            click("click[features]")
            click("click[< prev]")
            click("click[< prev]")
        click("click[next >]")
        click("click[back to search]")
    rss_steps = _rss()
    t = time.perf_counter()
    env.reset(options={"split": "test", "task_index": 0})
    while True:  # one expert episode ends with a purchase (loads spaCy)
        _, _, term, trunc, _ = env.step(env.expert_action())
        if term or trunc:
            break
    buy_s = time.perf_counter() - t
    return {"num_products": num_products, "goals": env.catalogue.num_goals, "load_s": load_s,
            "search_steps_s": n_search / search_t, "click_steps_s": n_click / click_t,
            "n_search": n_search, "n_click": n_click, "rss_python": rss0, "rss_env": rss_env,
            "rss_after_steps": rss_steps, "rss_after_buy": _rss(), "first_buy_s": buy_s,
            "nouns": env.nouns.planned_backend(), "spacy_imported": "spacy" in sys.modules}


def _many(num_products: int, n_envs: int, share: bool, episodes: int) -> dict:
    from envs.webshop import WebShopEnv
    from envs.webshop.generate import ensure_generated

    ensure_generated(num_products, 0)
    rss0 = _rss()
    t0 = time.perf_counter()
    envs = [WebShopEnv(generated_num_products=num_products, share_catalogue=share) for _ in range(n_envs)]
    load_s = time.perf_counter() - t0
    rss_loaded = _rss()
    steps = 0
    t0 = time.perf_counter()
    for e in range(episodes):
        for i, env in enumerate(envs):
            env.reset(options={"split": "train", "task_index": e * n_envs + i})
        live = list(envs)
        while live:  # step the group in lock-step, as the rollout does
            nxt = []
            for env in live:
                _, _, term, trunc, _ = env.step(env.expert_action())
                steps += 1
                if not (term or trunc):
                    nxt.append(env)
            live = nxt
    play_s = time.perf_counter() - t0
    return {"num_products": num_products, "n_envs": n_envs, "share": share, "load_s": load_s,
            "spacy_imported": "spacy" in sys.modules,
            "rss_python": rss0, "rss_loaded": rss_loaded, "rss_after": _rss(), "expert_steps_s": steps / play_s}


def _prepare(num_products: int) -> dict:
    """Make sure the catalogue and its title-noun table are cached, and time both from scratch."""
    import tempfile

    from envs.webshop import WebShopConfig, load_catalogue
    from envs.webshop.generate import ensure_generated, write_catalogue
    from envs.webshop.text import NounExtractor

    ensure_generated(num_products, 0)
    cat = load_catalogue(WebShopConfig(generated_num_products=num_products))
    cat.noun_table(NounExtractor("auto"))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_catalogue(tmp, num_products, 0, progress=False)
        gen_s = time.perf_counter() - t0
    titles = sorted({p.title for p in cat.products})
    extractor = NounExtractor("auto")
    t0 = time.perf_counter()
    extractor.nouns_many(titles)  # includes loading the pipeline, as the first process on a machine does
    return {"generate_s": gen_s, "noun_table_s": time.perf_counter() - t0}


def _worker(spec: dict) -> dict:
    if spec["kind"] == "prepare":
        return _prepare(spec["num_products"])
    if spec["kind"] == "speed":
        return _speed(spec["num_products"], spec["steps"])
    return _many(spec["num_products"], spec["n_envs"], spec["share"], spec["episodes"])


def _run(spec: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.webshop_speed", "--worker", json.dumps(spec)],
                         capture_output=True, text=True, timeout=1800, env=os.environ.copy())
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _machine() -> str:
    from common.machine import cpu_name

    cpu = cpu_name()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f", {int(f.readline().split()[1]) / 1024 ** 2:.0f} GiB RAM"
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}, Python {platform.python_version()}, {platform.system()}"


def _mib(x: float) -> str:
    return f"{x / 1024 ** 2:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and episodes (smoke run)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="catalogue sizes")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--worker", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0

    steps = 200 if args.quick else 2000
    episodes = 1 if args.quick else 3
    prep = [_run({"kind": "prepare", "num_products": n}) for n in args.sizes]
    speed = [_run({"kind": "speed", "num_products": n, "steps": steps}) for n in args.sizes]
    many = []
    for n in args.sizes:
        many.append(_run({"kind": "many", "num_products": n, "n_envs": 16, "share": True, "episodes": episodes}))
    unshared = _run({"kind": "many", "num_products": args.sizes[0], "n_envs": 16, "share": False, "episodes": 1})

    base = speed[0]
    lines = [
        "# WebShop environment benchmark",
        "",
        f"Command: `python -m benchmarks.webshop_speed{' --quick' if args.quick else ''}`",
        f"Machine: {_machine()}.",
        f"Generated catalogues (seed 0), default config (BM25 over title, bullets, description, attributes; "
        f"noun extractor `{base['nouns']}`). Each row is a fresh process; steps timed one at a time.",
        "",
        "## Speed (one environment)",
        "",
        "| products | goals | load + index (s) | search steps/s | click steps/s | search vs 1k | click vs 1k |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in speed:
        lines.append(f"| {s['num_products']:,} | {s['goals']:,} | {s['load_s']:.2f} | {s['search_steps_s']:,.0f} | "
                     f"{s['click_steps_s']:,.0f} | {s['search_steps_s'] / base['search_steps_s']:.2f}x | "
                     f"{s['click_steps_s'] / base['click_steps_s']:.2f}x |")
    lines += [
        "",
        f"({speed[0]['n_search']} search and {speed[0]['n_click']} click steps per row.) One-time costs per machine, "
        "then cached on disk: " + "; ".join(
            f"{n:,} products: generation {p['generate_s']:.1f} s, title-noun table {p['noun_table_s']:.1f} s "
            "(spaCy start included)"
            for n, p in zip(args.sizes, prep)) + " (the table needs spaCy once; later processes read it and "
        "never import spaCy or torch).",
        "",
        "## Memory of one environment process (resident set)",
        "",
        "| products | bare Python + imports | with 1 env | after the speed run | after a purchase | spaCy imported |",
        "|---|---|---|---|---|---|",
    ]
    for s in speed:
        lines.append(f"| {s['num_products']:,} | {_mib(s['rss_python'])} | {_mib(s['rss_env'])} | "
                     f"{_mib(s['rss_after_steps'])} | {_mib(s['rss_after_buy'])} | "
                     f"{'yes' if s['spacy_imported'] else 'no'} |")
    lines += [
        "",
        "## 16 environments in one process (expert episodes, purchases included)",
        "",
        "| products | catalogue + index | build (s) | resident after build | resident after episodes | "
        "expert steps/s | under 2 GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in [*many, unshared]:
        ok = "yes" if m["rss_after"] < 2 * GIB else "**no**"
        lines.append(f"| {m['num_products']:,} | {'shared' if m['share'] else 'one per env'} | {m['load_s']:.2f} | "
                     f"{_mib(m['rss_loaded'])} | {_mib(m['rss_after'])} | {m['expert_steps_s']:,.0f} | {ok} |")
    ratio = unshared["rss_loaded"] / many[0]["rss_loaded"]
    lines += ["", f"Sharing the catalogue and index: {ratio:.2f}x less resident memory after building 16 "
                  f"environments on {args.sizes[0]:,} products ({_mib(unshared['rss_loaded'])} vs "
                  f"{_mib(many[0]['rss_loaded'])})."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}")
    return 0 if all(m["rss_after"] < 2 * GIB for m in many) else 1


if __name__ == "__main__":
    raise SystemExit(main())
