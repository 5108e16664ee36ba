"""Benchmark: seconds per RL iteration (and per phase) of each estimator in a study's configuration, and from them
the wall-clock time of the whole study on this machine.

    python -m benchmarks.iteration_speed                           # demo preset, 4 estimators, 3 iterations
    python -m benchmarks.iteration_speed --init-from <warm start>  # the same from a warm-started model
    python -m benchmarks.iteration_speed --study cpu --iterations 2 --jobs 1

It runs the study itself (``python -m experiments.study <study> --out <tmp>``) shrunk to ``--iterations``
iterations with one evaluation at the end, the same runs side by side as the study runs them (``--jobs``, one
core each), then reads every run's ``metrics.jsonl`` (``perf/time_<phase>``, ``perf/time_iteration``,
``perf/time_eval``) and the sweep's per-run wall-clock and CPU seconds. Without ``--init-from`` the model is the
preset's architecture with random weights (``--no-warmstart``): it never finishes an episode and writes the full
``rollout.max_response_tokens`` every step, so its rollouts are an upper bound on a warm start's, which stops at
its end-of-turn token and finishes the episodes it solves.

The estimate of the full study: per run, startup + iterations x (mean s/iteration) + evaluations x (s/evaluation,
scaled by the evaluation task count), runs spread over ``jobs`` lanes. The table states the machine and its
load (other users share the cores: a loaded machine inflates every number); ratios are against ``grpo`` measured
in the same call. The table is written to ``results/benchmarks/iteration.md`` (``--no-write`` to skip).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "benchmarks"
PHASES = ("rollout", "logprobs", "advantages", "update", "sync")


def _metrics(run_dir: Path) -> list[dict]:
    p = run_dir / "metrics.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def _phase_keys(rows: list[dict]) -> list[str]:
    keys = sorted({k for r in rows for k in r if k.startswith("perf/time_")} - {"perf/time_iteration",
                                                                                "perf/time_eval"})
    return keys


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _num(x, digits: int = 1) -> str:
    return "–" if x is None or x != x else f"{x:.{digits}f}"


def _shown_args(argv: list[str]) -> str:
    """The command's arguments for the table header, the --note text shortened (it is printed below anyway)."""
    out, skip = [], False
    for a in argv:
        if skip:
            out.append("'…'")
            skip = False
        elif a == "--note":
            out.append(a)
            skip = True
        elif a.startswith("--note="):
            out.append("--note='…'")
        else:
            out.append(a)
    return " ".join(out)


def summarise(runs_root: Path, timings: dict[str, dict]) -> dict[str, dict]:
    """Per method: mean seconds per iteration and per phase (iterations >= 1), seconds per evaluation, response
    tokens per step, run wall/CPU seconds and start-up seconds (wall minus iterations minus evaluations)."""
    out = {}
    for mfile in sorted(runs_root.rglob("metrics.jsonl")):
        run_dir = mfile.parent
        rows = _metrics(run_dir)
        it_rows = [r for r in rows if r.get("iteration", 0) >= 1 and "perf/time_iteration" in r]
        if not it_rows:
            continue
        method = run_dir.parent.name
        evals = [r["perf/time_eval"] for r in rows if "perf/time_eval" in r]
        t = next((v for k, v in timings.items() if k.split("/")[-2:-1] == [method]), {})
        iters = [r["perf/time_iteration"] for r in it_rows]
        rec = {
            "iterations": len(iters),
            "s_per_iteration": _mean(iters),
            "phases": {k.removeprefix("perf/time_"): _mean([r.get(k, 0.0) for r in it_rows])
                       for k in _phase_keys(it_rows)},
            "evals": len(evals),
            "s_per_eval": _mean(evals),
            "response_tokens": _mean([r.get("rollout/response_tokens_mean", float("nan")) for r in it_rows]),
            "rows": _mean([r.get("rollout/num_rows", float("nan")) for r in it_rows]),
            "wall_s": t.get("wall_s"), "cpu_s": t.get("cpu_s"),
        }
        if rec["wall_s"] is not None and t.get("last_exit", 0) == 0 and t.get("attempts", 1) == 1:
            rec["startup_s"] = max(0.0, rec["wall_s"] - sum(iters) - sum(evals))
        else:  # stopped or resumed: its wall time holds unlogged work; the estimate uses the others' start-up
            rec["startup_s"] = None
        out[method] = rec
    return out


