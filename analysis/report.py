"""Build a study report from run folders: curves, the paper-style table, sample efficiency, aggregate
statistics (IQM, probability of improvement) and grouping diagnostics, as PNG + Markdown.

Scores. A run's score on an evaluation split is its success rate at the last evaluation (``final``) or
its best evaluation (``peak``, as in the paper's ablation table). The aggregate statistics use a
(runs x tasks) matrix whose tasks are the evaluation splits of one (env, model).
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from .plots import method_sort_key, plot_curves, plot_diagnostics, plot_intervals
from .runs import CONTROL_METHOD, PackedRunsError, Run, find_runs, series
from .stats import (
    aggregate_intervals,
    aggregate_markdown,
    interp_curves,
    steps_to_threshold,
    stratified_bootstrap_ci,
    within_slope_ci,
)
from .truth import train_aggregate_table, truth_section

__all__ = ["control_end_table", "goal_table", "build_report", "eval_keys", "run_scores", "control_table",
           "reference_table", "DEFAULT_THRESHOLDS", "CONTROL_METHOD"]

DEFAULT_THRESHOLDS = (0.2, 0.4, 0.6, 0.8)
_SPLIT_KEY = re.compile(r"^eval/(?P<env>[^/]+)/(?P<split>[^/]+)/success_rate$")
_FAMILY_KEY = re.compile(r"^eval/(?P<env>[^/]+)/(?P<split>[^/]+)/family/(?P<family>[^/]+)/success_rate$")


def eval_keys(runs: list[Run]) -> tuple[list[str], list[str]]:
    """(split keys, family keys) present in any run's evaluations, sorted."""
    splits, fams = set(), set()
    for r in runs:
        for row in r.evals:
            for k in row:
                if _SPLIT_KEY.match(k):
                    splits.add(k)
                elif _FAMILY_KEY.match(k):
                    fams.add(k)
    return sorted(splits), sorted(fams)


def run_scores(run: Run, key: str, mode: str = "final") -> float | None:
    xs, ys = series(run.evals, key)
    if not ys:
        return None
    return ys[-1] if mode == "final" else max(ys)


def _short(key: str) -> str:
    m = _SPLIT_KEY.match(key)
    if m:
        return m["split"]
    m = _FAMILY_KEY.match(key)
    return f"{m['split']}/{m['family']}" if m else key


