"""Ground-truth advantage benchmark: every registered estimator against exact advantages on finite text MDPs.

    python -m benchmarks.estimator_accuracy                 # full run (tens of minutes on 2 CPU cores)
    python -m benchmarks.estimator_accuracy --quick         # smoke run (about a minute)
    python -m benchmarks.estimator_accuracy --lm            # add SmolLM2-135M hidden states (slow, cached)

Writes tables (CSV), plots (PNG) and ``summary.md`` under ``--out`` (default ``results/estimator-bench``).
Library code: ``groundtruth/`` (see its README).
"""
from __future__ import annotations

import os

# Before NumPy / torch load their thread pools: the benchmark's matrices are small, and on a shared 2-core
# machine multi-threaded BLAS/OpenMP kernels spin against other processes (measured here: a 350x350 Gram
# block took 0.28 s with 2 torch threads under load and 0.005 s with 1). --threads raises torch's count.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from groundtruth.bench import DEFAULT_SCENARIOS, BenchConfig, run_bench  # noqa: E402
from groundtruth.learning import LearnConfig, run_learning  # noqa: E402
from groundtruth.report import write_report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from e


def build_configs(args) -> tuple[BenchConfig, LearnConfig, int]:
    if args.quick:
        bench = BenchConfig(seeds=3, horizon=20, scenarios=(DEFAULT_SCENARIOS[0], DEFAULT_SCENARIOS[-1]),
                            epsilons=(0.0, 0.02, 0.05, 0.1), proxy_noise=(0.2,), lm=args.lm, lm_seeds=2)
        learn = LearnConfig(seeds=2, iterations=6, horizon=20, eval_every=2, scenarios=(DEFAULT_SCENARIOS[-1],))
        reps = 200
    else:
        bench = BenchConfig(lm=args.lm)
        learn = LearnConfig()
        reps = 2000
    shared = {"families": tuple(args.families.split(",")) if args.families else None, "horizon": args.horizon}
    bench = replace(bench, **_given({**shared, "seeds": args.seeds, "epsilons": args.epsilons or None,
                                     "lm_seeds": args.lm_seeds, "lm_groups": args.lm_groups,
                                     "lm_trajectories": args.lm_trajectories}))
    learn = replace(learn, **_given({**shared, "seeds": args.learn_seeds, "iterations": args.iterations,
                                     "epsilon": args.learn_epsilon}))
    return bench, learn, reps


def machine() -> str:
    return (f"{platform.machine()} {platform.processor() or platform.platform()}, {os.cpu_count()} CPU cores visible, "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, Python "
            f"{platform.python_version()}")


def _given(values: dict) -> dict:
    """The command-line overrides that were given (not None)."""
    return {k: v for k, v in values.items() if v is not None}


def _log(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.estimator_accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke configuration (3 seeds, horizon 20, 6 iterations)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default results/estimator-bench, "
                   "or results/estimator-bench-quick with --quick)")
    p.add_argument("--seeds", type=int, default=None, help="seeds of the advantage-quality part (default 20)")
    p.add_argument("--learn-seeds", type=int, default=None, help="seeds of the learning comparison (default 20)")
    p.add_argument("--iterations", type=int, default=None, help="training iterations (default 30)")
    p.add_argument("--families", default=None, help="comma-separated MDP families (default craft,rooms)")
    p.add_argument("--horizon", type=int, default=None, help="max steps per episode (default 50)")
    p.add_argument("--epsilons", type=_floats, default=None, help="ε grid, e.g. 0,0.02,0.05,0.1")
    p.add_argument("--learn-epsilon", type=float, default=None,
                   help="ε of the clustering estimators in training (0.05)")
    p.add_argument("--lm", action="store_true", help="add SmolLM2-135M-Instruct layer -8 hidden states (slow; cached)")
    p.add_argument("--lm-seeds", type=int, default=None, help="seeds embedded by the LM (default 20)")
    p.add_argument("--lm-groups", type=int, default=None, help="groups per batch embedded by the LM (default 1)")
    p.add_argument("--lm-trajectories", type=int, default=None,
                   help="trajectories per group embedded by the LM (default 4)")
    p.add_argument("--skip-bench", action="store_true", help="only the learning comparison")
    p.add_argument("--skip-learning", action="store_true", help="only the advantage-quality part")
    p.add_argument("--workers", type=int, default=1, help="processes over seeds (results do not depend on it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: small matrices, shared CPUs)")
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    out = args.out or (REPO / "results" / ("estimator-bench-quick" if args.quick else "estimator-bench"))
    try:
        bench_cfg, learn_cfg, reps = build_configs(args)
    except ValueError as e:
        p.error(str(e))
    command = "python -m benchmarks.estimator_accuracy " + " ".join(shlex.quote(a)
                                                                    for a in (argv if argv is not None
                                                                              else sys.argv[1:]))
    t0 = time.perf_counter()
    bench = None if args.skip_bench else run_bench(bench_cfg, log=_log, workers=args.workers)
    t1 = time.perf_counter()
    learn = None if args.skip_learning else run_learning(learn_cfg, log=_log, workers=args.workers)
    t2 = time.perf_counter()
    write_report(out, bench, learn, None if args.skip_bench else bench_cfg, None if args.skip_learning else learn_cfg,
                 command=command.strip(), machine=machine() + f"; bench {t1 - t0:.0f} s, learning {t2 - t1:.0f} s",
                 reps=reps)
    print(f"[estimator_bench] wrote {out} (bench {t1 - t0:.0f} s, learning {t2 - t1:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