def estimate_minutes(summary: dict[str, dict], iterations: int, evals: int, eval_scale: float, jobs: int,
                     seeds: int = 1, idle: bool = False) -> float:
    """Wall-clock minutes of a study of these methods x ``seeds`` with ``iterations`` iterations and ``evals``
    evaluations per run (each ``eval_scale`` times the measured evaluation's task count), ``jobs`` at a time.

    ``idle``: scale each run by its measured CPU seconds / wall seconds, i.e. the time of a run that has its one
    core to itself (runs use one thread each in a study; an approximation: memory and cache sharing remain)."""
    per_run = []
    startups = [r["startup_s"] for r in summary.values() if r.get("startup_s") is not None]
    eval_times = [r["s_per_eval"] for r in summary.values() if r["evals"]]
    for rec in summary.values():
        s = rec["startup_s"] if rec.get("startup_s") is not None else (_mean(startups) if startups else 0.0)
        s_eval = rec["s_per_eval"] if rec["evals"] else (_mean(eval_times) if eval_times else 0.0)
        s += iterations * rec["s_per_iteration"] + evals * eval_scale * s_eval
        if idle and rec.get("wall_s") and rec.get("cpu_s"):
            s *= min(1.0, rec["cpu_s"] / rec["wall_s"])
        per_run += [s] * seeds
    per_run.sort(reverse=True)
    lanes = [0.0] * max(1, jobs)
    for s in per_run:  # longest first onto the least-loaded lane: what a queue of `jobs` workers does
        lanes[lanes.index(min(lanes))] += s
    return max(lanes) / 60


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.iteration_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="demo", help="the study whose preset and estimators are timed (default demo)")
    ap.add_argument("--estimators", default="grpo,gigpo,bipace_v,bipace_q")
    ap.add_argument("--iterations", type=int, default=3, help="iterations per timed run (default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side, as the study runs them (default 2)")
    ap.add_argument("--init-from", default=None, help="a warm-started model folder (default: random weights)")
    ap.add_argument("--out", default=None, help="keep the timed runs here (default: a temporary folder)")
    ap.add_argument("--no-write", action="store_true", help="do not write results/benchmarks/iteration.md")
    ap.add_argument("--note", default="",
                    help="a sentence written under the table's header (e.g. how the runs were made)")
    ap.add_argument("--summarise-only", action="store_true",
                    help="run nothing: tabulate the iterations already logged under --out (e.g. after a stopped call)")
    args = ap.parse_args(argv)

    from lab.study import STUDIES
    from trainer.config import load_config

    study = STUDIES[args.study]
    cfg = load_config(ROOT / study.preset)
    tmp = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_iteration_"))
    init = ["--init-from", args.init_from] if args.init_from else ["--no-warmstart"]
    cmd = [sys.executable, "-m", "experiments.study", args.study, "--out", str(tmp), "--no-report",
           "--estimators", args.estimators, "--seeds", "0", "--jobs", str(args.jobs), *init,
           f"trainer.iterations={args.iterations}", "eval.at_start=false", f"eval.every={args.iterations}",
           f"trainer.save_every={args.iterations}", "logging.tensorboard=false"]
    load0 = os.getloadavg()
    t0 = time.time()
    if args.summarise_only:
        if not args.out:
            ap.error("--summarise-only needs --out (the folder of an earlier call)")
        rc = 0
    else:
        print("[bench] " + " ".join(["python", *cmd[1:]]), flush=True)
        rc = subprocess.run(cmd, cwd=ROOT).returncode
    wall = time.time() - t0
    load1 = os.getloadavg()
    if rc != 0:
        print(f"[bench] the timed study failed (exit {rc}); its runs are in {tmp}", file=sys.stderr)
        return rc
    rec_path = tmp / "bench_call.json"
    if rec_path.exists():  # the runs were timed by an earlier call into the same --out: report that call's figures
        first = json.loads(rec_path.read_text())
        load0, load1, wall = first["load_before"], first["load_after"], first["wall_s"]
    elif args.summarise_only:
        print("[bench] no record of the timing call under --out: the load and total wall time are today's, not the "
              "runs'", file=sys.stderr)
    else:
        rec_path.write_text(json.dumps({"load_before": load0, "load_after": load1, "wall_s": wall}) + "\n")
    from lab.study import _load_timings

    summary = summarise(tmp / "runs", _load_timings(tmp / "runs"))
    if not summary:
        print(f"[bench] no timed iterations found under {tmp / 'runs'}", file=sys.stderr)
        return 1
    phases = sorted({p for r in summary.values() for p in r["phases"]})
    run_loads = []  # each timed attempt's load average at its start and end (sweep.jsonl)
    sj = tmp / "runs" / "sweep.jsonl"
    for line in (sj.read_text().splitlines() if sj.exists() else []):
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            continue
        run_loads += [x for x in (t.get("load_avg_start"), t.get("load_avg_end")) if isinstance(x, (int, float))]
    load_txt = (f"load average (1 min) at the timed runs' starts and ends {min(run_loads):.1f}-{max(run_loads):.1f}"
                if run_loads else f"load average (1/5/15 min) before {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, "
                                  f"after {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}")
    base = summary.get("grpo", {}).get("s_per_iteration")

    est = {}
    for name in ("demo", "cpu"):
        s = STUDIES[name]
        c = load_config(ROOT / s.preset)
        n_ev = (1 if c.eval.at_start else 0) + (math.ceil(c.trainer.iterations / c.eval.every) if c.eval.every else 0)
        scale = (c.eval.max_tasks_per_split or 1) / (cfg.eval.max_tasks_per_split or 1)
        sub = {m: r for m, r in summary.items() if m in s.estimators}
        est[name] = (c.trainer.iterations, n_ev, len(s.seeds),
                     estimate_minutes(sub, c.trainer.iterations, n_ev, scale, s.jobs, len(s.seeds)),
                     estimate_minutes(sub, c.trainer.iterations, n_ev, scale, s.jobs, len(s.seeds), idle=True))

    init_txt = f"warm start `{args.init_from}`" if args.init_from else "random weights (preset architecture)"
    lines = [
        f"# Seconds per RL iteration per estimator ({args.study} preset `{study.preset}`)",
        "",
        f"Command: `python -m benchmarks.iteration_speed {_shown_args(argv if argv is not None else sys.argv[1:])}`"
        f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({platform.processor() or 'cpu'}), Python "
        f"{platform.python_version()}; {load_txt} (shared machine: a load above the core count means "
        "other processes took part of the cores, and every time below is inflated by it).",
        f"Set-up: model {init_txt}, P={cfg.env.groups} groups x G={cfg.env.group_size}, horizon "
        f"{cfg.env.max_steps}, responses up to {cfg.rollout.max_response_tokens} tokens; "
        + (f"{args.iterations} iterations per run, {args.jobs} runs side by side (one core each, as the study runs "
           f"them), one evaluation of {cfg.eval.max_tasks_per_split} tasks per split at the end; "
           f"{wall / 60:.1f} min in all." if not args.summarise_only else
           f"the iterations logged under `{tmp}` (tabulated with --summarise-only: the runs' own figures)."),
        "",
        *([args.note, ""] if args.note else []),
        "| method | s / iteration | × grpo | CPU s / iteration | " + " | ".join(f"{p} s" for p in phases)
        + " | step rows | response tokens | s / evaluation | run wall s | run CPU s | start-up s |",
        "|---|---|---|---|" + "---|" * len(phases) + "---|---|---|---|---|---|",
    ]
    for m, r in summary.items():
        ratio = f"{r['s_per_iteration'] / base:.2f}" if base else "–"
        busy = r.get("cpu_s") and r.get("wall_s")
        cpu_it = (r["s_per_iteration"] * min(1.0, r["cpu_s"] / r["wall_s"])) if busy else None
        lines.append(f"| {m} | {r['s_per_iteration']:.1f} | {ratio} | {_num(cpu_it, 0)} | "
                     + " | ".join(f"{r['phases'].get(p, float('nan')):.1f}" for p in phases)
                     + f" | {r['rows']:.0f} | {r['response_tokens']:.0f} | {_num(r['s_per_eval'])} | {r['wall_s']} | "
                     f"{r['cpu_s']} | "
                     f"{_num(r['startup_s'], 0)} |")
    lines += ["", "Estimated wall-clock of the full studies on this machine at this load (start-up + iterations x "
              "s/iteration + evaluations x s/evaluation scaled by task count, runs queued over the study's lanes):", "",
              "| study | iterations per run | evaluations per run | seeds | minutes at the measured load | "
              "minutes with a core per run (CPU-time scaled) |", "|---|---|---|---|---|---|"]
    for name, (its, nev, nseeds, mins, idle) in est.items():
        lines.append(f"| {name} | {its} | {nev} | {nseeds} | {mins:.0f} | {idle:.0f} |")
    if not args.init_from:
        lines += ["", "Random weights write every response to the token cap and never finish an episode early, so the "
                  "rollout column is an upper bound for a warm-started model of the same size."]
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "iteration.md").write_text(table)
        (RESULTS / "iteration.json").write_text(json.dumps({"summary": summary, "estimates": est,
                                                            "run_loads": run_loads,
                                                            "load_before": load0, "load_after": load1,
                                                            "wall_s": wall}, indent=1) + "\n")
        print(f"[bench] wrote {RESULTS / 'iteration.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
