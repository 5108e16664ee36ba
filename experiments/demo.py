"""The main job: a small but real CPU experiment, end to end (what `make demo` runs after `make setup`).

    python -m experiments.demo                 # python -m experiments.study demo, with the numerics pinned
    python -m experiments.demo --dry-run       # the plan and the commands only

TextCraft depth-2 goals with a tiny model: the SFT warm start (``python -m experiments.warmstart --env textcraft
--threads 2 --epochs 2``, the preset's ``sft.warmstart``; built once and cached), then GRPO, GiGPO, BiPACE_V and
BiPACE_Q from that warm start with seed 0 (``configs/cpu/textcraft_demo.yaml``), evaluated on depth-2 and depth-3
goals, and the report (curves, tables, diagnostics) in ``runs/demo/summary.md`` (git-ignored), which ends with your
runs beside the committed reference run ``results/demo/`` (``comparison``: equal, within the
reference's seed spread, or outside it). Before torch loads it pins the numerical code paths (``NUMERICS``).
Interrupt it at any time and run it again: it goes on where it stopped (the warm start resumes at its phase, each
run from its last checkpoint). Every option of ``experiments.study`` works here too. How long it takes, and what
the reference shows: ``results/demo/README.md``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

#: the numerical code paths the demo pins before torch loads; its warm start and runs (child processes) inherit
#: them. ATen's vectorised kernels run their AVX2 build on every x86 CPU that has AVX2 (with or without AVX-512);
#: MKL takes its AVX2 branch in conditional-numerical-reproducibility mode on Intel CPUs and ignores the branch on
#: other vendors' (there it runs its automatic branch in that mode, bitwise the same as without the setting on
#: the machines measured). MKL's only branch meant to give the same results on Intel and AMD, COMPATIBLE (SSE2),
#: doubles the CPU time of an SFT step, so the demo does not use it; results/demo/README.md has the measurements.
NUMERICS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}


def pin_numerics(environ=os.environ) -> dict[str, str]:
    """Set ``NUMERICS`` in ``environ`` where the user has not set them (yours win); returns what is in effect."""
    for k, v in NUMERICS.items():
        environ.setdefault(k, v)
    return {k: environ[k] for k in NUMERICS}


#: what the comparison's verdicts mean, said once in the summary and on the terminal
MEANING = ("`equal`: every number compared is the reference run's of the same seed (what the CPU model the "
           "reference was recorded on gives: its runs are deterministic). `within spread`: the numbers differ but each "
           "lies within the range "
           "the reference's seeds span for that method (another CPU's rounding builds another warm start, so runs "
           "differ; this range covers RL sampling seeds from one warm start, so it is a lower bound on the spread to "
           "expect). `outside spread`: at least one number lies outside that range; one goal of the 12 evaluated "
           "moves a cell by 8.3 points.")


#: where the learning gate's verdict is committed: does any CPU recipe make RL raise held-out success?
GATE_REPORT = Path("results/gate-textcraft/reanalysis.md")


_REPO = Path(__file__).resolve().parents[1]


def learning_note(repo: Path = _REPO) -> str:
    """One sentence on what the demo's curves can show, from the learning gate's committed verdict
    (``GATE_REPORT``, written by ``python -m experiments.reanalyse gate-textcraft``)."""
    where = "`results/gate-textcraft/README.md`"
    p = Path(repo) / GATE_REPORT
    text = p.read_text() if p.is_file() else ""
    if "**The gate passes**" in text:
        return (f"A CPU recipe has passed the learning gate ({where}): there, RL raises held-out success above the "
                "warm start; this demo's short runs are not that recipe: read them as the machinery, not as learning.")
    if "**The gate does not pass**" in text:
        return (f"No CPU recipe has yet passed the learning gate ({where}: RL raising held-out success >= 4 points "
                "above the warm start in every seed), so these runs show the machinery, not learning: read no "
                "ranking into them.")
    return (f"The learning gate ({where}) is not decided yet, so no CPU recipe is known to raise held-out success: "
            "these runs show the machinery, not learning.")


def _split(key: str) -> str:
    parts = key.split("/")  # eval/<env>/<split>/success_rate
    return parts[2] if len(parts) == 4 else key


def _numbers(run, splits: list[str], n_iters: int) -> list[float | None]:
    """Mean training success over the first ``n_iters`` iterations, then the final evaluation per split."""
    from analysis.runs import series

    ys = series(run.metrics, "rollout/success_rate")[1][:n_iters]
    out: list[float | None] = [sum(ys) / len(ys) if ys else None]
    for k in splits:
        vals = series(run.evals, k)[1]
        out.append(vals[-1] if vals else None)
    return out


def comparison(yours: list, reference: list, tol: float = 1e-9) -> tuple[str, list[dict]]:
    """Each of ``yours`` (``analysis.runs.Run``) beside the reference runs of the same (env, model, method): the
    run of the same seed and the range over all the reference's seeds of that method. Returns (Markdown table,
    one dict per row with ``method``, ``seed``, ``verdict``: ``equal`` | ``within spread`` | ``outside spread`` |
    ``differs`` (no same-seed run or fewer than 2 reference seeds to make a range)). Training success is the mean
    over the iterations every compared run has; "" when no run has a counterpart."""
    from analysis.report import eval_keys

    by_method: dict[tuple, list] = {}
    for r in reference:
        by_method.setdefault((r.env, r.model, r.method), []).append(r)
    pairs = [(y, sorted(by_method[(y.env, y.model, y.method)], key=lambda r: r.seed))
             for y in yours if (y.env, y.model, y.method) in by_method]
    if not pairs:
        return "", []
    splits, _ = eval_keys([r for y, refs in pairs for r in (y, *refs)])

    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}"

    def iters(run) -> int:
        return int(run.metrics[-1].get("iteration", 0)) if run.metrics else 0

    head = ["method", "seed", "iterations (yours / ref.)", "training success, mean", *map(_split, splits), "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = []
    for y, refs in pairs:
        same = next((r for r in refs if r.seed == y.seed), None)
        n = min(len(y.metrics), *(len(r.metrics) for r in refs))
        mine = _numbers(y, splits, n)
        theirs = [_numbers(r, splits, n) for r in refs]
        ref_same = _numbers(same, splits, n) if same is not None else [None] * len(mine)
        equal = (same is not None and iters(y) == iters(same)
                 and all(a is not None and b is not None and abs(a - b) <= tol for a, b in zip(mine, ref_same)))
        cells = []
        inside = len(refs) >= 2 and all(iters(r) == iters(y) for r in refs)
        for j, v in enumerate(mine):
            col = [t[j] for t in theirs if t[j] is not None]
            rng = f" [{pct(min(col))}–{pct(max(col))}]" if len(col) >= 2 else ""
            cells.append(f"{pct(v)} / {pct(ref_same[j])}{rng}")
            if v is None or len(col) < 2 or not (min(col) - tol <= v <= max(col) + tol):
                inside = False
        verdict = ("equal" if equal else "within spread" if inside
                   else "outside spread" if len(refs) >= 2 else "differs")
        its = f"{iters(y)} / {iters(same) if same is not None else '–'}"
        lines.append("| " + " | ".join([y.method, str(y.seed), its, *cells, verdict]) + " |")
        rows.append({"method": y.method, "seed": y.seed, "verdict": verdict, "reference_seeds": [r.seed for r in refs]})
    return "\n".join(lines), rows


def verdict_line(rows: list[dict]) -> str:
    """One sentence on the whole comparison."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("equal", "within spread", "outside spread", "differs")}
    n = len(rows)
    if counts["equal"] == n:
        return f"All {n} runs equal the reference's: this CPU does the reference's arithmetic."
    said = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    seeds = sorted({s for r in rows for s in r["reference_seeds"]})
    return (f"Of {n} runs: {said} (the reference's seeds: {', '.join(map(str, seeds))}). Runs that are not equal "
            "were computed with other rounding than the reference's (another CPU, or changed code).")


