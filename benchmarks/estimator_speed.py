"""Benchmark: milliseconds and peak memory per batch for every estimator, against plain loops.

    python -m benchmarks.estimator_speed              # paper-scale batches, writes results/benchmarks/estimators.md
    python -m benchmarks.estimator_speed --quick      # small batch, a smoke run
    python -m benchmarks.estimator_speed --estimators hgpo --hgpo-rules start_marker,verl_agent --out F.md

Paper-scale batch: 16 prompt groups x 8 trajectories x up to 50 steps, hidden sizes 3584 (Qwen2.5-7B)
and 1536 (Qwen2.5-1.5B). Two length profiles: ``typical`` (trajectory lengths uniform in [10, 50]) and
``worst`` (every trajectory runs all 50 steps: N = 6400 rows, 400 rows per prompt group). Each cell runs
in a fresh subprocess: peak memory = the rise of the process's peak resident set (VmHWM, reset just before)
over its resident set while the estimator runs once; time = median of repeated runs after a warm-up. The plain-loop
references (``estimators.reference``) run once in the same subprocess, and the table reports the speed-up ratio.
Estimator times exclude the batch diagnostics (``diagnostics=False``); the ``+diag`` column adds them.
Both wall time and the process's CPU time (all its threads) are reported: on a shared machine the CPU time
moves much less with other jobs' load, so the speed-up over the loop is the ratio of CPU times (conservative
for the vectorised estimators, whose CPU time counts every torch thread while the loop runs on one). On a
shared machine pass ``--threads 1``: with more torch threads than free cores, OpenMP's spin-waiting burns CPU
time (measured: 2 threads under a load of 12 read 10x the CPU time of 1 thread for the same work).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks"


def _cell(args: dict, queue) -> None:
    import torch

    from estimators import EstimatorConfig, compute_advantages
    from estimators.reference import reference_advantages
    from estimators.synthetic import synthetic_batch

    torch.set_num_threads(args["threads"])
    b = synthetic_batch(
        groups=16, group_size=8, max_steps=args["max_steps"], min_steps=args["min_steps"], hidden_size=args["hidden"],
        states_per_group=60, noise=args["noise"], obs_variants=3, seed=0, early_stop=args["profile"] == "typical",
        device=args["device"],
    )
    cfg = EstimatorConfig(name=args["name"], epsilon=args["epsilon"], cluster_backend=args["backend"],
                          **({"hgpo_rule": args["hgpo_rule"]} if args.get("hgpo_rule") else {}))
    base = _reset_peak_rss()
    if args["device"] == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    res = compute_advantages(b, cfg, diagnostics=False)
    if args["device"] == "cuda":
        torch.cuda.synchronize()
        peak_mb = (torch.cuda.max_memory_allocated() - before) / 2**20
    else:
        peak_mb = (_status_kib("VmHWM") - base) / 1024
    times, cpu_times = [], []
    for _ in range(args["repeats"]):
        t, c = time.perf_counter(), time.process_time()
        compute_advantages(b, cfg, diagnostics=False)
        if args["device"] == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
    t = time.perf_counter()
    diag = compute_advantages(b, cfg, diagnostics=True)
    t_diag = time.perf_counter() - t
    out = {
        "rows": len(b), "ms": 1000 * statistics.median(times), "cpu_ms": 1000 * statistics.median(cpu_times),
        "ms_diag": 1000 * t_diag, "peak_mb": peak_mb,
        "singleton_rate_cluster": diag.metrics.get("group/singleton_rate_cluster"),
        "singleton_rate_anchor": diag.metrics.get("group/singleton_rate_anchor"),
    }
    if args["reference"]:
        t, c = time.perf_counter(), time.process_time()
        adv, _, _ = reference_advantages(b.to("cpu"), cfg)
        out["ref_ms"] = 1000 * (time.perf_counter() - t)
        out["ref_cpu_ms"] = 1000 * (time.process_time() - c)
        out["max_abs_diff"] = float((res.advantages.cpu().double() - torch.tensor(adv)).abs().max())
    queue.put(out)


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> int:
    """Reset the process's peak resident set (VmHWM) to the current one and return it (KiB).

    Writing 5 to ``/proc/self/clear_refs`` (Linux >= 4.0) resets VmHWM, so the peak measured afterwards is the
    estimator's own, not the batch construction's (``ru_maxrss`` cannot be reset and hides it).
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS")