def _fmt(mean: float, std: float) -> str:
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def score_table(by_method: dict[str, list[Run]], keys: list[str], mode: str) -> str:
    """Markdown table: rows = methods, columns = keys; mean ± std over seeds (percent), best in bold."""
    methods = sorted(by_method, key=method_sort_key)
    cells: dict[tuple[str, str], tuple[float, float, int]] = {}
    for m in methods:
        for k in keys:
            vals = [v for v in (run_scores(r, k, mode) for r in by_method[m]) if v is not None]
            if vals:
                cells[(m, k)] = (float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, len(vals))
    best = {k: max((cells[(m, k)][0] for m in methods if (m, k) in cells), default=None) for k in keys}
    lines = ["| method | seeds | " + " | ".join(_short(k) for k in keys) + " |", "|---|---|" + "---|" * len(keys)]
    for m in methods:
        n = max((cells[(m, k)][2] for k in keys if (m, k) in cells), default=0)
        row = []
        for k in keys:
            if (m, k) not in cells:
                row.append("–")
                continue
            mean, std, _ = cells[(m, k)]
            txt = _fmt(mean, std)
            row.append(f"**{txt}**" if best[k] is not None and abs(mean - best[k]) < 1e-12 else txt)
        lines.append(f"| {m} | {n} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def efficiency_table(by_method: dict[str, list[Run]], key: str, source: str, thresholds, baseline: str) -> str:
    """Iterations for the seed-mean curve to reach each threshold, and the speed-up over ``baseline``
    (baseline iterations / method iterations; > 1 means sooner)."""
    first: dict[str, dict[float, int | None]] = {}
    for m, runs in by_method.items():
        curves = [c for c in (series(getattr(r, source), key) for r in runs) if c[0]]
        if not curves:
            continue
        its, mat = interp_curves(curves)
        mean = mat.mean(axis=0) if its.size else np.array([])
        first[m] = {t: steps_to_threshold(its.tolist(), mean.tolist(), t) for t in thresholds}
    if not first:
        return ""
    lines = ["| method | " + " | ".join(f"≥ {100 * t:.0f}%" for t in thresholds) + " |",
             "|---|" + "---|" * len(thresholds)]
    for m in sorted(first, key=method_sort_key):
        row = []
        for t in thresholds:
            it = first[m][t]
            if it is None:
                row.append("never")
                continue
            base = first.get(baseline, {}).get(t)
            ratio = f" ({base / it:.2f}×)" if base and it and m != baseline else ""
            row.append(f"{it}{ratio}")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def score_matrices(by_method: dict[str, list[Run]], keys: list[str], mode: str) -> dict[str, np.ndarray]:
    """Per method, the (runs x splits) matrix of scores (runs missing a split are left out)."""
    mats = {}
    for m, runs in by_method.items():
        rows = []
        for r in runs:
            vals = [run_scores(r, k, mode) for k in keys]
            if all(v is not None for v in vals):
                rows.append(vals)
        if rows:
            mats[m] = np.array(rows)
    return mats


def aggregate_table(by_method: dict[str, list[Run]], keys: list[str], mode: str, baseline: str) -> str:
    """IQM and mean over the (runs x splits) matrix with stratified-bootstrap 95% CIs, and the probability
    of improvement over ``baseline`` with its CI."""
    mats = score_matrices(by_method, keys, mode)
    return aggregate_markdown(mats, baseline, method_sort_key) if mats else ""


def diagnostics_table(by_method: dict[str, list[Run]]) -> str:
    """Late-training grouping diagnostics (mean over the last 20% of iterations, then over seeds)."""
    keys = ["group/singleton_rate_anchor", "group/singleton_rate_cluster", "group/cluster_size_mean",
            "group/pace_frac_pace", "group/pace_frac_fallback", "group/pace_frac_singleton",
            "group/pace_multikey_cluster_frac", "group/pace_keys_per_cluster"]
    lines = ["| method | " + " | ".join(k.split("/")[1] for k in keys) + " |", "|---|" + "---|" * len(keys)]
    any_row = False
    for m in sorted(by_method, key=method_sort_key):
        row = []
        for k in keys:
            vals = []
            for r in by_method[m]:
                xs, ys = series(r.metrics, k)
                if ys:
                    tail = ys[int(0.8 * len(ys)):] or ys[-1:]
                    vals.append(float(np.mean(tail)))
            row.append(f"{np.mean(vals):.3f}" if vals else "–")
            any_row |= bool(vals)
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines) if any_row else ""


def control_table(by_method: dict[str, list[Run]], control: str = CONTROL_METHOD, key: str = "rollout/success_rate",
                  block: int = 4) -> str:
    """Training-rollout success of each method minus the no-update control of the same seed, iteration by iteration.

    The control plays the unchanged warm start on the goals its seed draws, which are the goals every method of that
    seed draws, so the difference removes the goal-to-goal spread that dominates a small batch. Columns: mean of the
    difference per block of ``block`` iterations (over seeds and the block's iterations, in points), then over all
    iterations with a 95% bootstrap interval that resamples iterations within each seed (the seeds are the strata).
    Only the iterations that every seed of a method has are used (a study still running has ragged seeds).
    The last column asks whether the gap has settled: the slope of the difference over the second half of those
    iterations, in points per ``block`` iterations, fitted with an intercept per seed, with a 95% interval that
    resamples iterations within each seed (``analysis.stats.within_slope_ci``); an interval around 0 means the
    difference no longer moves measurably. The control's own level is the first row. Empty string when there is
    no control or no other method with a control of the same seed."""
    ctrl, rows = _control_differences(by_method, control, key)
    if not rows:
        return ""
    # a rectangle per method: the iterations every one of its seeds has (seeds of a study still running differ)
    common = {m: sorted(set.intersection(*(set(d) for d in per_seed.values()))) for m, per_seed in rows.items()}
    level_its = sorted(set.intersection(*(set(d) for d in ctrl.values())))
    first = min(its[0] for its in common.values() if its)
    last = max(its[-1] for its in common.values() if its)
    blocks = [(lo, min(lo + block - 1, last)) for lo in range(first, last + 1, block)]

    def block_means(per_seed: dict[int, dict[int, float]], its: list[int]) -> list[str]:
        out = []
        for lo, hi in blocks:
            vals = [d[x] for d in per_seed.values() for x in its if lo <= x <= hi]
            out.append(f"{100 * np.mean(vals):+.1f}" if vals else "–")
        return out

    lines = ["| method | seeds | " + " | ".join(f"it {lo}-{hi}" for lo, hi in blocks)
             + f" | all [95% CI] | trend, 2nd half (pts / {block} its) [95% CI] |",
             "|---|---|" + "---|" * (len(blocks) + 2)]
    its = [x for x in level_its if first <= x <= last]
    lv = [ctrl[s][x] for s in ctrl for x in its]
    lines.append(f"| {control} (level, %) | {len(ctrl)} | "
                 + " | ".join(b.lstrip("+") for b in block_means(ctrl, its)) + f" | {100 * np.mean(lv):.1f} | – |")
    for m in sorted(rows, key=method_sort_key):
        per_seed, its = rows[m], common[m]
        if not its:
            continue
        mat = np.array([[d[x] for x in its] for d in per_seed.values()]).T  # (iterations x seeds)
        mean, lo, hi = stratified_bootstrap_ci(mat, lambda a: float(a.mean()))
        half = len(its) // 2
        slope = [round(100 * block * v, 1) + 0.0 for v in within_slope_ci(its[half:], mat[half:])]  # no "-0.0"
        trend = "–" if not np.isfinite(slope[0]) else f"{slope[0]:+.1f} [{slope[1]:+.1f}, {slope[2]:+.1f}]"
        lines.append(f"| {m} | {len(per_seed)} | " + " | ".join(block_means(per_seed, its))
                     + f" | {100 * mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | {trend} |")
    return "\n".join(lines)