def add_comparison_section(out: Path, reference: Path) -> str | None:
    """Append to ``<out>/summary.md`` your runs beside the committed reference (``comparison``) and print it; the
    demo's replacement for ``lab.study.add_reference_section``. Returns the table, or None."""
    from analysis.runs import find_runs
    from common.machine import cpu_name
    from envs.paths import portable_path

    out, reference = Path(out), Path(reference)
    if out.resolve() == reference.resolve() or not (reference / "runs").is_dir():
        return None
    table, rows = comparison(find_runs(out / "runs"), find_runs(reference / "runs"))
    if not table:
        return None
    where = portable_path(reference.resolve())
    cpu = cpu_name()
    note = learning_note()
    section = (f"## Your runs beside the committed reference (`{where}`)\n\n{note}\n\n{verdict_line(rows)}\n\n"
               f"{MEANING}\n\n"
               f"Cells: yours / the reference's run of the same seed [the range over the reference's seeds], success "
               f"rate in %. Your CPU: {cpu}; the reference's CPU and numbers: `{where}/README.md`.\n\n{table}\n")
    summary = out / "summary.md"
    text = summary.read_text() if summary.is_file() else ""
    summary.write_text(text.rstrip("\n") + "\n\n" + section)
    print(f"[demo] your runs beside the reference ({where}):\n{table}\n[demo] {verdict_line(rows)}\n[demo] {MEANING}"
          f"\n[demo] {note}", flush=True)
    return table


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
    pin_numerics()
    from lab import study

    return study.main(["demo", *argv], compare=add_comparison_section)


if __name__ == "__main__":
    sys.exit(main())
