"""Compare the rules of ``estimator.epsilon: auto`` on real first batches, against the true environment state.

    python -m experiments.epsilon_criteria results/learning/runs            # every epsilon.json below these folders
                                                                            # (or in a study's packed runs.jsonl.xz)
    python -m experiments.epsilon_criteria --batch steps.pt [--hidden hidden.pt --layer -8] --label "smollm2 alfworld"
    python -m experiments.epsilon_criteria --collect                # the 37 first batches of results/epsilon/rules.md:
                                                                    # collect what is missing, then write the table
    python -m experiments.epsilon_criteria --collect --dry-run      # list the collections and whether each is done
    python -m experiments.epsilon_criteria --collect --report-only  # the table from what is collected

For each batch: the exact anchors (GiGPO) and, for each rule (``anchor_recall`` at 0.9, ``singleton_match``; with
``--batch`` also both on states centred by the prompt group's mean), the epsilon it picks and what that grouping is
against the true state (``state_key``): singleton rate, pair precision, pair recall, F1. Beside them the paper's
epsilon = 0.05 and the epsilon of the grid with the best F1 (an oracle: it reads the true state, which a run cannot).
A rule is good when it lands near the oracle's F1 without seeing the state. ``epsilon.json`` files hold the scan the
run made on its own first batch (uncentred unless the run centred); ``--batch`` files (``StepBatch.save``, e.g. the
``rollouts/steps.pt`` of ``experiments.geometry``) are scanned here. ``--out`` writes the table as markdown.

``--collect [DIR]`` (default ``runs/eps-loo``; generated data, git-ignored) scores the rules on first batches none
of them was chosen on, collected below DIR first (one thread each; a finished collection is skipped, an interrupted
study resumes), and writes ``--out`` (default ``results/epsilon/rules.md``):

* the first batch of every seed (0-9) of the three ``llm-groundtruth`` scenarios: the study's own warm start and
  first iteration (``experiments.study llm-gt-<scenario> --estimators bigpo trainer.iterations=1``), whose
  ``epsilon.json`` holds the scan; these are the committed study's first batches (same seeds, same warm start);
* TextCraft, ALFWorld and WebShop first batches of the random tiny model (half the executed actions the expert's) and
  of SmolLM2-135M-Instruct (``experiments.geometry``, the commands of ``results/epsilon/README.md``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from envs.paths import portable_path

PROG = "python -m experiments.epsilon_criteria"
#: ``--collect``: the collections' folder and the table's file
COLLECT_DIR, RULES_TABLE = "runs/eps-loo", "results/epsilon/rules.md"
SCENARIOS = ("exact", "oversplit", "undersplit")
_TINY = ["--model", "tiny:layers=4,hidden=128,heads=4", "--groups", "4", "--group-size", "8", "--max-steps", "6",
         "--layers", "-2", "--max-tokens", "24", "--expert-prob", "0.5", "--threads", "1", "--seed", "0",
         "--match-tol", "1e-5", "--no-plots"]
_SMOL = ["--model", "smollm2", "--group-size", "8", "--max-steps", "4", "--layers", "-8", "--max-tokens", "16",
         "--expert-prob", "0.5", "--threads", "1", "--match-tol", "1e-5", "--no-plots"]
_WEB = ["--random-prob", "0.25", "--max-prompt-tokens", "4096"]
#: (folder name, label in the table, experiments.geometry arguments)
BATCHES = (
    ("textcraft_tiny", "TextCraft, tiny random", _TINY + ["--env", "TextCraft-v0"]),
    ("alfworld_tiny", "ALFWorld, tiny random", _TINY + ["--env", "ALFWorld-v0", "--random-prob", "0.25"]),
    ("webshop_tiny", "WebShop, tiny random", _TINY + ["--env", "WebShop-v0"] + _WEB),
    ("textcraft_smollm2", "TextCraft, SmolLM2", _SMOL + ["--groups", "2", "--seed", "0", "--env", "TextCraft-v0"]),
    ("alfworld_smollm2", "ALFWorld, SmolLM2",
     _SMOL + ["--groups", "2", "--seed", "0", "--env", "ALFWorld-v0", "--random-prob", "0.25"]),
    ("webshop_smollm2", "WebShop, SmolLM2", _SMOL + ["--groups", "2", "--seed", "0", "--env", "WebShop-v0"] + _WEB),
    ("textcraft_smollm2_s1", "TextCraft, SmolLM2, seed 1",
     _SMOL + ["--groups", "4", "--seed", "1", "--env", "TextCraft-v0"]),
)


def _study_done(out: Path, scenario: str) -> int:
    return len(list((out / scenario).rglob("epsilon.json")))


def collect(out: Path, skip: set[str], dry_run: bool = False, report_only: bool = False) -> list[str] | int:
    """``--collect``: run the collections below ``out`` that are missing (none with ``report_only``); the arguments
    that score what is collected, or an exit status (0 after ``dry_run``, 1 on a failed collection, 2 when nothing
    is collected)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    jobs = []
    for sc in SCENARIOS:
        cmd = [sys.executable, "-m", "experiments.study", f"llm-gt-{sc}", "--seeds", "0-9", "--estimators", "bigpo",
               "--variants", "none", "--jobs", "1", "--out", str(out / sc), "--no-report", "trainer.iterations=1"]
        jobs.append((sc, _study_done(out, sc) >= 10, cmd))
    for name, _, geo in BATCHES:
        if name in skip:
            continue
        cmd = [sys.executable, "-m", "experiments.geometry", *geo, "--out", str(out / name)]
        jobs.append((name, (out / name / "rollouts" / "steps.pt").is_file(), cmd))
    for name, done, cmd in jobs:
        print(f"{'done' if done else 'to do'}: {name}: {' '.join(cmd[1:])}")
    if dry_run:
        return 0
    if not report_only:
        for name, done, cmd in jobs:
            if not done and subprocess.run(cmd, env=env).returncode != 0:
                print(f"{PROG}: error: the collection {name} failed (rerun to resume)", file=sys.stderr)
                return 1
    crit = [str(out / sc) for sc in SCENARIOS if _study_done(out, sc)]
    for name, label, _ in BATCHES:
        steps = out / name / "rollouts" / "steps.pt"
        if name not in skip and steps.is_file():
            crit += ["--batch", str(steps), "--label", label]
    if not crit:
        print(f"{PROG}: error: nothing collected under {out}; run without --report-only", file=sys.stderr)
        return 2
    return crit


