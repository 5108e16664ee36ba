"""Re-derive a committed study's headline numbers with seeds as the unit: ``python -m experiments.reanalyse <study>``.

Writes ``results/<study>/reanalysis.md`` (``analysis/reanalysis.py``: whole advantage first, hierarchical bootstrap
intervals over seeds, per-seed counts, post-hoc arms marked, Holm-corrected comparisons, proxy states named).
``--all`` does every study; ``--results`` points at another results folder; ``--print`` writes to stdout instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.reanalysis import STUDIES, reanalyse
from analysis.runs import PackedRunsError

PROG = "python -m experiments.reanalyse"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("study", nargs="*", help=f"one or more of: {', '.join(STUDIES)}")
    ap.add_argument("--all", action="store_true", help="every study")
    ap.add_argument("--results", default="results", help="the results folder (default: results)")
    ap.add_argument("--print", action="store_true", help="print to stdout, write nothing")
    args = ap.parse_args(argv)
    studies = list(STUDIES) if args.all else args.study
    if not studies:
        ap.print_usage(sys.stderr)
        print(f"{PROG}: error: name a study ({', '.join(STUDIES)}) or pass --all", file=sys.stderr)
        return 2
    unknown = [s for s in studies if s not in STUDIES]
    if unknown:
        print(f"{PROG}: error: unknown study {', '.join(unknown)}; known: {', '.join(STUDIES)}", file=sys.stderr)
        return 2
    root = Path(args.results)
    for s in studies:
        if not (root / s).is_dir():
            print(f"{PROG}: error: no folder {root / s}: pass --results <folder that holds {s}/>", file=sys.stderr)
            return 2
        try:
            text = reanalyse(s, root)
        except PackedRunsError as e:  # the message says which file and how to restore it
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        if args.print:
            print(text)
        else:
            (root / s / "reanalysis.md").write_text(text)
            print(f"{s}: -> {root / s / 'reanalysis.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