def control_end_table(by_method: dict[str, list[Run]], control: str = CONTROL_METHOD,
                      key: str = "rollout/success_rate", last: int = 4, margin: float = 0.25) -> str:
    """Where each run ends against the control of its seed: mean training-rollout success over the last ``last``
    iterations both have, the control's over the same iterations, the difference in points, and whether it is at
    least ``margin`` (the learning study's bar). One row per method and seed, then the mean over seeds."""
    ctrl, rows = _control_differences(by_method, control, key)
    if not rows:
        return ""
    lines = [f"| method | seed | iterations | success, last {last} (%) | {control} (%) | difference (pts) | "
             f">= {100 * margin:.0f} pts |", "|---|---|---|---|---|---|---|"]
    for m in sorted(rows, key=method_sort_key):
        diffs = []
        for seed in sorted(rows[m]):
            its = sorted(rows[m][seed])[-last:]
            d = [rows[m][seed][x] for x in its]
            c = [ctrl[seed][x] for x in its]
            diff = float(np.mean(d))
            diffs.append(diff)
            lines.append(f"| {m} | {seed} | {its[0]}-{its[-1]} | {100 * (np.mean(c) + diff):.1f} | "
                         f"{100 * np.mean(c):.1f} | {100 * diff:+.1f} | {'yes' if diff >= margin - 1e-9 else 'no'} |")
        lines.append(f"| **{m}** | mean of {len(diffs)} | | | | **{100 * np.mean(diffs):+.1f}** | "
                     f"{sum(d >= margin - 1e-9 for d in diffs)} of {len(diffs)} |")
    return "\n".join(lines)


_TASK_KEY = re.compile(r"^rollout/task/(\d+)/success_rate$")


def goal_table(by_method: dict[str, list[Run]], last: int = 8) -> str:
    """Success per training goal (``rollout/task/<index>/success_rate``, logged for a training pool), one row per
    method and seed: the mean over the last ``last`` iterations that logged the goal, in %, then the iterations
    read. Shows which goal a run learned when the pooled success rate hides it. Empty string when no run logged
    a goal."""
    goals = sorted({int(m.group(1)) for runs in by_method.values() for r in runs for row in r.metrics
                    for k in row if (m := _TASK_KEY.match(k))})
    if not goals:
        return ""
    lines = ["| method | seed | " + " | ".join(f"goal {g}" for g in goals) + " | iterations |",
             "|---|---|" + "---|" * (len(goals) + 1)]
    for m in sorted(by_method, key=lambda x: (x != CONTROL_METHOD, method_sort_key(x))):
        for r in sorted(by_method[m], key=lambda r: r.seed):
            cells, spans = [], []
            for g in goals:
                xs, ys = series(r.metrics, f"rollout/task/{g}/success_rate")
                xs, ys = xs[-last:], ys[-last:]
                cells.append(f"{100 * np.mean(ys):.0f}" if ys else "–")
                spans += xs
            span = f"{min(spans)}-{max(spans)}" if spans else "–"
            lines.append(f"| {m} | {r.seed} | " + " | ".join(cells) + f" | {span} |")
    return "\n".join(lines)