def _fmt(r: dict | None) -> str:
    """'epsilon: singleton rate / precision / recall / F1' of a scan row (no epsilon for the anchors' row)."""
    if r is None:
        return "–"
    nums = " / ".join(f"{r.get(k, float('nan')):.2f}" for k in ("singleton_rate", "precision", "recall", "f1"))
    return nums if r.get("epsilon") is None else f"{r['epsilon']:.3g}: {nums}"


def rules_on_scan(scan: list[dict], center: bool = False) -> dict[str, dict | None]:
    """Row of the scan each rule (and the paper's 0.05, and the best-F1 oracle) picks."""
    from estimators.calibrate import CRITERIA, pick_from_scan

    rows = [r for r in scan[1:] if r["epsilon"] is not None]
    by_eps = {r["epsilon"]: r for r in rows}
    out: dict[str, dict | None] = {}
    sfx = " (centred)" if center else ""
    for crit in CRITERIA:
        if crit == "state_f1":
            continue  # the oracle: "best F1 (oracle)" below
        if crit in ("anchor_f1", "return_loo") and crit not in scan[0]:
            continue  # a scan saved before the rule existed
        cal = pick_from_scan(scan, crit, 0.9, center)
        out[crit + sfx] = {**by_eps[cal.epsilon], "rule": cal.rule}
    f1 = [r for r in rows if r.get("f1") == r.get("f1") and "f1" in r]
    out["best F1 (oracle)" + sfx] = max(f1, key=lambda r: (r["f1"], -r["epsilon"])) if f1 else None
    if not center:
        out["paper 0.05"] = min(rows, key=lambda r: abs(r["epsilon"] - 0.05))
    return out


