"""The report's ground-truth section: runs on a finite world (``groundtruth.live``) log, every iteration, each
registered estimator's agreement with the exact advantage of the policy that sampled the batch
(``groundtruth/<estimator>/<metric>``), whichever estimator trained. This module reads those metrics from the run
folders (or their packed file) and writes the tables and curves of ``python -m experiments.report``.

Every estimator is scored on the same batches, so differences between estimators are paired: ``paired_table``
gives each estimator's difference from the baseline run by run (mean over the run's iterations), averaged over the
runs of each seed, with a bootstrap interval over seeds: the runs of one seed share the warm start and the first
batch, so they are not independent (``per_seed``). Runs are pooled by the epsilon their hidden-state estimators were
scored at (``epsilon_label``): the calibrated value of ``epsilon: auto`` differs between runs, a fixed epsilon does not.

Training curves without a separate evaluation (``eval.every: 0``) are read from the training rollouts:
``train_aggregate_table`` scores each run by its mean success over its last iterations (IQM, probability of
improvement over the baseline, stratified bootstrap), as the evaluation-based table does for evaluation splits.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from .plots import method_sort_key, plot_curves
from .runs import Run, first_epsilon, series
from .stats import aggregate_markdown, mean_ci

__all__ = ["TRUTH_METRICS", "STEP_METRICS", "truth_estimators", "epsilon_label", "run_mean", "truth_table",
           "paired_table",
           "truth_section", "train_aggregate_table", "overview", "per_seed"]

#: the per-estimator metrics of ``groundtruth.live.advantage_metrics``, in table order: of the whole advantage and
#: the state groups, then of the step term alone
TRUTH_METRICS = ("pearson", "spearman", "sign_agree", "zero_signal", "singleton", "pair_precision", "pair_recall")
STEP_METRICS = ("pearson_step", "spearman_step", "sign_agree_step", "zero_step")
_KEY = re.compile(r"^groundtruth/(?P<est>[^/]+)/(?P<metric>[^/]+)$")


def truth_estimators(runs: list[Run]) -> list[str]:
    """The estimators scored against the truth in any of ``runs`` (method order)."""
    names = {m["est"] for r in runs for row in r.metrics for k in row if (m := _KEY.match(k))}
    return sorted(names, key=method_sort_key)


def epsilon_label(run: Run) -> str:
    """``auto`` when the run calibrated its epsilon (``group/epsilon`` logged) by the default rule, ``auto-<rule>``
    by another (``estimator.epsilon_criterion`` in its config.yaml, e.g. ``auto-state_f1``), else the fixed
    ``<value>`` of its config.yaml (``?`` when there is none)."""
    est = {}
    cfg = run.read_text("config.yaml")
    if cfg is not None:
        import yaml

        est = (yaml.safe_load(cfg) or {}).get("estimator") or {}
    if any("group/epsilon" in row for row in run.metrics):
        rule = est.get("epsilon_criterion", "anchor_f1")
        return "auto" if rule == "anchor_f1" else f"auto-{rule}"
    eps = est.get("epsilon")
    if eps is None:
        return "?"
    return f"{float(eps):g}" if not isinstance(eps, str) else eps


def run_mean(run: Run, key: str) -> float | None:
    """Mean of ``key`` over the run's iterations (None when it never logged it)."""
    _, ys = series(run.metrics, key)
    return float(np.mean(ys)) if ys else None


def per_seed(runs: list[Run], value) -> list[float]:
    """``value(run)`` (None = no value) averaged over the runs of each seed: one number per seed. The runs of one
    seed share the warm start and the first batch (the same env seeds and sampling until the first update), so
    they are not independent; intervals are taken over seeds."""
    by_seed: dict[int, list[float]] = {}
    for r in runs:
        v = value(r)
        if v is not None:
            by_seed.setdefault(r.seed, []).append(float(v))
    return [float(np.mean(v)) for _, v in sorted(by_seed.items())]


def _paired_run(r: Run, e: str, baseline: str, metric: str) -> float | None:
    d = [row[f"groundtruth/{e}/{metric}"] - row[f"groundtruth/{baseline}/{metric}"] for row in r.metrics
         if _finite(row.get(f"groundtruth/{e}/{metric}")) and _finite(row.get(f"groundtruth/{baseline}/{metric}"))]
    return float(np.mean(d)) if d else None