def run_cell(**kw) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_cell, args=(kw, q))
    p.start()
    out = q.get()
    p.join()
    return out


def machine() -> str:
    import torch

    from common.machine import cpu_name

    cpu = cpu_name()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, Python {platform.python_version()}, "
            f"load average {load:.2f} at start")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.estimator_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one small batch (hidden 256, up to 10 steps), no file written")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hidden", default="3584,1536", help="comma-separated hidden sizes")
    ap.add_argument("--profiles", default="typical,worst")
    ap.add_argument("--no-reference", action="store_true", help="skip the plain-loop references (slow at paper scale)")
    ap.add_argument("--out", default=str(RESULTS / "estimators.md"))
    ap.add_argument("--estimators", default=None, help="comma-separated estimators (default: all)")
    ap.add_argument("--hgpo-rules", default=None,
                    help="comma-separated estimator.hgpo_rule values, each timed as its own row (default: the "
                         "config's default)")
    args = ap.parse_args(argv)

    names = ["grpo", "rloo", "gigpo", "hgpo", "bigpo", "bipace_v", "bipace_q"]
    if args.estimators:
        unknown = sorted(set(args.estimators.split(",")) - set(names))
        if unknown:
            ap.error(f"--estimators: unknown {unknown}; choose from {names}")
        names = [n for n in names if n in args.estimators.split(",")]
    rules = args.hgpo_rules.split(",") if args.hgpo_rules else [None]
    cells = []
    hiddens = [256] if args.quick else [int(x) for x in args.hidden.split(",")]
    profiles = ["typical"] if args.quick else args.profiles.split(",")
    for hidden in hiddens:
        for profile in profiles:
            steps = (10, 10) if args.quick else ((10, 50) if profile == "typical" else (50, 50))
            for name in names:
                backends = ["torch", "faiss"] if name in ("bigpo", "bipace_q") else ["torch"]
                for backend, rule in [(b, r) for b in backends for r in (rules if name == "hgpo" else [None])]:
                    # the loop reference of the clustering estimators takes minutes at 3584: run it for bipace_q only
                    ref = not args.no_reference and (name not in ("bigpo", "bipace_v") and backend == "torch")
                    if args.device == "cuda" and backend == "faiss":
                        continue
                    kw = dict(name=name, backend=backend, hidden=hidden, profile=profile, min_steps=steps[0],
                              max_steps=steps[1], epsilon=0.10 if hidden >= 3000 else 0.05, noise=0.25,
                              repeats=3 if args.quick else args.repeats, threads=args.threads, device=args.device,
                              reference=ref, hgpo_rule=rule)
                    r = run_cell(**kw)
                    cells.append({**kw, **r})
                    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in cells[-1].items()}),
                          flush=True)

    head = ("| D | lengths | N | estimator | backend | ms / batch | CPU ms / batch | ms +diag | peak MB | loop ms | "
            "loop CPU ms | speed-up (CPU) | max abs diff | singletons (anchor / cluster) |")
    lines = [f"Machine: {machine()}.", "",
             "Command: `python -m benchmarks.estimator_speed"
             + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv)) + "`", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        ref = f"{c['ref_ms']:.0f}" if "ref_ms" in c else "–"
        ref_cpu = f"{c['ref_cpu_ms']:.0f}" if "ref_cpu_ms" in c else "–"
        ratio = f"{c['ref_cpu_ms'] / max(c['cpu_ms'], 1e-3):.1f}x" if "ref_cpu_ms" in c else "–"
        diff = f"{c['max_abs_diff']:.1e}" if "max_abs_diff" in c else "–"
        sc = c["singleton_rate_cluster"]
        label = c["name"] + (f" ({c['hgpo_rule']})" if c.get("hgpo_rule") else "")
        lines.append(
            f"| {c['hidden']} | {c['profile']} | {c['rows']} | {label} | {c['backend']} | {c['ms']:.1f} | "
            f"{c['cpu_ms']:.1f} | {c['ms_diag']:.1f} | {c['peak_mb']:.1f} | {ref} | {ref_cpu} | {ratio} | {diff} | "
            f"{c['singleton_rate_anchor']:.3f} / {'–' if sc is None else f'{sc:.3f}'} |"
        )
    table = "\n".join(lines)
    print(table)
    if not args.quick:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("# Estimator benchmark\n\n" + (__doc__ or "") + "\n" + table + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
