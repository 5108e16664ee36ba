"""The ground-truth studies side by side: ``python -m experiments.truth_overview results/llm-groundtruth``.

Reads every scenario folder below the given one (each a study's ``out``, with its ``runs/`` or their packed
``runs.jsonl.xz``), in the order given by ``--scenarios`` (default: exact, oversplit, undersplit, then any other),
and writes ``overview.md`` there: per estimator and scenario, the step term's and the whole advantage's correlation
with the exact advantage, the paired difference from the baseline, the state groups' singleton rate and pair
recall/precision, the calibrated epsilon, and each trained method's late training success
(``analysis.truth.overview``).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from analysis.runs import PACKED_NAME, find_runs
from analysis.truth import overview


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.truth_overview", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="parent of the scenario folders, e.g. results/llm-groundtruth")
    ap.add_argument("--scenarios", default="exact,oversplit,undersplit",
                    help="scenario folder names first in this order (others follow, sorted)")
    ap.add_argument("--baseline", default="gigpo")
    args = ap.parse_args(argv)
    root = Path(args.folder)
    found = sorted({p.parent.name for p in root.glob("*/runs") if p.is_dir()}
                   | {p.parent.name for p in root.glob(f"*/{PACKED_NAME}") if p.is_file()})
    order = [s for s in args.scenarios.split(",") if s in found] + [s for s in found
                                                                    if s not in args.scenarios.split(",")]
    if not order:
        print(f"error: no scenario folder with runs/ or {PACKED_NAME} under {root}: run `python -m experiments.study "
              "llm-gt-exact` (and -oversplit, -undersplit) first", file=sys.stderr)
        return 2
    scenarios = {s: find_runs(root / s / "runs") for s in order}
    cmd = "python -m experiments.truth_overview " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = f"# Ground-truth studies side by side\n\nMade by `{cmd}`.\n\n{overview(scenarios, args.baseline)}\n"
    (root / "overview.md").write_text(text)
    print(f"{sum(len(v) for v in scenarios.values())} runs in {len(order)} scenarios -> {root / 'overview.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