def _ci(values: list[float], digits: int = 3) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    m, lo, hi = mean_ci(values)
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def truth_table(runs: list[Run], estimators: list[str], metrics: tuple[str, ...] = TRUTH_METRICS) -> str:
    """Rows = estimators, columns = ``metrics``: each run's mean over its iterations, averaged per seed, then the mean
    over seeds with a 95% bootstrap interval over seeds (``per_seed``); "" when no run logged any of them."""
    lines = ["| estimator | seeds | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    seen = False
    for e in estimators:
        cells, n = [], 0
        for metric in metrics:
            vals = per_seed(runs, lambda r, k=f"groundtruth/{e}/{metric}": run_mean(r, k))
            n = max(n, len(vals))
            cells.append(_ci(vals))
        seen |= n > 0
        lines.append(f"| {e} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if seen else ""


def paired_table(runs: list[Run], estimators: list[str], baseline: str = "gigpo",
                 metrics: tuple[str, ...] = ("pearson", "pearson_step", "sign_agree_step")) -> str:
    """Each estimator minus ``baseline`` on the same batches: per run, the mean over iterations of the per-batch
    difference, averaged per seed; then the mean over seeds with a 95% bootstrap interval, and the seeds where it
    is > 0."""
    head = ["| estimator | seeds | " + " | ".join(f"Δ{m} [95% CI] | seeds > 0" for m in metrics) + " |",
            "|---|---|" + "---|---|" * len(metrics)]
    lines = list(head)
    for e in estimators:
        if e == baseline:
            continue
        cells, n = [], 0
        for metric in metrics:
            per_run = per_seed(runs, lambda r, m=metric, e=e: _paired_run(r, e, baseline, m))
            n = max(n, len(per_run))
            cells += [_ci(per_run), f"{sum(v > 0 for v in per_run)}/{len(per_run)}" if per_run else "–"]
        lines.append(f"| {e} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > len(head) else ""


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def train_aggregate_table(by_method: dict[str, list[Run]], key: str = "rollout/success_rate", last: int = 5,
                          baseline: str = "gigpo") -> str:
    """IQM and mean of each run's mean ``key`` over its last ``last`` iterations (stratified bootstrap over runs),
    and the probability of improvement over ``baseline`` with its interval."""
    scores = {}
    for m, rs in by_method.items():
        vals = []
        for r in rs:
            _, ys = series(r.metrics, key)
            if ys:
                vals.append(float(np.mean(ys[-last:])))
        if vals:
            scores[m] = np.array(vals)[:, None]
    if not scores:
        return ""
    return aggregate_markdown(scores, baseline, method_sort_key)


def truth_section(by_method: dict[str, list[Run]], out: Path, tag: str, title: str,
                  baseline: str = "gigpo") -> tuple[list[str], list[str]]:
    """(Markdown lines of the report, lines of tables.md) for the runs that logged ``groundtruth/`` metrics;
    ([], []) when none did."""
    runs = [r for rs in by_method.values() for r in rs]
    ests = truth_estimators(runs)
    if not ests:
        return [], []
    md = ["### Agreement with the exact advantage (groundtruth/)", "",
          "Every iteration of every run scores all estimators on that run's batch against the exact advantage "
          "A^π(s, a) of the policy that sampled it (dynamic programming over the finite world, "
          "`groundtruth/live.py`), whichever estimator trained. Cells: each run's mean over its iterations, averaged "
          "over the runs of each seed, then the mean over seeds with a 95% bootstrap interval over seeds (a single "
          "seed: no interval; the runs of one seed share the warm start and the first batch). `sign_agree` is over "
          "rows whose true advantage is not 0; "
          "an estimator that gives a row 0 disagrees there. `singleton`, `pair_precision` and `pair_recall`: the "
          "estimator's state groups within a prompt group against the true state (`state_key`).", ""]
    tables: list[str] = []
    by_eps: dict[str, list[Run]] = {}
    for r in runs:
        by_eps.setdefault(epsilon_label(r), []).append(r)
    for label in sorted(by_eps, key=lambda s: (s != "auto", s)):
        rs = by_eps[label]
        eps_note = ("epsilon calibrated on each run's first batch (`epsilon: auto`)" if label == "auto"
                    else f"epsilon calibrated by the rule `{label[5:]}`" if label.startswith("auto-")
                    else f"epsilon = {label}")
        methods = sorted({r.method for r in rs}, key=method_sort_key)
        t = truth_table(rs, ests)
        ts = truth_table(rs, ests, STEP_METRICS)
        p = paired_table(rs, ests, baseline)
        md += [f"#### {len(rs)} runs with {eps_note} (trained: {', '.join(methods)})", "",
               "The whole advantage A = A^ep + w A^S, and each estimator's state groups:", "", t, ""]
        if ts:
            md += ["The step term A^S alone (what the state grouping changes; 0 for GRPO and RLOO, which have none):",
                   "", ts, ""]
        if p:
            md += [f"Paired differences from {baseline} on the same batches (per run: the mean over its iterations "
                   "of the per-batch difference):", "", p, ""]
        for metric in ("pearson", "pearson_step"):
            png = out / f"truth_{tag}_{metric}_eps-{label}.png"
            if plot_curves({e: rs for e in ests}, None, "metrics", f"{title}: {metric} vs the truth, eps {label}",
                           png, f"{metric} with A^pi", key_of=lambda e, m=metric: f"groundtruth/{e}/{m}",
                           thin=False):
                md += [f"![{metric} with the true advantage over training]({png.name})", ""]
        tables += [f"### groundtruth, {eps_note}", "", t, "", ts, "", p, ""]
    return md, tables


def _cell(values: list[float]) -> str:
    return _ci(values, 3) if values else "–"


def _first_scan(run: Run) -> tuple[float, float, tuple[float, float]] | None:
    """From the run's ``epsilon.json`` (the first batch's scan): (anchors' pair F1 against the true state, the chosen
    epsilon's, (the epsilon with the best F1, that F1)); None without a scan."""
    rec = run.read_json("epsilon.json")
    if rec is None:
        return None
    rows = rec.get("scan") or []
    anchors = [x for x in rows if x.get("epsilon") is None and "f1" in x]
    hidden = [x for x in rows if x.get("epsilon") is not None and _finite(x.get("f1"))]
    chosen = [x for x in hidden
              if math.isclose(float(x["epsilon"]), float(rec["epsilon"]), rel_tol=1e-9, abs_tol=1e-12)]
    if not anchors or not hidden or not chosen:
        return None
    best = max(hidden, key=lambda x: (x["f1"], -x["epsilon"]))
    return float(anchors[0]["f1"]), float(chosen[0]["f1"]), (float(best["epsilon"]), float(best["f1"]))


def overview(scenarios: dict[str, list[Run]], baseline: str = "gigpo") -> str:
    """Markdown tables across scenarios (intervals over seeds, ``per_seed``) (``{name: runs}``, e.g. one study folder
    each): per estimator, the whole advantage's Pearson correlation with the truth and its paired difference from
    ``baseline`` (the primary view: what the trainer uses), then the same for the step term alone (secondary), over the
    runs at ``epsilon: auto``; the state groups' singleton rate and pair recall; the epsilon the runs calibrated; and
    each trained method's training-rollout success over its last 5 iterations. Counts are per seed (the unit)."""
    names = list(scenarios)
    auto = {n: [r for r in rs if epsilon_label(r) == "auto"] for n, rs in scenarios.items()}
    ests = truth_estimators([r for rs in scenarios.values() for r in rs])
    head = "| estimator | " + " | ".join(names) + " |\n|---|" + "---|" * len(names)
    out = []

    def metric_table(metric: str) -> str:
        rows = [head]
        for e in ests:
            rows.append(f"| {e} | " + " | ".join(
                _cell(per_seed(auto[n], lambda r, k=f"groundtruth/{e}/{metric}": run_mean(r, k)))
                for n in names) + " |")
        return "\n".join(rows)

    def paired(metric: str) -> str:
        rows = [head]
        for e in ests:
            if e == baseline:
                continue
            cells = []
            for n in names:
                per_run = per_seed(auto[n], lambda r, e=e: _paired_run(r, e, baseline, metric))
                cells.append(f"{_cell(per_run)} (seeds > 0: {sum(v > 0 for v in per_run)}/{len(per_run)})"
                             if per_run else "–")
            rows.append(f"| {e} | " + " | ".join(cells) + " |")
        return "\n".join(rows)

    runs_line = ", ".join(f"{n}: {len(auto[n])} runs, {len({r.seed for r in auto[n]})} seeds" for n in names)
    out += [f"Runs at `epsilon: auto` per scenario: {runs_line}. Cells: each run's mean over its iterations, "
            "averaged over the runs of each seed, then the mean over seeds [95% bootstrap interval over seeds; none "
            "with one seed]. The runs of one seed share the warm start and the first batch, so they are not "
            "independent. Significance and corrections for many comparisons: `python -m experiments.reanalyse "
            "llm-groundtruth` (`reanalysis.md`).", "",
            "#### Primary: whole advantage A = A^ep + w A^S (what the trainer uses), Pearson correlation with the true "
            "advantage", "", metric_table("pearson"), "",
            f"#### Whole advantage: paired difference from {baseline} (same batches; the seeds where it is > 0)", "",
            paired("pearson"), "",
            "#### Secondary: step term A^S alone, Pearson correlation with the true advantage (HGPO has no episode "
            "term, GRPO and RLOO no step term)", "", metric_table("pearson_step"), "",
            f"#### Step term: paired difference from {baseline} (same batches; the seeds where it is > 0)", "",
            paired("pearson_step"), "",
            "#### State groups: singleton rate (within a prompt group)", "", metric_table("singleton"), "",
            "#### State groups: pair recall against the true state (pairs of same-state rows grouped together)", "",
            metric_table("pair_recall"), "",
            "#### State groups: pair precision against the true state", "", metric_table("pair_precision"), ""]
    eps = []
    for n in names:
        first = {r.seed: e for r in auto[n] if (e := first_epsilon(r)) is not None}
        vals = list(first.values())
        eps.append(f"{np.median(vals):.2g} ({min(vals):.2g}–{max(vals):.2g}, {len(vals)} seeds)" if vals else "–")
    scan_rows = {"anchors: F1 vs the true state": [], "the chosen epsilon: F1": [], "best epsilon in hindsight": [],
                 "its F1": []}
    for n in names:
        cols = {k: [] for k in scan_rows}
        seeds_seen: set[int] = set()
        for r in auto[n]:  # one run per seed: its runs share the first batch, hence the scan
            sc = _first_scan(r) if r.seed not in seeds_seen else None
            if sc is None:
                continue
            seeds_seen.add(r.seed)
            anchors, chosen, best = sc
            cols["anchors: F1 vs the true state"].append(anchors)
            cols["the chosen epsilon: F1"].append(chosen)
            cols["best epsilon in hindsight"].append(best[0])
            cols["its F1"].append(best[1])
        for k, v in cols.items():
            scan_rows[k].append("–" if not v else f"{np.median(v):.2g} ({min(v):.2g}–{max(v):.2g})"
                                 if k == "best epsilon in hindsight" else _cell(v))
    out += ["#### The epsilon `epsilon: auto` chose (median, range over runs), and the first batch's scan against the "
            "true state", "",
            "Pair F1 of the state groups on each run's first batch against `state_key` (`epsilon.json`): the exact "
            "anchors', the calibrated epsilon's, and the best over the scanned grid, which needs the true state and "
            "is not available outside these worlds.", "",
            "| | " + " | ".join(names) + " |\n|---|" + "---|" * len(names), "| epsilon | " + " | ".join(eps) + " |",
            *[f"| {k} | " + " | ".join(v) + " |" for k, v in scan_rows.items()], ""]
    methods = sorted({r.method for rs in scenarios.values() for r in rs}, key=method_sort_key)
    rows = ["| trained method | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for m in methods:
        cells = []
        for n in names:
            vals = [float(np.mean(ys[-5:])) for r in scenarios[n] if r.method == m
                    for _, ys in [series(r.metrics, "rollout/success_rate")] if ys]
            cells.append(f"{_cell(vals)} (n={len(vals)})" if vals else "–")
        rows.append(f"| {m} | " + " | ".join(cells) + " |")
    out += ["#### Training-rollout success over the last 5 iterations, per trained method", "", "\n".join(rows), ""]
    return "\n".join(out)
