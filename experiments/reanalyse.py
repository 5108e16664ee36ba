"""Re-derive a committed study's headline numbers with seeds as the unit: ``python -m experiments.reanalyse <study>``.

Writes ``results/<study>/reanalysis.md`` (``analysis/reanalysis.py``: whole advantage first, hierarchical bootstrap
intervals over seeds, per-seed counts, post-hoc arms marked, Holm-corrected comparisons, proxy states named).
``--all`` does every study; ``--results`` points at another results folder; ``--print`` writes to stdout instead.

``--overview FOLDER`` (``python -m experiments.reanalyse --overview results/llm-groundtruth``) sets the ground-truth
studies side by side: it reads every scenario folder below FOLDER (each a study's ``out``, with its ``runs/`` or
their packed ``runs.jsonl.xz``), in the order given by ``--scenarios`` (default: exact, oversplit, undersplit, then
any other), and writes ``FOLDER/overview.md``: per estimator and scenario, the step term's and the whole advantage's
correlation with the exact advantage, the paired difference from ``--baseline``, the state groups' singleton rate and
pair recall/precision, the calibrated epsilon, and each trained method's late training success
(``analysis.truth.overview``).
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from analysis.reanalysis import STUDIES, reanalyse
from analysis.runs import PACKED_NAME, PackedRunsError, find_runs

PROG = "python -m experiments.reanalyse"


def overview(root: Path, scenarios: str, baseline: str, command: str) -> tuple[str, int] | None:
    """``--overview``: the Markdown of ``root``'s scenarios side by side and the run count; None when ``root`` has
    no scenario folder with runs."""
    from analysis.truth import overview as truth_overview

    found = sorted({p.parent.name for p in root.glob("*/runs") if p.is_dir()}
                   | {p.parent.name for p in root.glob(f"*/{PACKED_NAME}") if p.is_file()})
    first = scenarios.split(",")
    order = [s for s in first if s in found] + [s for s in found if s not in first]
    if not order:
        return None
    runs = {s: find_runs(root / s / "runs") for s in order}
    text = (f"# Ground-truth studies side by side\n\nMade by `{command}`.\n\n"
            f"{truth_overview(runs, baseline)}\n")
    return text, sum(len(v) for v in runs.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("study", nargs="*", help=f"one or more of: {', '.join(STUDIES)}")
    ap.add_argument("--all", action="store_true", help="every study")
    ap.add_argument("--results", default="results", help="the results folder (default: results)")
    ap.add_argument("--print", action="store_true", help="print to stdout, write nothing")
    ap.add_argument("--overview", metavar="FOLDER", help="write FOLDER/overview.md: the ground-truth scenario "
                    "folders below FOLDER side by side (e.g. results/llm-groundtruth)")
    ap.add_argument("--scenarios", default="exact,oversplit,undersplit",
                    help="with --overview: scenario folder names first in this order (others follow, sorted)")
    ap.add_argument("--baseline", default="gigpo", help="with --overview: the paired baseline (default: gigpo)")
    args = ap.parse_args(argv)
    studies = list(STUDIES) if args.all else args.study
    if args.overview is not None:
        root = Path(args.overview)
        command = f"{PROG} " + shlex.join(argv if argv is not None else sys.argv[1:])
        try:
            made = overview(root, args.scenarios, args.baseline, command)
        except PackedRunsError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        if made is None:
            print(f"{PROG}: error: no scenario folder with runs/ or {PACKED_NAME} under {root}: run `python -m "
                  "experiments.study llm-gt-exact` (and -oversplit, -undersplit) first", file=sys.stderr)
            return 2
        text, n = made
        if args.print:
            print(text)
        else:
            (root / "overview.md").write_text(text)
            print(f"{n} runs -> {root / 'overview.md'}")
        if not studies:
            return 0
    if not studies:
        ap.print_usage(sys.stderr)
        print(f"{PROG}: error: name a study ({', '.join(STUDIES)}), pass --all or --overview FOLDER", file=sys.stderr)
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
        except FileNotFoundError:
            if any((root / s).rglob("seed_*")) or any((root / s).rglob(PACKED_NAME)):
                raise  # the study has runs: something else is missing, and the traceback says what
            # a study planned or under way: its folder holds no runs yet
            if args.all:
                print(f"{PROG}: note: {s}: skipped, no runs under {root / s} yet", file=sys.stderr)
                continue
            print(f"{PROG}: error: {s}: no runs under {root / s} yet; its README.md says how to run the study",
                  file=sys.stderr)
            return 2
        if args.print:
            print(text)
        else:
            (root / s / "reanalysis.md").write_text(text)
            print(f"{s}: -> {root / s / 'reanalysis.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
