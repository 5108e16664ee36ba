"""An estimator comparison read by held-out success: each arm against the baseline of the same
seed, seeds as the unit.

* **Primary**: held-out success at each run's last evaluation (at its last iteration). Per seed, the arm's rate minus
  the baseline's (the two runs share the warm start, the training goal draws and the evaluation goals); the mean
  difference with a Student-t 95% interval over the per-seed differences (``analysis.stats.t_ci``: valid for a
  handful of seeds, where a percentile bootstrap over the seed values is too narrow); seeds above / below; the
  exact two-sided sign-flip p (``analysis.stats.sign_flip_p``; smallest possible 2 / 2^n); Holm over the arms
  compared (``analysis.stats.holm``).
* **Secondary**: training-rollout success over the last 5 iterations (paired the same way), the held-out curve, and
  each arm's share of rows in each PACE branch (action-keyed formula, leave-one-out fallback, no step term) with the
  scale of its step term and whole advantage.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from .runs import Run, final_eval, find_runs, packed_file, series
from .stats import format_ci, holm, sign_flip_p, t_ci

__all__ = ["paired_rows", "comparison_report"]


def _last_mean(run: Run, key: str, k: int = 5) -> float | None:
    _, ys = series(run.metrics, key)
    return float(np.mean(ys[-k:])) if ys else None


def paired_rows(runs: list[Run], arms: list[str], baseline: str, value) -> list[dict]:
    """Per arm in ``arms`` (the baseline first, unpaired): its per-seed ``value(run)`` and, for the others, the
    per-seed difference to the baseline's run of the same seed, its t-interval, counts, sign-flip p and Holm p over
    the arms compared. ``value`` returns a float or None (a run without the value is left out)."""
    per: dict[str, dict[int, float]] = {m: {} for m in arms}
    for r in runs:
        if r.method in per:
            v = value(r)
            if v is not None and math.isfinite(v):
                per[r.method][r.seed] = float(v)
    rows = []
    for m in arms:
        row = {"arm": m, "per_seed": per[m], "level": t_ci(list(per[m].values()))}
        if m != baseline:
            d = {s: per[m][s] - per[baseline][s] for s in sorted(per[m]) if s in per[baseline]}
            if d:
                xs = list(d.values())
                row.update(diff=t_ci(xs), diffs=d, above=sum(x > 0 for x in xs),
                           below=sum(x < 0 for x in xs), n=len(xs), p=sign_flip_p(xs))
        rows.append(row)
    tested = [r for r in rows if "p" in r]
    for r, a in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = a
    return rows


def _table(rows: list[dict], baseline: str, unit: str) -> list[str]:
    k = sum("p" in r for r in rows)
    md = [f"| arm | seeds | mean of seeds ({unit}) [95% t-CI] | − {baseline} ({unit}) [95% t-CI over seeds] | "
          f"seeds above / below | sign-flip p | Holm p (k = {k}) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['arm']} | {len(r['per_seed'])} | {format_ci(r['level'], 1, 100, signed=False)} | "
        if "p" in r:
            md.append(head + f"{format_ci(r['diff'], 1, 100)} | {r['above']} / {r['below']} | {r['p']:.3f} | "
                             f"{r['p_holm']:.3f} |")
        else:
            md.append(head + "– | – | – | – |")
    return md


def comparison_report(root: Path, arms: list[str], baseline: str = "gigpo", split: str = "eval_depth2") -> str:
    """The comparison's reading of a study folder ``root`` (its runs, unpacked or packed) as Markdown."""
    root = Path(root)
    if not ((root / "runs").exists() or packed_file(root / "runs") is not None):
        return "No runs yet.\n"
    runs = [r for r in find_runs(root / "runs") if r.method in arms]
    if not runs:
        return "No runs yet.\n"
    arms = [m for m in arms if any(r.method == m for r in runs)]
    keys = sorted({k for r in runs for row in r.evals for k in row
                   if re.match(rf"^eval/[^/]+/{re.escape(split)}/success_rate$", k)})
    seeds = sorted({r.seed for r in runs})
    n = len(seeds)
    md = [f"{len(runs)} runs ({', '.join(f'{m}: {sum(r.method == m for r in runs)}' for m in arms)}), seeds "
          f"{', '.join(map(str, seeds))}. Unit: the seed. Smallest possible sign-flip p with {n} seeds: "
          f"{2 / 2 ** n:.4f}; with Holm over {len(arms) - 1} comparisons the smallest adjusted p is "
          f"{min(1.0, (len(arms) - 1) * 2 / 2 ** n):.4f}.", ""]
    if keys:
        key = keys[0]
        rows = paired_rows(runs, arms, baseline, lambda r: (final_eval(r, key) or (None,))[0])
        md += [f"### 1. Primary: held-out `{split}` success at the last iteration, paired with {baseline} by seed", ""]
        md += _table(rows, baseline, "points")
        md += ["", "Per seed (points, arm − " + baseline + "): " + "; ".join(
            f"{r['arm']}: " + ", ".join(f"{s}: {100 * d:+.1f}" for s, d in r["diffs"].items())
            for r in rows if "diffs" in r), ""]
        md += ["Held-out success by iteration, mean over seeds (%): " + "; ".join(
            f"{m}: " + ", ".join(f"{it}: {100 * float(np.mean(v)):.1f}" for it, v in sorted(_by_iter(
                [r for r in runs if r.method == m], key).items())) for m in arms), ""]
    rows = paired_rows(runs, arms, baseline, lambda r: _last_mean(r, "rollout/success_rate"))
    md += ["### 2. Secondary: training-rollout success, mean of the last 5 iterations", ""]
    md += _table(rows, baseline, "points") + [""]
    md += ["### 3. Branch mix and scale (mean over each arm's runs and iterations)", "",
           "| arm | first-batch ε (median) | PACE rows | leave-one-out rows | no step term | step-term std | "
           "advantage std |", "|---|---|---|---|---|---|---|"]
    for m in arms:
        rs = [r for r in runs if r.method == m]

        def mean(k: str, rs: list[Run] = rs) -> str:
            vs = [v for r in rs for v in series(r.metrics, k)[1]]
            return f"{np.mean(vs):.3f}" if vs else "–"

        eps = [v for r in rs for v in series(r.metrics, "group/epsilon")[1][:1]]
        md.append(f"| {m} | {np.median(eps):.2g} | " if eps else f"| {m} | – | ")
        md[-1] += (f"{mean('group/pace_frac_pace')} | {mean('group/pace_frac_fallback')} | "
                   f"{mean('group/pace_frac_singleton')} | {mean('adv/step_std')} | {mean('adv/total_std')} |")
    return "\n".join(md) + "\n"


def _by_iter(runs: list[Run], key: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for r in runs:
        for x, y in zip(*series(r.evals, key)):
            out.setdefault(x, []).append(y)
    return out