def _control_differences(by_method: dict[str, list[Run]], control: str, key: str):
    """(control's ``key`` per seed {iteration: value}, {method: {seed: {iteration: value - control's}}}) over the
    iterations both have; runs without a control of their seed are left out."""
    ctrl = {r.seed: dict(zip(*series(r.metrics, key))) for r in by_method.get(control, [])}
    rows: dict[str, dict[int, dict[int, float]]] = {}
    for m, runs in by_method.items():
        if m == control:
            continue
        for r in runs:
            c = ctrl.get(r.seed, {})
            d = {x: y - c[x] for x, y in zip(*series(r.metrics, key)) if x in c}
            if d:
                rows.setdefault(m, {})[r.seed] = d
    return ctrl, rows


def control_difference_runs(by_method: dict[str, list[Run]], control: str = CONTROL_METHOD,
                            key: str = "rollout/success_rate") -> dict[str, list[Run]]:
    """Each non-control run as a run whose only metric ``vs_control`` is its ``key`` minus the control of its seed at
    the same iteration (for the difference curves); methods without a control of any seed are left out."""
    _, rows = _control_differences(by_method, control, key)
    first = {(r.method, r.seed): r for runs in by_method.values() for r in runs}
    return {m: [Run(first[(m, seed)].env, first[(m, seed)].model, m, seed, first[(m, seed)].path,
                    metrics=[{"iteration": x, "vs_control": v} for x, v in sorted(d.items())])
                for seed, d in per_seed.items()]
            for m, per_seed in rows.items()}


def _mean_first(run: Run, key: str, n: int) -> float | None:
    """Mean of ``key`` over the first ``n`` metrics rows that have it."""
    ys = series(run.metrics, key)[1][:n]
    return sum(ys) / len(ys) if ys else None


def reference_table(yours: list[Run], reference: list[Run], tol: float = 1e-9) -> str:
    """Markdown table of each of ``yours`` beside the run of the same (env, model, method, seed) in ``reference``
    (a committed study): final evaluation success per split and mean training-rollout success over the
    iterations both have, in %; the last column says whether every number is equal (CPU runs with one seed are
    deterministic, so a difference means another machine's arithmetic, another warm start or other code).
    Empty string when no run has a counterpart."""
    ref = {(r.env, r.model, r.method, r.seed): r for r in reference}
    pairs = [(y, ref[(y.env, y.model, y.method, y.seed)]) for y in yours if (y.env, y.model, y.method, y.seed) in ref]
    if not pairs:
        return ""
    splits, _ = eval_keys([r for pair in pairs for r in pair])
    head = ["method", "seed", "iterations (yours / ref.)", "training success, mean"] + [_short(k) for k in splits]
    lines = ["| " + " | ".join(head + ["equal?"]) + " |", "|" + "---|" * (len(head) + 1)]

    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}"

    for y, r in pairs:
        key = "rollout/success_rate"
        n = min(len(series(y.metrics, key)[1]), len(series(r.metrics, key)[1]))
        vals = [(_mean_first(y, key, n), _mean_first(r, key, n))]
        vals += [(run_scores(y, k), run_scores(r, k)) for k in splits]
        its = tuple(int(run.metrics[-1].get("iteration", 0)) if run.metrics else 0 for run in (y, r))
        equal = its[0] == its[1] and all(a is not None and b is not None and abs(a - b) <= tol for a, b in vals)
        cells = [y.method, str(y.seed), f"{its[0]} / {its[1]}"] + [f"{pct(a)} / {pct(b)}" for a, b in vals]
        lines.append("| " + " | ".join(cells + ["yes" if equal else "no"]) + " |")
    return "\n".join(lines)


