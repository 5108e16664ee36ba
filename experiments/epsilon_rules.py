"""The epsilon rules scored on first batches none of them was chosen on: one command, resumable.

    python -m experiments.epsilon_rules                 # collect what is missing, then write results/epsilon/rules.md
    python -m experiments.epsilon_rules --dry-run       # list the collections and whether each is done
    python -m experiments.epsilon_rules --report-only   # the table from what is collected

Collections (one thread each, below ``--out``, default ``runs/eps-loo``; generated data, git-ignored):

* the first batch of every seed (0-9) of the three ``llm-groundtruth`` scenarios: the study's own warm start and
  first iteration (``experiments.study llm-gt-<scenario> --estimators bigpo trainer.iterations=1``), whose
  ``epsilon.json`` holds the scan; these are the committed study's first batches (same seeds, same warm start);
* TextCraft, ALFWorld and WebShop first batches of the random tiny model (half the executed actions the expert's) and
  of SmolLM2-135M-Instruct (``experiments.geometry``, the commands of ``results/epsilon/README.md``).

Every rule of ``estimators.calibrate`` is applied to each scan and scored against the true state by
``experiments.epsilon_criteria`` (``setting_summary``: per setting, the mean F1, the gap to the grid's best epsilon,
the batches within 0.05 of it). A finished collection is skipped; an interrupted study resumes.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PROG = "python -m experiments.epsilon_rules"
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/eps-loo", help="where the collections go (default: runs/eps-loo)")
    ap.add_argument("--table", default="results/epsilon/rules.md", help="the markdown table written at the end")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--skip", default="", help="comma-separated collections to leave out (e.g. webshop_smollm2)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    skip = {s for s in args.skip.split(",") if s}
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
    if args.dry_run:
        return 0
    if not args.report_only:
        for name, done, cmd in jobs:
            if not done and subprocess.run(cmd, env=env).returncode != 0:
                print(f"{PROG}: error: the collection {name} failed (rerun to resume)", file=sys.stderr)
                return 1
    from experiments.epsilon_criteria import main as criteria

    crit = [str(out / sc) for sc in SCENARIOS if _study_done(out, sc)]
    for name, label, _ in BATCHES:
        steps = out / name / "rollouts" / "steps.pt"
        if name not in skip and steps.is_file():
            crit += ["--batch", str(steps), "--label", label]
    if not crit:
        print(f"{PROG}: error: nothing collected under {out}; run without --report-only", file=sys.stderr)
        return 2
    return criteria(crit + ["--out", args.table])


if __name__ == "__main__":
    sys.exit(main())
