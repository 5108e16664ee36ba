"""The paper's grouping diagnostic on our environments, from runs with ``logging.grouping_scan``.

    python -m experiments.study grouping-textcraft && python -m experiments.study grouping-alfworld   # the runs
    python -m experiments.grouping_diagnostic results/grouping/textcraft results/grouping/alfworld \\
        --out results/grouping/diagnostic.md

The paper reads GiGPO's anchor singleton rate on ALFWorld (34.2% at iteration 10, 27.3% over training) as anchors
that split equal states, which BiGPO's clusters lower. Here every batch of the first ``--iterations`` (10) of each run
was scanned (``grouping_scan.jsonl``: the anchors and the clusters at every epsilon of ``AUTO_GRID``, each with its
singleton rate and its pair precision / recall against the true state ``state_key``). For each run the table gives,
as the mean over those iterations and at the last one:

* the anchors' singleton rate, and their pair precision and recall against the true state;
* the clusters at the epsilon ``return_loo`` picks on the run's first batch (frozen, as ``epsilon: auto`` would),
  at the epsilon ``anchor_f1`` picks there, and at the paper's 0.05: singleton rate, precision, recall, F1;
* the F1 of each batch's best epsilon (an oracle: it reads the true state), what any epsilon could reach.

A setting is in the paper's regime when its anchors split equal states: pair recall against the true state below
0.5 (most pairs of rows in one state get different anchors) while their precision stays above 0.9 (the split is
over-splitting, not aliasing). The verdict column says which.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROG = "python -m experiments.grouping_diagnostic"
PAPER_EPS = 0.05


def _lines(text: str) -> dict[int, dict]:
    """iteration -> its scan record (the last line of an iteration wins: a resumed run appends it again)."""
    out: dict[int, dict] = {}
    for ln in text.splitlines():
        if ln.strip():
            rec = json.loads(ln)
            out[int(rec["iteration"])] = rec
    return out


def _at(scan: list[dict], eps: float) -> dict:
    return min(scan[1:], key=lambda r: abs(r["epsilon"] - eps))


def _best_f1(scan: list[dict]) -> dict:
    """The scan row of the epsilon with the best F1 against the true state ({} when no row has a finite F1)."""
    rows = [r for r in scan[1:] if r.get("f1", float("nan")) == r.get("f1", float("nan"))]
    return max(rows, key=lambda r: r["f1"]) if rows else {}


def run_summary(scans: dict[int, dict], iterations: int = 10) -> dict:
    """Means over the first ``iterations`` scans and the values at the last of them, for the anchors and for the
    clusters at each rule's epsilon (frozen on the first scan)."""
    from estimators.calibrate import pick_from_scan

    its = sorted(i for i in scans if i <= iterations)
    if not its:
        raise ValueError("no scanned iteration")
    first = scans[its[0]]["scan"]
    eps = {"return_loo": pick_from_scan(first, "return_loo").epsilon,
           "anchor_f1": pick_from_scan(first, "anchor_f1").epsilon, "paper 0.05": PAPER_EPS}
    out: dict = {"iterations": its, "rows": sum(scans[i]["rows"] for i in its) / len(its), "epsilon": eps}
    keys = ("singleton_rate", "precision", "recall", "f1")

    def stats(pick) -> dict:
        rows = [pick(scans[i]["scan"]) for i in its]
        mean = {k: sum(r.get(k, float("nan")) for r in rows) / len(rows) for k in keys}
        return {"mean": mean, "last": {k: rows[-1].get(k, float("nan")) for k in keys}}

    out["anchors"] = stats(lambda s: s[0])
    out["oracle"] = stats(_best_f1)  # reads the true state
    for name, e in eps.items():
        out[name] = stats(lambda s, e=e: _at(s, e))
    return out


def verdict(anchors: dict) -> str:
    p, r = anchors["mean"]["precision"], anchors["mean"]["recall"]
    if r != r or p != p:
        return "no same-state pairs"
    if r < 0.5 and p > 0.9:
        return "yes: anchors over-split equal states"
    if p <= 0.9:
        return "no: anchors alias states" + (" and split them" if r < 0.5 else "")
    return "no: anchors keep most equal states together"


def table(entries: list[tuple[str, dict]]) -> str:
    def f(x: float) -> str:
        return "–" if x != x else f"{x:.2f}"

    lines = [
        "Mean over the first iterations (the value at the last of them in brackets). Singleton rate: rows alone in "
        "their group; P / R / F1: pair precision / recall / F1 against the true state. Cluster epsilons are frozen "
        "on the run's first batch.", "",
        "| run | rows per batch | anchors: singleton | anchors: P / R / F1 | return_loo: eps, singleton, F1 | "
        "anchor_f1: eps, singleton, F1 | paper 0.05: singleton, F1 | best ε of each batch (oracle): F1 | "
        "paper's regime? |",
        "|---|---|---|---|---|---|---|---|---|"]
    for label, s in entries:
        a = s["anchors"]

        def cl(name: str, with_eps: bool = True, s: dict = s) -> str:
            m, last = s[name]["mean"], s[name]["last"]
            head = f"{s['epsilon'][name]:.3g}, " if with_eps else ""
            return (f"{head}{f(m['singleton_rate'])} ({f(last['singleton_rate'])}), "
                    f"{f(m['f1'])} ({f(last['f1'])})")

        lines.append(
            f"| {label} | {s['rows']:.0f} | {f(a['mean']['singleton_rate'])} ({f(a['last']['singleton_rate'])}) | "
            f"{f(a['mean']['precision'])} / {f(a['mean']['recall'])} / {f(a['mean']['f1'])} | "
            f"{cl('return_loo')} | {cl('anchor_f1')} | "
            f"{cl('paper 0.05', False)} | {f(s['oracle']['mean']['f1'])} ({f(s['oracle']['last']['f1'])}) | "
            f"{verdict(a)} |")
    return "\n".join(lines) + "\n"


def run_label(study: str, env: str, method: str, seed: int) -> str:
    """A run's row label: its env, method and seed, with the study folder's name where that is not the env's (two
    studies of one environment, e.g. ``alfworld`` and ``alfworld-physical``, stay apart)."""
    name = Path(study).name
    where = env if name == env else f"{env} [{name}]"
    return f"{where} {method}, seed {seed}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study folders whose runs logged grouping_scan.jsonl")
    ap.add_argument("--iterations", type=int, default=10, help="the first iterations to read (default 10)")
    ap.add_argument("--out", help="write the table here (markdown)")
    args = ap.parse_args(argv)
    from analysis.runs import find_runs
    from envs.paths import portable_path

    entries = []
    for study in args.studies:
        try:
            runs = find_runs(Path(study))
        except FileNotFoundError as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        for r in sorted(runs, key=lambda r: r.path.parts):
            text = r.read_text("grouping_scan.jsonl")
            if not text:
                continue
            label = run_label(study, r.env, r.method, r.seed)
            try:
                summary = run_summary(_lines(text), args.iterations)
                read = summary["iterations"]
                if len(read) < args.iterations:  # a run stopped early: say what its means cover
                    label += f" (iterations {read[0]}–{read[-1]} only)"
                entries.append((label, summary))
            except ValueError as e:
                print(f"{PROG}: {portable_path(r.path)}: {e}; left out", file=sys.stderr)
    if not entries:
        print(f"{PROG}: error: no run under {args.studies} has grouping_scan.jsonl (train with "
              f"logging.grouping_scan=true)", file=sys.stderr)
        return 2
    text = table(entries)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