def table(entries: list[tuple[str, int, dict, dict]]) -> str:
    """entries: (label, rows, anchors row, {rule: row})."""
    names: list[str] = []
    for *_, picks in entries:
        names += [n for n in picks if n not in names]
    lines = ["Each cell: epsilon: singleton rate / pair precision / pair recall / F1 against the true state.", "",
             "| batch | rows | exact anchors | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for label, n, anchors, picks in entries:
        lines.append(f"| {label} | {n} | {_fmt(anchors)} | " + " | ".join(_fmt(picks.get(k)) for k in names) + " |")
    return "\n".join(lines) + "\n"


def f1_summary(entries: list[tuple[str, int, dict, dict]]) -> str:
    """Rules as rows, batches as columns: the F1 against the true state of each rule's epsilon, and how far it falls
    below the oracle's F1 (same centring) on average; the rule to keep is the one with the smallest gap."""
    names: list[str] = []
    for *_, picks in entries:
        names += [n for n in picks if n not in names and not n.startswith("best F1")]
    head = "| rule | " + " | ".join(label for label, *_ in entries) + " | mean gap to the oracle |"
    lines = ["F1 against the true state of the epsilon each rule picks (gap: the oracle's F1 minus it, centred rules "
             "against the centred oracle).", "", head, "|---|" + "---|" * (len(entries) + 1)]
    rows = [("exact anchors", None)] + [(n, n) for n in names]
    for title, key in rows:
        cells, gaps = [], []
        for _, _, anchors, picks in entries:
            r = anchors if key is None else picks.get(key)
            oracle = picks.get("best F1 (oracle)" + (" (centred)" if key and key.endswith("(centred)") else ""))
            if r is None or "f1" not in r:
                cells.append("–")
                continue
            cells.append(f"{r['f1']:.2f}" if r.get("epsilon") is None else f"{r['epsilon']:.3g}: {r['f1']:.2f}")
            if oracle is not None:
                gaps.append(oracle["f1"] - r["f1"])
        mean_gap = f"{sum(gaps) / len(gaps):+.3f} ({len(gaps)})" if gaps else "–"
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {mean_gap} |")
    return "\n".join(lines) + "\n"


def setting_summary(entries: list[tuple[str, int, dict, dict]], tol: float = 0.05) -> str:
    """Batches of one setting (the label without its ", seed k") pooled: per rule, the mean F1 against the true state,
    the mean and the largest gap to the oracle, the batches within ``tol`` of the oracle, and the batches where the
    rule leaves more rows alone than the anchors although the anchors split rows of one state (anchor pair recall
    against the true state below 0.9)."""
    import re

    settings: dict[str, list] = {}
    for e in entries:
        settings.setdefault(re.sub(r", seed \d+$", "", e[0]), []).append(e)
    names: list[str] = []
    for *_, picks in entries:
        names += [n for n in picks if n not in names and not n.startswith("best F1") and "(centred)" not in n]
    lines = [f"Per setting (batches pooled over seeds): mean F1 against the true state; in brackets the mean / largest "
             f"gap to the oracle's F1, batches within {tol:g} of it, and batches where the rule leaves more rows "
             f"alone than the anchors although the anchors split equal states (anchor pair recall < 0.9).", "",
             "| setting | batches | oracle | exact anchors | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for label, group in settings.items():
        oracle = [p.get("best F1 (oracle)") for *_, p in group]
        if any(o is None for o in oracle):
            continue
        of1 = [o["f1"] for o in oracle]
        cells = [f"{sum(of1) / len(of1):.2f}"]
        split = [a.get("recall", 1.0) < 0.9 for _, _, a, _ in group]
        for key in [None] + names:
            rows = [a if key is None else p.get(key) for _, _, a, p in group]
            if any(r is None or "f1" not in r for r in rows):
                cells.append("–")
                continue
            gaps = [o - r["f1"] for o, r in zip(of1, rows)]
            within = sum(g <= tol + 1e-12 for g in gaps)
            more = sum(sp and r["singleton_rate"] > a["singleton_rate"] + 1e-12
                       for sp, r, (_, _, a, _) in zip(split, rows, group))
            f1 = sum(r["f1"] for r in rows) / len(rows)
            tail = "" if key is None else f"; {more}/{sum(split)}"
            cells.append(f"{f1:.2f} ({sum(gaps) / len(gaps):+.2f} / {max(gaps):+.2f}; {within}/{len(rows)}{tail})")
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _scans(folder: Path) -> list[tuple[Path, dict, dict | None]]:
    """(run folder, its epsilon.json, its run.json or None) of every epsilon.json below ``folder`` (or ``folder``
    itself, a file), in path order; a study whose runs are packed (``analysis.runs.find_runs``) is read from its
    packed file."""
    if folder.is_file() and not folder.name.endswith(".jsonl.xz"):
        info = folder.parent / "run.json"
        return [(folder.parent, json.loads(folder.read_text()),
                 json.loads(info.read_text()) if info.is_file() else None)]
    files = sorted(folder.rglob("epsilon.json")) if folder.is_dir() else []
    if files:
        return [(f.parent, json.loads(f.read_text()),
                 json.loads((f.parent / "run.json").read_text()) if (f.parent / "run.json").is_file() else None)
                for f in files]
    from analysis.runs import find_runs

    try:
        runs = find_runs(folder)
    except FileNotFoundError:
        return []
    return [(r.path, rec, r.info if r.read_text("run.json") is not None else None)
            for r in sorted(runs, key=lambda r: r.path.parts) if (rec := r.read_json("epsilon.json")) is not None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", help="folders searched for epsilon.json (run folders, a study's runs/)")
    ap.add_argument("--batch", action="append", default=[], help="a StepBatch file with state_key (repeatable)")
    ap.add_argument("--hidden", action="append", default=[], help="with --batch: {layer: (N, D)} torch file")
    ap.add_argument("--layer", type=int, default=None, help="with --hidden: which layer (default: the first)")
    ap.add_argument("--label", action="append", default=[], help="with --batch: its name in the table")
    ap.add_argument("--out", help=f"write the table here (markdown; with --collect default {RULES_TABLE})")
    ap.add_argument("--collect", nargs="?", const=COLLECT_DIR, default=None, metavar="DIR",
                    help=f"collect the first batches of {RULES_TABLE} below DIR (default {COLLECT_DIR}) and score them")
    ap.add_argument("--dry-run", action="store_true", help="with --collect: list the collections, run nothing")
    ap.add_argument("--report-only", action="store_true", help="with --collect: the table from what is collected")
    ap.add_argument("--skip", default="", help="with --collect: comma-separated collections to leave out "
                    "(e.g. webshop_smollm2)")
    args = ap.parse_args(argv)
    if args.collect is None and (args.dry_run or args.report_only or args.skip):
        ap.error("--dry-run, --report-only and --skip go with --collect")
    if args.collect is not None:
        if args.folders or args.batch:
            ap.error("--collect scores its own collections; give no folders or --batch with it")
        got = collect(Path(args.collect), {s for s in args.skip.split(",") if s}, args.dry_run, args.report_only)
        if isinstance(got, int):
            return got
        return main(got + ["--out", args.out or RULES_TABLE])
    by_batch: dict[str, tuple] = {}  # first batch -> its entry (runs of one seed share their first batch)
    for folder in args.folders:
        try:
            scans = _scans(Path(folder))
        except (OSError, ValueError) as e:
            print(f"{PROG}: error: {folder}: {e}", file=sys.stderr)
            return 2
        if not scans:
            print(f"{PROG}: error: no epsilon.json under {folder} (runs with estimator.epsilon=auto write one)",
                  file=sys.stderr)
            return 2
        for run_dir, rec, info in scans:
            # scans saved by older code lack some columns: the batch is known by the columns every scan has, and
            # of its scans the one with the most columns is read
            key = json.dumps([(r.get("epsilon"), r["singleton_rate"], r["groups"], r.get("precision"))
                              for r in rec["scan"]])
            if key in by_batch and len(rec["scan"][0]) <= len(by_batch[key][2]):
                continue
            label = portable_path(run_dir)
            if info is not None:  # "<study folder>: <env> <model>, seed k" (runs of one seed share the batch)
                root = portable_path(Path(folder).resolve())
                label = f"{root}: {info.get('env')} {info.get('model')}, seed {info.get('seed')}"
            by_batch[key] = (label, rec["rows"], rec["scan"][0], rules_on_scan(rec["scan"], rec.get("center_states")))
    entries = list(by_batch.values())
    if args.batch:
        import torch

        from estimators import EstimatorConfig
        from estimators.batch import StepBatch
        from estimators.calibrate import AUTO_GRID, scan_epsilon

        for i, path in enumerate(args.batch):
            b = StepBatch.load(path)
            if i < len(args.hidden):
                try:  # tensors only: a file named on the command line may come from anyone
                    layers = torch.load(args.hidden[i], map_location="cpu", weights_only=True)
                except Exception as e:  # an unpickling refusal, a damaged or missing file
                    print(f"{PROG}: error: --hidden {args.hidden[i]} cannot be read as a torch file of tensors "
                          f"({type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}): "
                          "it must hold {layer: (N, D) tensor} (or {'layers': {...}}), saved with torch.save; "
                          "other objects are not loaded, since loading them could run code", file=sys.stderr)
                    return 2
                if not isinstance(layers, dict):
                    print(f"{PROG}: error: --hidden {args.hidden[i]} holds a {type(layers).__name__}, not "
                          "{layer: (N, D) tensor}", file=sys.stderr)
                    return 2
                layers = layers.get("layers", layers)
                b.hidden = layers[args.layer if args.layer is not None else next(iter(layers))]
            if b.state_key is None or b.hidden is None:
                print(f"{PROG}: error: {path} needs hidden states and state_key", file=sys.stderr)
                return 2
            label = args.label[i] if i < len(args.label) else portable_path(path)
            picks = {}
            for center in (False, True):
                scan = scan_epsilon(b, AUTO_GRID, EstimatorConfig(center_states=center))
                picks.update(rules_on_scan(scan, center))
            entries.append((label, len(b), scan[0], picks))
    if not entries:
        ap.error("give run folders or --batch files")
    text = setting_summary(entries) + "\n" + table(entries) + "\n" + f1_summary(entries)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
