"""Write a study report (curves, tables, sample efficiency, IQM / probability of improvement,
diagnostics) from run folders.

    python -m experiments.report --runs results/runs --out results/my-study
    python -m experiments.report --runs results/cpu-study/runs --out results/cpu-study --env textcraft
"""
from __future__ import annotations

import argparse
import shlex
import sys

from analysis.report import DEFAULT_THRESHOLDS, build_report
from analysis.runs import find_runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="results/runs", help="root of the run folders (searched recursively)")
    ap.add_argument("--out", required=True, help="study folder to write, e.g. results/cpu-study")
    ap.add_argument("--title", default=None)
    ap.add_argument("--env", default=None, help="only runs of this environment")
    ap.add_argument("--model", default=None, help="only runs of this model")
    ap.add_argument("--methods", default=None, help="comma-separated method folders to include")
    ap.add_argument("--baseline", default="gigpo", help="method the speed-ups and P(improvement) compare against")
    ap.add_argument("--thresholds", default=",".join(str(t) for t in DEFAULT_THRESHOLDS))
    args = ap.parse_args(argv)
    try:
        runs = find_runs(args.runs)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.env:
        runs = [r for r in runs if r.env == args.env]
    if args.model:
        runs = [r for r in runs if r.model == args.model]
    if args.methods:
        keep = set(args.methods.split(","))
        runs = [r for r in runs if r.method in keep]
    if not runs:
        print(f"error: no run folders with metrics.jsonl under {args.runs} match the filters", file=sys.stderr)
        return 2
    thresholds = [float(x) for x in args.thresholds.split(",")]
    cmd = "python -m experiments.report " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    summary = build_report(runs, args.out, args.title or f"Study: {args.out}", thresholds, args.baseline, cmd)
    print(f"{len(runs)} runs -> {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