def build_report(runs: list[Run], out: Path, title: str, thresholds=DEFAULT_THRESHOLDS, baseline: str = "gigpo",
                 command: str = "") -> Path:
    """Write PNGs and ``summary.md`` (plus ``tables.md``) under ``out``; returns the summary path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not runs:
        raise ValueError("no runs to report: check --runs and the filters")
    groups: dict[tuple[str, str], dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        groups[(r.env, r.model)][r.method].append(r)
    md = [f"# {title}", ""]
    if command:
        md += [f"Made by `{command}`.", ""]
    md += ["Curves: thin lines are seeds, bold lines the mean over seeds, shaded bands a 95% bootstrap interval of",
           "the mean. Table cells: success rate in %, mean ± std over seeds at the final evaluation (peak below);",
           "best in bold.", ""]
    tables = []
    for (env, model), by_method in sorted(groups.items()):
        tag = f"{env}_{model}".replace("/", "_")
        md += [f"## {env} / {model}", ""]
        split_keys, fam_keys = eval_keys([r for rs in by_method.values() for r in rs])
        # curves: train success, then each evaluation split
        png = out / f"curves_{tag}_train.png"
        if plot_curves(by_method, "rollout/success_rate", "metrics", f"{env} / {model}: training rollouts", png,
                       "success rate"):
            md += [f"![training success]({png.name})", ""]
        for k in split_keys:
            split = _short(k)
            # an evaluation split named "train" (training goals, fresh seeds) must not overwrite the rollout curve
            png = out / f"curves_{tag}_{'eval_train' if split == 'train' else split}.png"
            if plot_curves(by_method, k, "evals", f"{env} / {model}: evaluation on {split}", png, "success rate"):
                md += [f"![{split}]({png.name})", ""]
        if split_keys:
            t_final = score_table(by_method, split_keys + fam_keys, "final")
            t_peak = score_table(by_method, split_keys, "peak")
            md += ["### Success rate (final evaluation)", "", t_final, "", "### Peak success rate", "", t_peak, ""]
            mats = score_matrices(by_method, split_keys, "final")
            intervals = aggregate_intervals(mats, baseline, method_sort_key)
            agg = aggregate_markdown(mats, baseline, intervals=intervals) if mats else ""
            if agg:
                md += ["### Aggregate over evaluation splits (stratified bootstrap)", ""]
                png = out / f"intervals_{tag}.png"
                if plot_intervals(intervals, f"{env} / {model}: final evaluation over {len(split_keys)} split(s)",
                                  png, "a run's success at its last evaluation on one split"):
                    md += [f"![IQM and mean with 95% intervals]({png.name})", ""]
                md += [agg, ""]
            eff = efficiency_table(by_method, split_keys[0], "evals", thresholds, baseline)
            if eff:
                md += [f"### Sample efficiency: iterations to reach a success threshold ({_short(split_keys[0])}, "
                       f"seed-mean curve; speed-up over {baseline} in brackets)", "", eff, ""]
            tables += [f"## {env} / {model}", "", t_final, "", t_peak, "", agg, "", eff, ""]
        ctl = control_table(by_method)
        if ctl:
            png = out / f"curves_{tag}_train_vs_control.png"
            plotted = plot_curves(control_difference_runs(by_method), "vs_control", "metrics",
                                  f"{env} / {model}: training rollouts minus {CONTROL_METHOD}", png,
                                  "success rate difference")
            md += ["### Training rollouts against the no-update control (points of success rate)", "",
                   *([f"![training success minus the control]({png.name})", ""] if plotted else []),
                   f"Each method's training-rollout success minus that of `{CONTROL_METHOD}` (the warm start, never "
                   "updated) on the same seed's goal draws, per block of iterations; `all`: over every iteration, "
                   "95% bootstrap interval resampling iterations within each seed; `trend`: slope of the "
                   "difference over the second half of the iterations (points per block, an intercept per seed, "
                   "same resampling) — an interval around 0 says the gap has stopped moving. The first row is the "
                   "control's own success rate.", "", ctl, ""]
            end = control_end_table(by_method)
            md += ["### Where each run ends against its control", "",
                   "Mean training-rollout success over each run's last 4 iterations, beside the no-update control of "
                   "the same seed over the same iterations (the same goal draws and env seeds).", "", end, ""]
            tables += [ctl, "", end, ""]
        goals = goal_table(by_method)
        if goals:
            md += ["### Success per training goal", "",
                   "Training-rollout success on each goal of the pool (`rollout/task/<index>/success_rate`), mean over "
                   "the last 8 iterations that played it, in %.", "", goals, ""]
            tables += [goals, ""]
        if not split_keys:  # no evaluation: the training rollouts are the curves and the scores
            png = out / f"curves_{tag}_return.png"
            if plot_curves(by_method, "rollout/return_mean", "metrics", f"{env} / {model}: training rollouts", png,
                           "episode return (undiscounted)"):
                md += [f"![training return]({png.name})", ""]
            agg_train = train_aggregate_table(by_method, baseline=baseline)
            if agg_train:
                md += ["### Aggregate over training rollouts (stratified bootstrap)", "",
                       "Each run's score: its mean training-rollout success over its last 5 iterations.", "",
                       agg_train, ""]
                tables += [agg_train, ""]
        truth_md, truth_tables = truth_section(by_method, out, tag, f"{env} / {model}", baseline)
        md += truth_md
        tables += truth_tables
        eff_train = efficiency_table(by_method, "rollout/success_rate", "metrics", thresholds, baseline)
        if eff_train:
            md += ["### Sample efficiency on training rollouts", "", eff_train, ""]
        png = out / f"diagnostics_{tag}.png"
        if plot_diagnostics(by_method, f"{env} / {model}: state groupings over training", png):
            md += [f"![diagnostics]({png.name})", ""]
        diag = diagnostics_table(by_method)
        if diag:
            md += ["### Grouping diagnostics (last 20% of training)", "", diag, ""]
            tables += [diag, ""]
    (out / "tables.md").write_text("\n".join(tables) + "\n")
    summary = out / "summary.md"
    summary.write_text("\n".join(md) + "\n")
    return summary


MADE_BY = re.compile(r"Made by `(python -m experiments\.report [^`]*)`")


def made_by(folder: Path) -> list[str] | None:
    """The ``experiments.report`` arguments a study's ``summary.md`` names in its "Made by" line (None if it has
    none: a summary written by another command)."""
    import shlex

    summary = Path(folder) / "summary.md"
    m = MADE_BY.search(summary.read_text()) if summary.is_file() else None
    return shlex.split(m[1])[3:] if m else None


def rebuild(folders) -> int:
    """Rewrite each study folder's report with the command its summary names, from the repository root (the paths
    in those commands are relative to it); a figure of the folder that the new report did not write is removed, so
    one it no longer draws does not linger."""
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    for folder in folders:
        rel = Path(os.path.relpath(Path(folder).resolve(), root))
        argv = made_by(root / rel)
        if argv is None:
            print(f"error: {rel}/summary.md has no 'Made by `python -m experiments.report ...`' line to rebuild "
                  "from", file=sys.stderr)
            return 2
        if Path(argv[argv.index("--out") + 1]) != rel:
            print(f"error: {rel}/summary.md was written to another folder ({argv[argv.index('--out') + 1]})",
                  file=sys.stderr)
            return 2
        cwd = os.getcwd()
        os.chdir(root)
        try:
            old = {p: p.stat().st_mtime_ns for p in rel.glob("*.png")}
            code = main(argv)
            if code == 0:  # a figure this report no longer draws (not rewritten just now) goes
                for png, mtime in old.items():
                    if png.is_file() and png.stat().st_mtime_ns == mtime:
                        png.unlink()
        finally:
            os.chdir(cwd)
        if code:
            return code
    return 0


def main(argv=None) -> int:
    """``python -m experiments.report``: write a study report from run folders (see that module)."""
    import argparse
    import shlex
    import sys

    ap = argparse.ArgumentParser(prog="python -m experiments.report",
                                 description="Write a study report (curves, tables, sample efficiency, IQM / "
                                             "probability of improvement, diagnostics) from run folders.")
    ap.add_argument("--runs", default="results/runs",
                    help="root of the run folders (searched recursively), a study's packed runs.jsonl.xz, or a "
                         "study's runs path whose packed file stands in for it")
    ap.add_argument("--out", help="study folder to write, e.g. results/cpu-study")
    ap.add_argument("--rebuild", nargs="+", metavar="STUDY", default=None,
                    help="rewrite these study folders' reports (and figures) with the command each summary.md names "
                         "in its 'Made by' line, run from the repository root; e.g. after a change to the report")
    ap.add_argument("--title", default=None)
    ap.add_argument("--env", default=None, help="only runs of this environment")
    ap.add_argument("--model", default=None, help="only runs of this model")
    ap.add_argument("--methods", default=None, help="comma-separated method folders to include")
    ap.add_argument("--baseline", default="gigpo", help="method the speed-ups and P(improvement) compare against")
    ap.add_argument("--thresholds", default=",".join(str(t) for t in DEFAULT_THRESHOLDS))
    args = ap.parse_args(argv)
    if args.rebuild:
        return rebuild(args.rebuild)
    if not args.out:
        ap.error("--out is required (or --rebuild STUDY...)")
    try:
        runs = find_runs(args.runs)
    except (FileNotFoundError, PackedRunsError) as e:
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
    cmd = "python -m experiments.report " + " ".join(shlex.quote(a)
                                                     for a in (argv if argv is not None else sys.argv[1:]))
    summary = build_report(runs, args.out, args.title or f"Study: {args.out}", thresholds, args.baseline, cmd)
    print(f"{len(runs)} runs -> {summary}")
    return 0
