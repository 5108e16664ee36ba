"""Headline claims of the committed studies, re-derived from their data with seeds as the independent unit
(``python -m experiments.reanalyse <study>`` writes ``results/<study>/reanalysis.md``).

Conventions shared by every study here:

* **Unit.** Every study runs all its seeds from one warm start (``docs/protocol.md``, "Seeds and intervals"), so a
  seed is one draw of the RL sampling, and seeds are the independent unit. Intervals are 95% percentile intervals of
  a two-level bootstrap (``analysis.stats.hierarchical_bootstrap_ci``): seeds with replacement, then the seed's
  observations (iterations, or the run-iterations of its runs) with replacement; where a seed has one value and the
  seeds are few (``halves-textcraft``'s held-out table, 5 seeds), the Student-t interval over the per-seed values
  (``analysis.stats.t_ci``). Counts are per seed ("k/10 seeds").
* **Tests and corrections.** A paired per-seed difference is tested against 0 by exact sign flipping
  (``analysis.stats.sign_flip_p``; with n seeds the smallest possible p is 2 / 2^n: 0.25 with 3 seeds, 0.002 with
  10). A family of comparisons (the rows of one table against its baseline) is corrected with Holm's step-down
  method (``analysis.stats.holm``); the family and its size are named beside each table.
* **Primary metric.** Where a study scores advantages, the primary metric is the whole advantage the trainer uses;
  the step term alone is a labelled secondary view.

Runs are read only through ``analysis.runs.find_runs``; non-run data (the estimator benchmark's CSV tables, the
epsilon study's table) from the study folder's committed files.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from common.tables import read_csv

from .gate import gate_report
from .plots import method_sort_key
from .runs import CONTROL_METHOD, Run, find_runs, first_epsilon, packed_file, series
from .stats import format_ci as _ci
from .stats import hierarchical_bootstrap_ci, holm, poi_ci, probability_of_improvement, sign_flip_p, t_ci
from .truth import epsilon_label, truth_estimators

__all__ = ["STUDIES", "reanalyse", "llm_groundtruth", "halves", "halves_heldout", "heldout_rows", "control_study",
           "estimator_bench", "epsilon_rules", "leave_one_batch_out", "parse_f1_table", "fisher_exact_p"]

LLM_SCENARIOS = ("exact", "oversplit", "undersplit")


def _p(p: float) -> str:
    return "–" if not np.isfinite(p) else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def fisher_exact_p(a_success: int, a_n: int, b_success: int, b_n: int) -> float:
    """Two-sided Fisher exact p for two success counts (``scipy.stats.fisher_exact``)."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a_success, a_n - a_success], [b_success, b_n - b_success]]).pvalue)


# --------------------------------------------------------------------------------------------------------------------
# llm-groundtruth: every estimator scored against the exact advantage on the same batches


def _seed_obs(runs: list[Run], value) -> dict[int, list[float]]:
    """{seed: [value(run, row) for every run of the seed and every metrics row where it is finite]}."""
    out: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        for row in r.metrics:
            v = value(row)
            if _finite(v):
                out[r.seed].append(float(v))
    return dict(sorted(out.items()))


def _diff(e: str, base: str, metric: str, fill: str = ""):
    pre = f"groundtruth/{fill}/" if fill else "groundtruth/"

    def f(row):
        a, b = row.get(f"{pre}{e}/{metric}"), row.get(f"{pre}{base}/{metric}")
        return a - b if _finite(a) and _finite(b) else None
    return f


def truth_rows(runs: list[Run], metric: str, baseline: str = "gigpo", fill: str = "") -> list[dict]:
    """Per scored estimator: its mean ``metric`` (hierarchical CI over seeds, then the seed's run-iterations), and the
    paired difference from ``baseline`` on the same batches: mean [CI], seeds above 0, sign-flip p over the per-seed
    means, Holm-adjusted over the estimators of this list (the family: every estimator against ``baseline``).
    ``fill``: score against that other truth of the same rows (``visited_only``: ``groundtruth/visited_only/...``)."""
    pre = f"groundtruth/{fill}/" if fill else "groundtruth/"
    rows = []
    for e in truth_estimators(runs):
        lvl = _seed_obs(runs, lambda row, k=f"{pre}{e}/{metric}": row.get(k))
        if not lvl:
            continue
        row = {"estimator": e, "seeds": len(lvl), "level": hierarchical_bootstrap_ci(list(lvl.values()))}
        if e != baseline:
            d = _seed_obs(runs, _diff(e, baseline, metric, fill))
            means = [float(np.mean(v)) for v in d.values()]
            row.update(diff=hierarchical_bootstrap_ci(list(d.values())), above=sum(m > 0 for m in means),
                       n=len(means), p=sign_flip_p(means), per_seed=means)
        rows.append(row)
    tested = [r for r in rows if "p" in r]
    for r, a in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = a
    return rows


def _truth_md(rows: list[dict], title: str, baseline: str) -> list[str]:
    k = sum("p" in r for r in rows)
    out = [title, "",
           f"| estimator | seeds | mean [95% CI] | − {baseline} [95% CI] | seeds > 0 | sign-flip p "
           f"| Holm p (k = {k}) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "p" in r:
            out.append(f"| {r['estimator']} | {r['seeds']} | {_ci(r['level'], signed=False)} | {_ci(r['diff'])} | "
                       f"{r['above']}/{r['n']} | {_p(r['p'])} | {_p(r['p_holm'])} |")
        else:
            out.append(f"| {r['estimator']} | {r['seeds']} | {_ci(r['level'], signed=False)} | – | – | – | – |")
    return out + [""]


def training_rows(runs: list[Run], baseline: str = "gigpo", last: int = 5) -> list[dict]:
    """Per trained method: each run's mean training-rollout success over its last ``last`` iterations (one run per
    seed), P(method > ``baseline``) with the stratified bootstrap interval over runs (= seeds), the paired per-seed
    difference, and the two-sided Mann-Whitney p of the same comparison (the test whose statistic is P x m n)."""
    from scipy.stats import mannwhitneyu

    score: dict[str, dict[int, float]] = defaultdict(dict)
    for r in runs:
        _, ys = series(r.metrics, "rollout/success_rate")
        if ys:
            score[r.method][r.seed] = float(np.mean(ys[-last:]))
    if baseline not in score:
        return []
    b = score[baseline]
    out = []
    for m in sorted(score, key=method_sort_key):
        if m == baseline:
            continue
        x = np.array(list(score[m].values()))
        y = np.array(list(b.values()))
        poi = poi_ci(x, y)
        paired = [score[m][s] - b[s] for s in sorted(score[m]) if s in b]
        out.append({"method": m, "n": len(x), "poi": poi,
                    "p": float(mannwhitneyu(x, y, alternative="two-sided").pvalue),
                    "paired_above": sum(d > 0 for d in paired), "paired_n": len(paired),
                    "iqm_gap": float(np.mean(paired)) if paired else float("nan"), "paired": paired})
    return out


def llm_groundtruth(root: Path, baseline: str = "gigpo") -> str:
    """The three scenarios: the whole advantage (primary) and the step term (secondary) against the truth, paired
    against ``baseline``, Holm over each table's estimators; training success P(> baseline), Holm over each
    scenario's methods and over all scenarios together."""
    root = Path(root)
    md = ["Primary metric: the Pearson correlation of the **whole advantage** A = A^ep + A^S (what the trainer "
          "multiplies the log-probability gradient by) with the exact advantage A^π of the batch's policy. The step "
          "term A^S alone is a secondary view: HGPO has no episode term (its whole advantage is its history-level "
          "term), and GRPO and RLOO have no step term, so step-term rankings do not compare what the methods train "
          "with.", "",
          "Runs at `epsilon: auto` (the 7 estimators, one trained per run; each run scores every estimator on its "
          "batches). Per seed: the mean over its 7 runs × 15 iterations; intervals: hierarchical bootstrap over "
          "seeds, then the seed's run-iterations. `seeds > 0`: seeds whose mean paired difference is above 0. "
          "Sign-flip p over the per-seed means; Holm over the estimators of each table against GiGPO.", ""]
    train_all = []
    for sc in LLM_SCENARIOS:
        folder = root / sc / "runs"
        if not (folder.is_dir() or packed_file(folder) is not None):
            continue
        runs = find_runs(folder)
        auto = [r for r in runs if epsilon_label(r) == "auto"]
        md += [f"## {sc}: {len(auto)} runs at `epsilon: auto`, {len({r.seed for r in auto})} seeds", ""]
        md += _truth_md(truth_rows(auto, "pearson", baseline),
                        f"### {sc}, primary: whole advantage, Pearson with A^π", baseline)
        md += _truth_md(truth_rows(auto, "pearson_step", baseline),
                        f"### {sc}, secondary: step term A^S alone, Pearson with A^π", baseline)
        if any(r["estimator"] == "hgpo" for r in truth_rows(auto[:1], "pearson", baseline)):
            vs = [r for r in truth_rows(auto, "pearson", "hgpo") if r["estimator"].startswith("bipace_q")]
            for r, a in zip(vs, holm([r["p"] for r in vs])):
                r["p_holm"] = a
            md += _truth_md(vs, f"### {sc}, primary: BiPACE_Q against HGPO (whole advantage; Holm over these "
                                f"{len(vs)})", "hgpo")
        tr = training_rows(runs, baseline)
        for r in tr:
            r["scenario"] = sc
        train_all += tr
    if train_all:
        for r, a in zip(train_all, holm([r["p"] for r in train_all])):
            r["p_holm_all"] = a
        by_sc = defaultdict(list)
        for r in train_all:
            by_sc[r["scenario"]].append(r)
        for rs in by_sc.values():
            for r, a in zip(rs, holm([r["p"] for r in rs])):
                r["p_holm"] = a
        k_all = len(train_all)
        md += ["## Training success against GiGPO (every trained method, all scenarios)", "",
               "Score per run: mean training-rollout success over its last 5 iterations; one run per method and "
               "seed, so runs = seeds. P(method > GiGPO): stratified bootstrap over runs. p: two-sided Mann-Whitney "
               f"(the test of P = 0.5). Holm within the scenario's table and over all {k_all} comparisons.", "",
               "| scenario | method | seeds | P(> gigpo) [95% CI] | seeds above gigpo (paired) | p | Holm p (table) | "
               f"Holm p (all {k_all}) |", "|---|---|---|---|---|---|---|---|"]
        for r in train_all:
            md.append(f"| {r['scenario']} | {r['method']} | {r['n']} | {_ci(r['poi'], 2, signed=False)} | "
                      f"{r['paired_above']}/{r['paired_n']} | {_p(r['p'])} | {_p(r['p_holm'])} | "
                      f"{_p(r['p_holm_all'])} |")
        md.append("")
    return "\n".join(md)


# --------------------------------------------------------------------------------------------------------------------
# The halves of BiPACE where the anchors over-split (llm-gt-halves)

HALVES = ("gigpo", "bigpo", "pace_anchor", "bipace_q", "bipace_q-cluster_std")
_HALF_OF = {"gigpo": "neither (the baseline)", "bigpo": "state half only", "pace_anchor": "action half only",
            "bipace_q": "both", "bipace_q-cluster_std": "both, step term scaled by the cluster's std"}


def _trained_estimator(method: str) -> str:
    return method.split("-")[0]


def _is_variant(method: str) -> bool:
    return method != _trained_estimator(method)


def _own_key(run: Run, metric: str) -> str:
    """The metric key of ``run``'s trained arm: ``groundtruth/<method>/<metric>`` where the probe scored a variant
    under its own name (``groundtruth.live.arm_configs``), else ``groundtruth/<estimator>/<metric>``. Runs logged
    before 2026-12-06 scored every estimator with the run's own settings, so there a variant's reading is its
    estimator's key."""
    own = f"groundtruth/{run.method}/{metric}"
    if _is_variant(run.method) and any(own in row for row in run.metrics):
        return own
    return f"groundtruth/{_trained_estimator(run.method)}/{metric}"


def _variant_rows(runs: list[Run], variants: list[str], metric: str, baseline: str) -> list[dict]:
    """Per variant arm: its own advantage on its own runs' batches, paired with ``baseline`` scored on the same
    batches (a row of ``truth_rows``' form)."""
    rows = []
    for v in variants:
        vr = [r for r in runs if r.method == v]
        lvl = {r.seed: [] for r in vr}
        d = {r.seed: [] for r in vr}
        for r in vr:
            key, base = _own_key(r, metric), f"groundtruth/{baseline}/{metric}"
            for row in r.metrics:
                if _finite(row.get(key)):
                    lvl[r.seed].append(float(row[key]))
                    if _finite(row.get(base)):
                        d[r.seed].append(float(row[key]) - float(row[base]))
        lvl = {s: x for s, x in sorted(lvl.items()) if x}
        d = {s: x for s, x in sorted(d.items()) if x}
        if not lvl:
            continue
        row = {"estimator": v, "seeds": len(lvl), "level": hierarchical_bootstrap_ci(list(lvl.values()))}
        if d:
            means = [float(np.mean(x)) for x in d.values()]
            row.update(diff=hierarchical_bootstrap_ci(list(d.values())), above=sum(m > 0 for m in means),
                       n=len(means), p=sign_flip_p(means), per_seed=means)
        rows.append(row)
    return rows


def _same_batch_rows(runs: list[Run], metric: str, baseline: str) -> list[dict]:
    """Table 1's rows: each registered half on the plain arms' batches, then each variant arm on its own runs'
    batches, every one against ``baseline`` on the same batches; Holm over all of them."""
    plain = [r for r in runs if not _is_variant(r.method)]
    variants = sorted({r.method for r in runs if _is_variant(r.method)}, key=HALVES.index)
    rows = [r for r in truth_rows(plain, metric, baseline) if r["estimator"] in HALVES]
    rows += _variant_rows(runs, variants, metric, baseline)
    tested = [r for r in rows if "p" in r]
    for r, a in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = a
    return rows


def _load_runs(folder: Path) -> list[Run]:
    """The runs under ``folder`` (its run folders or its packed file), none where neither exists."""
    return find_runs(folder) if folder.is_dir() or packed_file(folder) is not None else []


def halves(root: Path, baseline: str = "gigpo", reruns: list[Path] | None = None) -> str:
    """GiGPO, its state half (bigpo), its action half (pace_anchor), both (bipace_q) and both with ``cluster_std``:
    (1) every registered half scored on the same batches (the plain arms' runs; a variant arm on its own runs'),
    (2) each arm's own advantage on its own runs, (3) training success, (4) the PACE branch mix and the step term's
    scale, and what that scale does to the update, (5) the every-cell truth against the uniform fill. Against GiGPO,
    Holm within each table. Where the plain arms were run again with HGPO's published rule (``reruns``, default
    ``root/hgpo/runs`` and ``llm-gt-rescored/hgpo/oversplit/runs`` beside ``root``), (6) ``hgpo_halves_md``."""
    root = Path(root)
    runs = [r for r in find_runs(root / "runs") if r.method in HALVES]
    if not runs:
        return "No runs yet.\n"
    seeds = sorted({r.seed for r in runs})
    arms = [m for m in HALVES if any(r.method == m for r in runs)]
    plain = [r for r in runs if not _is_variant(r.method)]
    variants = [m for m in arms if _is_variant(m)]
    md = [f"{len(runs)} runs ({', '.join(f'{m}: {sum(r.method == m for r in runs)}' for m in arms)}), seeds "
          f"{seeds[0]}–{seeds[-1]} ({len(seeds)}). Primary metric: Pearson correlation of the whole advantage with "
          "the exact A^π of the batch's policy. Per seed: the mean over its runs × iterations; intervals: "
          "hierarchical bootstrap over seeds, then the seed's observations. Sign-flip p over the per-seed means, "
          "Holm over the table's comparisons with GiGPO.", ""]
    vnote = (f" {', '.join(f'`{v}`' for v in variants)}: the variant scored on its own {len(runs) - len(plain)} "
             "runs' batches, against GiGPO on the same batches. A variant's runs are left out of the other rows: "
             "runs logged before 2026-12-06 scored every estimator with the run's own settings, so their `bipace_q` "
             "and `pace_anchor` readings are the variant's, not the plain arms' (`groundtruth/live.py`, "
             "`arm_configs`)." if variants else "")
    md += _truth_md(_same_batch_rows(runs, "pearson", baseline),
                    f"### 1. Same batches: each half scored on the {len(plain)} runs of the plain arms (whole "
                    f"advantage, Pearson with A^π).{vnote}", baseline)
    md += _truth_md(_same_batch_rows(runs, "pearson_step", baseline),
                    "### 1b. Same batches, secondary: the step term alone (the rows as in table 1)", baseline)
    # 2. each arm's own estimator on its own runs
    md += _truth_md(_own_rows(runs, arms, "pearson", baseline),
                    "### 2. Own runs: each arm's trained advantage on its own batches (whole advantage, "
                    "Pearson with A^π; the difference column gives the mean of the per-seed differences "
                    "[smallest, largest seed])", baseline)
    md += _truth_md(_own_rows(runs, arms, "pearson_step", baseline),
                    "### 2b. Own runs, secondary: the step term alone (added after the first 22 runs, to tell the "
                    "cluster_std arm's grouping from its scale: a Pearson does not change when a whole term is "
                    "rescaled, but the whole advantage's does when the step term's share of it changes; the difference "
                    "column as in table 2)", baseline)
    # 3. training success
    md += _training_md(runs, baseline, "### 3. Training success against GiGPO")
    md += _branch_mix_md(runs, arms, "### 4. Branch mix and scale (mean over runs × iterations)")
    md += _update_md(runs, arms, "### 4b. What the scale does to the update (descriptive, added on 2026-12-06; not "
                                 "one of the tests above)")
    md += truth_correction_md(plain, baseline, f"### 5. What the every-cell truth changed on these batches "
                                               f"(descriptive, added after the first 22 runs; not one of the tests "
                                               f"above; the {len(plain)} runs of the plain arms, as in table 1)")
    if reruns is None:
        reruns = [root / "hgpo" / "runs", root.parent / "llm-gt-rescored" / "hgpo" / "oversplit" / "runs"]
    again = [r for folder in reruns for r in _load_runs(Path(folder)) if r.method in HALVES]
    if again:
        md += hgpo_halves_md(runs, again, baseline)
    return "\n".join(md)


# The estimators whose formula reads ``pace_norm`` (``estimators/algorithms.py``): a ``cluster_std`` run logged
# before 2026-12-06 scored them with the variant's setting, today's code scores them plain (``_own_key``)
_PACE_NORM_READERS = ("bipace_q", "bipace_v", "pace_anchor")


def _rescore_check(o: list[Run], n: list[Run], arm: str) -> dict:
    """``same_batch_check`` of arm ``arm``'s committed runs ``o`` against their re-runs ``n``; a variant arm whose
    committed runs scored it under its estimator's name and whose re-runs under its own (``_own_key``) is compared
    by those two names, its estimator's siblings left out (they read the variant's setting in one code only)."""
    renamed = (_is_variant(arm) and o and n and _own_key(o[0], "pearson") != _own_key(n[0], "pearson"))
    if not renamed:
        return same_batch_check(o, n)
    return same_batch_check(o, n, changed=_PACE_NORM_READERS, own=(_trained_estimator(arm), arm))


def _rule_rows(pairs_old: list[Run], pairs_new: list[Run], baseline: str, title: str) -> tuple[list[str], str]:
    """HGPO's rows under each rule on the paired runs (``pairs_old`` scored with ``start_marker``, ``pairs_new`` the
    same batches with ``verl_agent``): Pearson with both truths, whole advantage and step term, the gaps to
    ``baseline``, and HGPO's rank (whole advantage, every-cell truth) among the other estimators' committed values;
    then the verdict of the plan's tests (``results/llm-gt-halves/README.md``)."""
    names = _correction_names(pairs_old)

    def point(runs: list[Run], e: str) -> float | None:
        obs = _seed_obs(runs, lambda row: row.get(f"groundtruth/{e}/pearson"))
        return float(np.mean([np.mean(v) for v in obs.values()])) if obs else None

    others = {e: point(pairs_old, e) for e in names if e != "hgpo"}
    others = {e: v for e, v in others.items() if v is not None}

    def rank(runs: list[Run]) -> int:
        h = point(runs, "hgpo")
        return 0 if h is None else 1 + sum(v > h for v in others.values())

    rules = {"start_marker": pairs_old, "verl_agent": pairs_new}
    cis = {(rule, metric): _correction_cis(runs, "hgpo", metric, baseline)
           for rule, runs in rules.items() for metric in ("pearson", "pearson_step")}
    ranks = {rule: rank(runs) for rule, runs in rules.items()}
    md = [f"{title} ({len(pairs_new)} runs, {len({r.seed for r in pairs_new})} seeds; Pearson with the every-cell "
          f"truth (`new`) and the uniform fill (`old`), the gaps to {baseline} on the same batch; rank: among the "
          "other estimators' committed values, whole advantage, `new`):", "",
          f"| HGPO rule | term | new | old | − {baseline}, new | − {baseline}, old | rank |",
          "|---|---|---|---|---|---|---|"]
    for rule in rules:
        for metric, term in (("pearson", "whole advantage"), ("pearson_step", "step term")):
            c = cis[(rule, metric)]
            md.append(f"| {rule} | {term} | {_ci_or_dash(c['new'], False)} | {_ci_or_dash(c['old'], False)} | "
                      f"{_ci_or_dash(c['gap new'])} | {_ci_or_dash(c['gap old'])} | "
                      f"{f'{ranks[rule]} of {len(others) + 1}' if metric == 'pearson' else '–'} |")
    why = []
    for metric, term in (("pearson", "whole advantage"), ("pearson_step", "step term")):
        for gap, truth in (("gap new", "every-cell"), ("gap old", "uniform-fill")):
            x, y = cis[("start_marker", metric)][gap], cis[("verl_agent", metric)][gap]
            if x is not None and y is not None and _excludes_zero(x) != _excludes_zero(y):
                why.append(f"the {term}'s gap to {baseline} under the {truth} truth moves across 0")
    if abs(ranks["start_marker"] - ranks["verl_agent"]) > 1:
        why.append("HGPO's rank moves by more than one place")
    return md + [""], (f"**The reading changes**: {'; '.join(why)}." if why else
                       "**No reading changes** (each gap's interval against 0, the rank within one place).")


def hgpo_halves_md(old: list[Run], new: list[Run], baseline: str = "gigpo") -> list[str]:
    """HGPO under two rules on the same batches: ``old`` the study's committed runs (``estimator.hgpo_rule:
    start_marker``), ``new`` their re-runs with ``verl_agent`` (matched by arm and seed). Per arm the same-batch
    check (``_rescore_check``) and the paired change of HGPO's Pearson with the every-cell truth; then HGPO's rows of
    table 5 (the plain arms' runs) under each rule, and, where the study has a variant arm, its rows over every run
    (``summary.md``'s pooling), each with the plan's verdict (``_rule_rows``). A pooling is read only when each of
    its committed runs was re-run on the same batches."""
    arms = [m for m in HALVES if any(r.method == m for r in old)]
    md = ["### 6. HGPO's rule on these batches (added 2026-12-06; the plan: README, \"HGPO's rule on the other "
          "arms\" and \"HGPO on the `cluster_std` arm's batches\")", "",
          "Each arm's runs again with `estimator.hgpo_rule: verl_agent` (HGPO's published code) as the one change; "
          "the committed runs scored HGPO with `start_marker`. Same batches: every non-HGPO `groundtruth/` value "
          "equal within 1e-9 (on a variant arm whose committed runs scored it under its estimator's name, that name "
          "against the variant's, its estimator's siblings left out: README). HGPO's change: its Pearson with the "
          "every-cell truth, verl_agent − start_marker on the same run-iteration (hierarchical bootstrap over seeds, "
          "then iterations).", "",
          "| arm | runs again | non-HGPO values equal | largest difference | HGPO differs in | "
          "HGPO's change [95% CI] |",
          "|---|---|---|---|---|---|"]
    ready, differ, running = {}, [], []  # arm -> every committed run re-run on the same batches; arms whose batches
    # differ; arms whose re-runs are still under way
    for m in arms:
        o = [r for r in old if r.method == m]
        n = [r for r in new if r.method == m]
        if not n:
            ready[m] = False
            md.append(f"| {m} | 0 of {len(o)} | – | – | – | – |")
            continue
        chk = _rescore_check(o, n, m)
        ok = chk["same"]
        ready[m] = ok and {r.seed for r in o} <= {r.seed for r in n}
        change, moved, k, largest = _paired_change(o, n, "groundtruth/hgpo/pearson")
        why = "" if ok else f" ({chk['unrun']} iterations not run yet)" if chk["unfinished"] else (
            f" ({chk['mismatch']})")
        md.append(f"| {m} | {len(n)} of {len(o)} | {chk['equal']:,} of {chk['values']:,}{why} | "
                  f"{chk['max_diff']:.1e} | {moved} of {k} run-iterations (largest {largest:.4f}) | {_ci(change, 4)} |")
        differ += [] if ok or chk["unfinished"] else [m]
        running += [m] if chk["unfinished"] else []
    md.append("")
    if running and not differ:
        return md + [f"**The re-runs are not finished** in the {', '.join(running)} arm"
                     f"{'s' if len(running) > 1 else ''} (every value logged so far equal): no reading is stated "
                     "until they complete.", ""]
    if differ:
        return md + [f"**Not the same batches** in the {', '.join(differ)} arm{'s' if len(differ) > 1 else ''}: the "
                     "re-runs are a new sample, not a re-scoring, and no change of rule is read from them.", ""]
    # the re-runs paired in the committed runs' order, so that the start_marker rows reproduce table 5's intervals
    order = {(r.method, r.seed): i for i, r in enumerate(old)}
    plain = [m for m in arms if not _is_variant(m)]
    poolings = [("HGPO's rows of table 5 under each rule", plain)]
    if len(plain) < len(arms):
        poolings.append((f"HGPO's rows over every run of the study, as `summary.md` pools them ({', '.join(arms)})",
                         arms))
    for title, members in poolings:
        pairs_new = sorted((r for r in new if r.method in members and (r.method, r.seed) in order),
                           key=lambda r: order[(r.method, r.seed)])
        keep = {(x.method, x.seed) for x in pairs_new}
        pairs_old = [r for r in old if (r.method, r.seed) in keep]
        rows, verdict = _rule_rows(pairs_old, pairs_new, baseline, title)
        md += rows
        n_old = sum(r.method in members for r in old)
        md += [verdict if all(ready[m] for m in members) else
               f"Not every committed run was run again ({len(pairs_new)} of {n_old}): no reading is stated.", ""]
    return md


def _correction_names(runs: list[Run]) -> list[str]:
    """The estimators scored against both truths (``groundtruth/visited_only/<e>/...``) in ``runs``."""
    return sorted({k.split("/")[2] for r in runs for row in r.metrics for k in row
                   if k.startswith("groundtruth/visited_only/") and k.count("/") == 3})


def _correction_cis(runs: list[Run], e: str, metric: str, baseline: str) -> dict[str, tuple | None]:
    """Estimator ``e``'s cells of ``truth_correction_md``'s table: its ``metric`` against the every-cell truth
    (``new``) and the uniform fill (``old``), their difference, and its gap to ``baseline`` under each truth, each a
    hierarchical bootstrap (point, low, high) over seeds, then the seed's run-iterations (None: nothing logged; the
    gaps are None for ``baseline`` itself)."""
    new, old = f"groundtruth/{e}/{metric}", f"groundtruth/visited_only/{e}/{metric}"

    def diff(a: str, b: str):
        return lambda row: (row[a] - row[b]) if _finite(row.get(a)) and _finite(row.get(b)) else None

    out = {"new": _obs_ci(runs, lambda row: row.get(new)), "old": _obs_ci(runs, lambda row: row.get(old)),
           "new - old": _obs_ci(runs, diff(new, old)), "gap new": None, "gap old": None}
    if e != baseline:
        out["gap new"] = _obs_ci(runs, diff(new, f"groundtruth/{baseline}/{metric}"))
        out["gap old"] = _obs_ci(runs, diff(old, f"groundtruth/visited_only/{baseline}/{metric}"))
    return out


def _obs_ci(runs: list[Run], key_fn) -> tuple | None:
    """Hierarchical bootstrap (point, low, high) of ``key_fn(row)`` over seeds, then each seed's run-iterations;
    None where no row gives a finite value."""
    obs = _seed_obs(runs, key_fn)
    return hierarchical_bootstrap_ci(list(obs.values())) if obs else None


def _ci_or_dash(c: tuple | None, signed: bool = True, digits: int = 3) -> str:
    return _ci(c, digits, signed=signed) if c is not None else "–"


def truth_correction_md(runs: list[Run], baseline: str, title: str) -> list[str]:
    """Every estimator scored on the same batches against the every-cell truth and against the truth whose unvisited
    cells take a uniform policy (``groundtruth/visited_only/*``: what ``llm-groundtruth`` was scored against), the
    gap to ``baseline`` under each (whole advantage, then the step term), the ceiling and the two truths' agreement.
    Intervals: hierarchical bootstrap over seeds, then the seed's run-iterations."""
    names = _correction_names(runs)
    if not names:
        return []

    def ci(key_fn, signed: bool = True, digits: int = 3) -> str:
        return _ci_or_dash(_obs_ci(runs, key_fn), signed, digits)

    def get(k: str):
        return lambda row: row.get(k)

    md = [title, "",
          "`new`: the truth of this study (the LM scored in every reachable cell); `old`: the same batches against the "
          "truth with a uniform policy in the cells the batch did not visit, the fill `llm-groundtruth` was scored "
          "with (both columns share the env's parser and the run's γ and λ, the other corrections: this isolates the "
          f"fill). Pearson with each truth; the gap columns are the estimator minus {baseline} on the same batch.",
          ""]
    for metric, what in (("pearson", "whole advantage"), ("pearson_step", "step term alone")):
        md += [f"**{what.capitalize()}**", "",
               f"| estimator | new | old | new − old | − {baseline}, new | − {baseline}, old |",
               "|---|---|---|---|---|---|"]
        for e in names:
            c = _correction_cis(runs, e, metric, baseline)
            md.append(f"| {e} | {_ci_or_dash(c['new'], False)} | {_ci_or_dash(c['old'], False)} | "
                      f"{_ci_or_dash(c['new - old'])} | {_ci_or_dash(c['gap new'])} | {_ci_or_dash(c['gap old'])} |")
        md.append("")
    md += ["The two truths' Pearson on the rows (`groundtruth/visited_only_pearson`): "
           f"{ci(get('groundtruth/visited_only_pearson'), False)}; the mean total-variation distance between the "
           "canonical-prompt policy and the rows' own in the visited cells (`groundtruth/canonical_tv`): "
           f"{ci(get('groundtruth/canonical_tv'), False)}; the truth against the truth with the canonical-prompt "
           "policy in every cell, the visited ones included (`groundtruth/canonical_pearson`): "
           f"{ci(get('groundtruth/canonical_pearson'), False)}; the cells whose policy came from the batch's own rows "
           f"(`groundtruth/visited_cells`): {ci(get('groundtruth/visited_cells'), False, 0)} of "
           f"{ci(get('groundtruth/reachable_cells'), False, 0)} reachable (every other one takes the canonical "
           "prompt's). The ceiling, exact Q normalised inside (prompt group, true "
           "state) groups as GiGPO's step term is (`groundtruth/ceiling/pearson_step`): "
           f"{ci(get('groundtruth/ceiling/pearson_step'), False)}; exact Q itself (`groundtruth/ceiling/pearson_q`): "
           f"{ci(get('groundtruth/ceiling/pearson_q'), False)}.", ""]
    return md


def rescored(root: Path, baseline: str = "gigpo", committed: Path | None = None, halves: Path | None = None) -> str:
    """``llm-groundtruth``'s same-batch readings against the every-cell truth: per scenario, every
    estimator on the batches of GiGPO-trained runs, beside the committed study's figures (all its runs, and its
    GiGPO-trained runs alone), then the fill isolated on the new batches (``truth_correction_md``). ``root``:
    ``results/llm-gt-rescored`` (scenarios ``exact``, ``undersplit``); the over-split scenario comes from
    ``halves``' GiGPO runs (default: ``results/llm-gt-halves`` beside ``root``). Where ``root/hgpo/<scenario>`` holds
    those runs again with HGPO's published rule, each scenario adds ``hgpo_rule_md``; where
    ``root/hgpo-trained/<scenario>`` holds HGPO-trained runs, ``hgpo_trained_md``, and over those scenarios
    ``hgpo_trained_training_md``."""
    root = Path(root)
    committed = Path(committed) if committed is not None else root.parent / "llm-groundtruth"
    halves = Path(halves) if halves is not None else root.parent / "llm-gt-halves"
    sources = {"exact": root / "exact" / "runs", "oversplit": halves / "runs",
               "undersplit": root / "undersplit" / "runs"}

    md = ["Training does not read the truth, and every run scores every registered estimator on its own batches, so "
          "the same-batch readings of `llm-groundtruth` need one trained arm per seed: here GiGPO, with the committed "
          "study's warm starts, seeds and ε rule (`anchor_f1`); the over-split scenario reuses `llm-gt-halves`' GiGPO "
          "runs, whose ε rule is `return_loo` (it changes the rows of the estimators scored at the run's ε, marked †, "
          "not GiGPO's training). Whole advantage, Pearson with A^π; per seed the mean over its run's iterations; "
          "intervals: hierarchical bootstrap over seeds; sign-flip p over the per-seed means, Holm over each table's "
          "estimators against GiGPO, as in the committed re-analysis.", ""]
    arms: dict[str, tuple[list[Run], list[Run]]] = {}
    for sc, folder in sources.items():
        new = [r for r in _load_runs(folder) if r.method == baseline]
        if not new:
            md += [f"## {sc}: no runs yet", ""]
            continue
        old_all = [r for r in _load_runs(committed / sc / "runs") if epsilon_label(r) == "auto"]
        old_gigpo = [r for r in old_all if r.method == baseline]
        rows = truth_rows(new, "pearson", baseline)
        ref_all = {r["estimator"]: r for r in truth_rows(old_all, "pearson", baseline)} if old_all else {}
        ref_g = {r["estimator"]: r for r in truth_rows(old_gigpo, "pearson", baseline)} if old_gigpo else {}
        k = sum("p" in r for r in rows)
        md += [f"## {sc}: {len(new)} GiGPO runs, {len({r.seed for r in new})} seeds", "",
               f"| estimator | committed, all runs: − {baseline} | committed, {baseline} runs: mean, − {baseline} | "
               f"rescored: mean [95% CI] | rescored: − {baseline} [95% CI] | seeds > 0 | Holm p (k = {k}) |",
               "|---|---|---|---|---|---|---|"]
        for r in rows:
            e = r["estimator"]
            mark = " †" if sc == "oversplit" and "@" not in e and e in ("bigpo", "bipace_v", "bipace_q") else ""
            a, g = ref_all.get(e), ref_g.get(e)
            a_txt = f"{a['diff'][0]:+.3f}" if a and "diff" in a else "–"
            g_txt = (f"{g['level'][0]:.3f}, " + (f"{g['diff'][0]:+.3f}" if "diff" in g else "–")) if g else "–"
            if "p" in r:
                tail = f"{_ci(r['diff'])} | {r['above']}/{r['n']} | {_p(r['p_holm'])} |"
            else:
                tail = "– | – | – |"
            md.append(f"| {e}{mark} | {a_txt} | {g_txt} | {_ci(r['level'], signed=False)} | {tail}")
        md.append("")
        md += truth_correction_md(new, baseline, f"### {sc}: the fill isolated on these batches")
        rerun = [r for r in _load_runs(root / "hgpo" / sc / "runs") if r.method == baseline]
        if rerun:
            md += hgpo_rule_md(new, rerun, sc, baseline)
        trained = [r for r in _load_runs(root / "hgpo-trained" / sc / "runs") if r.method == "hgpo"]
        if trained:
            md += hgpo_trained_md(new, trained, sc, baseline)
            arms[sc] = (new, trained)
    if arms:
        md += hgpo_trained_training_md(arms, baseline)
    return "\n".join(md)


#: metrics a re-run may change without its batches changing (wall times)
_TIMING_KEYS = ("groundtruth/cell_seconds",)


def _by_iteration(run: Run) -> dict:
    """{iteration: metrics row} of a run."""
    return {row.get("iteration"): row for row in run.metrics}


def _batch_values(row: dict, skip: str, changed: tuple[str, ...], own: str | None) -> dict:
    """The ``groundtruth/...`` values of ``row`` that ``same_batch_check`` compares, by a name both codes share:
    none that names ``skip`` (any segment starting with it) or a wall time; none that names an estimator in
    ``changed`` (``name`` or ``name@...``), except that the segment ``own``, where given, is renamed ``<own>``."""
    out = {}
    for k, v in row.items():
        if not k.startswith("groundtruth/") or k in _TIMING_KEYS:
            continue
        parts = k.split("/")
        if any(p.startswith(skip) for p in parts[1:]):
            continue
        if own is not None and own in parts:
            parts = ["<own>" if p == own else p for p in parts]
        elif any(p.split("@")[0] in changed for p in parts[1:]):
            continue
        out["/".join(parts)] = v
    return out


def same_batch_check(old: list[Run], new: list[Run], skip: str = "hgpo", tol: float = 1e-9,
                     changed: tuple[str, ...] = (), own: tuple[str, str] | None = None,
                     digits: int | None = None) -> dict:
    """Whether ``new`` (a re-run of ``old``'s runs, one per seed) holds the same batches: every ``groundtruth/...``
    metric whose name does not contain ``/<skip>`` (nor a wall time), at every iteration of every seed, equal to the
    old run's within ``tol`` (with ``digits``: or within one unit of the last of that many significant digits, the
    precision a run logs with ``logging.jsonl_digits``). Where the two codes score some estimators differently (a
    variant's runs logged before 2026-12-06 scored ``changed`` with the variant's settings, today's code scores them
    plain and the variant under its own name): ``changed``'s values are left out on both sides, and ``own`` ``(old
    name, new name)`` compares the old runs' values under the first name with the new runs' under the second.
    Returns ``{"seeds", "values", "equal", "max_diff", "missing", "unrun", "mismatch", "same", "unfinished"}``:
    ``missing`` counts the values one side lacks (an iteration or a key), ``unrun`` the old runs' iterations the new
    ones have not logged yet, ``mismatch`` names the first value off (by the new run's name), ``same`` is the verdict
    (some values compared, every one equal, none on one side only), ``unfinished`` a re-run still under way: every
    value it has equal, and all that it lacks whole iterations at the end of a run or runs not started."""
    own_old, own_new = own if own is not None else (None, None)
    by_seed = {r.seed: r for r in old}
    out = {"seeds": 0, "values": 0, "equal": 0, "max_diff": 0.0, "missing": 0, "unrun": 0, "mismatch": None}
    tail_only = True  # every value the new runs lack is in an iteration past their last one
    for r in sorted(new, key=lambda r: r.seed):
        o = by_seed.get(r.seed)
        if o is None:
            out["missing"] += 1
            out["mismatch"] = out["mismatch"] or f"seed {r.seed}: no committed run"
            continue
        out["seeds"] += 1
        rows_o, rows_n = _by_iteration(o), _by_iteration(r)
        last = max((it for it in rows_n if isinstance(it, int)), default=0)
        out["unrun"] += sum(isinstance(it, int) and it > last for it in rows_o)
        for it in sorted(set(rows_o) | set(rows_n), key=lambda x: (x is None, x)):
            a = _batch_values(rows_o.get(it, {}), skip, changed, own_old)
            b = _batch_values(rows_n.get(it, {}), skip, changed, own_new)
            for k in sorted(set(a) | set(b)):
                name = k.replace("<own>", own_new) if own_new else k
                if k not in a or k not in b:
                    out["missing"] += 1
                    tail_only &= k in a and isinstance(it, int) and it > last
                    out["mismatch"] = out["mismatch"] or f"seed {r.seed}, iteration {it}: {name} on one side only"
                    continue
                out["values"] += 1
                x, y = float(a[k]), float(b[k])
                d = abs(x - y) if (math.isfinite(x) and math.isfinite(y)) else (0.0 if x == y else math.inf)
                out["max_diff"] = max(out["max_diff"], d)
                top = max(abs(x), abs(y))
                unit = (10.0 ** (math.floor(math.log10(top)) - (digits - 1)) * (1 + 1e-6)
                        if digits and math.isfinite(top) and top > 0 else 0.0)
                if d <= max(tol, unit):
                    out["equal"] += 1
                elif out["mismatch"] is None:
                    out["mismatch"] = f"seed {r.seed}, iteration {it}: {name} {x!r} vs {y!r}"
    out["same"] = out["missing"] == 0 and out["equal"] == out["values"] > 0
    out["unfinished"] = (not out["same"] and out["unrun"] > 0 and tail_only and out["equal"] == out["values"])
    return out


def _unfinished(chk: dict) -> str:
    """The sentence for a re-run still under way (``same_batch_check``'s ``unfinished``)."""
    return (f"**The re-run is not finished** ({chk['unrun']} of the committed runs' iterations not run yet; every "
            f"value it has logged, {chk['equal']:,}, equal): no reading is stated until it completes.")


def _paired_change(old: list[Run], new: list[Run], key: str) -> tuple[tuple, int, int, float]:
    """``key`` in ``new`` minus ``old`` on the same run-iterations (runs paired by seed, rows by iteration):
    (hierarchical bootstrap (point, low, high) over seeds, then the seed's iterations; how many differ by more than
    1e-9; how many pairs; the largest absolute difference)."""
    old_by = {r.seed: _by_iteration(r) for r in old}
    d: dict[int, list[float]] = defaultdict(list)
    for r in new:
        for row in r.metrics:
            o = old_by.get(r.seed, {}).get(row.get("iteration"), {})
            if _finite(row.get(key)) and _finite(o.get(key)):
                d[r.seed].append(float(row[key]) - float(o[key]))
    flat = [abs(x) for v in d.values() for x in v]
    return (hierarchical_bootstrap_ci(list(d.values())), sum(x > 1e-9 for x in flat), len(flat),
            max(flat, default=0.0))


def _excludes_zero(ci) -> int:
    """1 if the interval (point, low, high) lies above 0, -1 if below, 0 if it holds 0."""
    return 1 if ci[1] > 0 else (-1 if ci[2] < 0 else 0)


def hgpo_rule_md(old: list[Run], new: list[Run], scenario: str, baseline: str = "gigpo",
                 metric: str = "pearson") -> list[str]:
    """HGPO under two rules on the same batches: ``old`` the committed runs (``estimator.hgpo_rule: start_marker``),
    ``new`` their re-runs with ``verl_agent`` (``configs/studies/llm-gt-hgpo-*.yaml``). First the check that the
    batches are the same (``same_batch_check``), then HGPO's level, its gap to ``baseline`` under each rule (each in
    its own Holm family of the table's estimators), the paired per-seed change, and HGPO's rank among the table's
    rows. A changed reading, as the plan in ``results/llm-gt-rescored/README.md`` defines it, is flagged."""
    chk = same_batch_check(old, new)
    same = chk["same"]
    md = [f"### {scenario}: HGPO's rule", "",
          f"Same batches: {chk['equal']:,} of {chk['values']:,} non-HGPO `groundtruth/` values over {chk['seeds']} "
          f"seeds equal within 1e-9 (largest difference {chk['max_diff']:.1e}; values on one side only: "
          f"{chk['missing']}).", ""]
    if chk["unfinished"]:
        return md + [_unfinished(chk), ""]
    if not same:
        return md + [f"**Not the same batches** ({chk['mismatch']}): the rows below are a new sample, not a "
                     "re-scoring, and no change of rule is read from them.", ""]
    rules = {"start_marker": truth_rows(old, metric, baseline), "verl_agent": truth_rows(new, metric, baseline)}

    def rank(rows: list[dict]) -> int:
        order = sorted(rows, key=lambda r: -r["level"][0])
        return 1 + [r["estimator"] for r in order].index("hgpo")

    def rule_row(rows: list[dict]) -> dict:
        return next(r for r in rows if r["estimator"] == "hgpo")

    k = sum("p" in r for r in rules["verl_agent"])
    md += [f"| HGPO rule | mean [95% CI] | − {baseline} [95% CI] | seeds > 0 | Holm p (k = {k}) | rank |",
           "|---|---|---|---|---|---|"]
    for name, rows in rules.items():
        r = rule_row(rows)
        md.append(f"| {name} | {_ci(r['level'], signed=False)} | {_ci(r['diff'])} | {r['above']}/{r['n']} | "
                  f"{_p(r['p_holm'])} | {rank(rows)} of {len(rows)} |")
    a, b = rule_row(rules["start_marker"]), rule_row(rules["verl_agent"])
    change, moved, n, largest = _paired_change(old, new, f"groundtruth/hgpo/{metric}")
    why = []
    if _excludes_zero(a["diff"]) != _excludes_zero(b["diff"]):
        why.append("HGPO − GiGPO's interval moves across 0")
    if (a["p_holm"] < 0.05) != (b["p_holm"] < 0.05):
        why.append("its Holm p crosses 0.05")
    if abs(rank(rules["start_marker"]) - rank(rules["verl_agent"])) > 1:
        why.append("its rank moves by more than one place")
    md += ["", f"HGPO's {metric} differs between the rules in {moved} of {n} run-iterations (largest "
           f"{largest:.4f}); paired change (verl_agent − start_marker, per seed then iteration): "
           f"{_ci(change, 4)}. "
           + (f"**The reading changes**: {'; '.join(why)}." if why else
              "**No reading changes** (interval against 0, Holm p against 0.05, rank within one place)."), ""]
    return md


def _first_batches(runs: list[Run]) -> list[Run]:
    """``runs`` with their first iteration's metrics alone (the batch drawn before any update)."""
    import dataclasses

    return [dataclasses.replace(r, metrics=[row for row in r.metrics if row.get("iteration") == 1]) for r in runs]


#: first-batch values that depend on the model's weights only through the sampled tokens (float rounding of the
#: weights leaves them equal unless a sample changes); ``rollout/logprob_abs_diff`` is a float of the weights
_SAMPLED_SKIP = ("rollout/logprob_abs_diff",)


def sampled_batch_check(old: list[Run], new: list[Run]) -> dict:
    """Whether ``new``'s first batches sampled what ``old``'s did, seed by seed: every ``rollout/`` value (success,
    lengths, token counts, returns; not the log-prob difference, a float of the weights) and
    ``groundtruth/visited_cells`` at iteration 1 exactly equal, over the names both runs log (a metric one code
    version adds is not a sample). ``{"seeds", "values", "equal", "mismatch"}``."""
    a = {r.seed: r for r in _first_batches(old)}
    b = {r.seed: r for r in _first_batches(new)}
    out = {"seeds": 0, "values": 0, "equal": 0, "mismatch": None}
    for seed in sorted(set(a) & set(b)):
        ra, rb = (a[seed].metrics or [{}])[0], (b[seed].metrics or [{}])[0]
        keys = sorted(k for k in set(ra) & set(rb) if (k.startswith("rollout/") and k not in _SAMPLED_SKIP)
                      or k == "groundtruth/visited_cells")
        if not keys:
            continue
        out["seeds"] += 1
        for k in keys:
            out["values"] += 1
            if ra[k] == rb[k]:
                out["equal"] += 1
            elif out["mismatch"] is None:
                out["mismatch"] = f"seed {seed}: {k} {ra[k]} vs {rb[k]}"
    return out


def hgpo_trained_md(gigpo: list[Run], trained: list[Run], scenario: str, baseline: str = "gigpo",
                    metric: str = "pearson") -> list[str]:
    """HGPO as the trained arm (``configs/studies/llm-gt-hgpo-trained-*.yaml``; ``trained``, made with the published
    rule and scoring HGPO under both, ``groundtruth/hgpo`` and ``groundtruth/hgpo@start_marker``) beside the
    scenario's ``baseline``-trained runs (``gigpo``, one per seed, same warm start). The check: each seed's first
    batch, drawn before any update, is the same in both arms. Reading 1: on HGPO's own batches, HGPO's level and its
    gap to ``baseline`` under each rule, each rule in its own Holm family (every other estimator the runs score) and
    its rank there, the paired per-seed change, against the every-cell truth and the uniform fill. A changed reading,
    as the plan in ``results/llm-gt-rescored/README.md`` ("HGPO as the trained arm") defines it, is flagged. Reading
    2 (training success) is read over the scenarios together: ``hgpo_trained_training_md``."""
    first = same_batch_check(_first_batches(gigpo), _first_batches(trained))
    logged = same_batch_check(_first_batches(gigpo), _first_batches(trained), digits=5)
    sampled = sampled_batch_check(gigpo, trained)
    every_seed = sampled["seeds"] == len({r.seed for r in trained})  # every HGPO seed has its GiGPO first batch
    if every_seed and not logged["missing"] and sampled["values"] and sampled["equal"] == sampled["values"]:
        off = (f"; the sampled batches are the same ({sampled['equal']:,} of {sampled['values']:,} `rollout/` values "
               f"and visited-cell counts over {sampled['seeds']} seeds equal, the log-prob difference aside): the "
               f"scores differ by float rounding of the warm start ({logged['mismatch']}).")
    else:
        off = (f"; **not the same warm start or first batch** ({logged['mismatch']}"
               + (f"; sampled: {sampled['mismatch']}" if sampled["mismatch"] else "") + ").")
    md = [f"### {scenario}: HGPO as the trained arm ({len(trained)} runs, {len({r.seed for r in trained})} seeds)", "",
          f"First batches (drawn before any update) against the {baseline} arm's: {first['equal']:,} of "
          f"{first['values']:,} non-HGPO `groundtruth/` values over {first['seeds']} seeds equal within 1e-9 "
          f"(largest difference {first['max_diff']:.1e}; values on one side only: {first['missing']})"
          + ("." if first["same"] else
             f", {logged['equal']:,} within one unit of the 5th significant digit (the precision these runs log)"
             + (": the same batches up to the last logged digit." if logged["same"] else off)), ""]
    labels = {"verl_agent": "hgpo", "start_marker": "hgpo@start_marker"}
    changes = []
    for fill, what in (("", "every-cell truth (primary)"), ("visited_only", "uniform fill (`llm-groundtruth`'s)")):
        rows = truth_rows(trained, metric, baseline, fill)
        if not all(any(r["estimator"] == lb for r in rows) for lb in labels.values()):
            md += [f"HGPO is not scored under both rules against the {what} in these runs.", ""]
            continue
        fam_rows = {}
        for rule, lb in labels.items():
            fam = [dict(r) for r in rows if r["estimator"] not in set(labels.values()) - {lb}]
            tested = [r for r in fam if "p" in r]
            for r, a in zip(tested, holm([r["p"] for r in tested])):
                r["p_holm"] = a
            order = [r["estimator"] for r in sorted(fam, key=lambda r: -r["level"][0])]
            row = next(r for r in fam if r["estimator"] == lb)
            fam_rows[rule] = (row, 1 + order.index(lb), len(fam), len(tested))
        k = fam_rows["verl_agent"][3]
        md += [f"**{what.capitalize()}**, whole advantage, {metric} with A^π on HGPO's own batches", "",
               f"| HGPO rule | mean [95% CI] | − {baseline} [95% CI] | seeds > 0 | Holm p (k = {k}) | rank |",
               "|---|---|---|---|---|---|"]
        for rule, (r, rank, n, _) in fam_rows.items():
            md.append(f"| {rule} | {_ci(r['level'], signed=False)} | {_ci(r['diff'])} | {r['above']}/{r['n']} | "
                      f"{_p(r['p_holm'])} | {rank} of {n} |")
        d = _seed_obs(trained, _diff(labels["verl_agent"], labels["start_marker"], metric, fill))
        flat = [abs(x) for v in d.values() for x in v]
        (a, ra, _, _), (b, rb, _, _) = fam_rows["start_marker"], fam_rows["verl_agent"]
        why = []
        if _excludes_zero(a["diff"]) != _excludes_zero(b["diff"]):
            why.append(f"HGPO − {baseline}'s interval moves across 0")
        if (a["p_holm"] < 0.05) != (b["p_holm"] < 0.05):
            why.append("its Holm p crosses 0.05")
        if abs(ra - rb) > 1:
            why.append("its rank moves by more than one place")
        if fill == "":
            changes += why
        md += ["", f"HGPO's {metric} differs between the rules in {sum(x > 1e-9 for x in flat)} of {len(flat)} "
               f"run-iterations (largest {max(flat, default=0.0):.4f}); paired change (verl_agent − start_marker, per "
               f"seed then iteration): {_ci(hierarchical_bootstrap_ci(list(d.values())), 4)}. "
               + (f"By the plan's tests: {'; '.join(why)}." if why else
                  "By the plan's tests nothing moves (interval against 0, Holm p against 0.05, rank within one "
                  "place)."), ""]
    md += [("**The reading changes** (every-cell truth): " + "; ".join(changes) + ".") if changes else
           "**No same-batch reading changes** against the every-cell truth.", ""]
    return md


def hgpo_trained_training_md(arms: dict[str, tuple[list[Run], list[Run]]], baseline: str = "gigpo") -> list[str]:
    """Reading 2 of the HGPO-trained plan over the scenarios: per scenario (``{scenario: (baseline runs, HGPO
    runs)}``), HGPO's training success against ``baseline``'s, the Mann-Whitney p Holm-adjusted over the scenarios,
    and the paired per-seed gap with its sign-flip p (Holm over the scenarios too; beside the plan's test, not part
    of it). The reading changes if a scenario's P interval excludes 0.5 or its Holm-adjusted Mann-Whitney p is
    below 0.05."""
    rows = []
    for sc, (base, trained) in arms.items():
        tr = [r for r in training_rows(base + trained, baseline) if r["method"] == "hgpo"]
        if tr:
            rows.append({**tr[0], "scenario": sc,
                         "p_pair": sign_flip_p(tr[0]["paired"]) if tr[0]["paired"] else float("nan")})
    if not rows:
        return []
    for r, a in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = a
    paired = [r for r in rows if np.isfinite(r["p_pair"])]
    for r, a in zip(paired, holm([r["p_pair"] for r in paired])):
        r["p_pair_holm"] = a
    md = [f"## HGPO as the trained arm: training success over the {len(rows)} scenarios", "",
          f"Each run's training success over its last 5 iterations, HGPO (published rule) against the {baseline} arm "
          f"of the same seeds; Holm over the {len(rows)} scenarios. The plan's test: the P interval against 0.5 and "
          "the Holm-adjusted Mann-Whitney p against 0.05; the paired sign-flip p is beside it, not part of it.", "",
          f"| scenario | seeds | P(HGPO > {baseline}) [95% CI] | Mann-Whitney p | Holm p | mean paired gap | "
          "seeds above (paired) | sign-flip p | Holm p |", "|---|---|---|---|---|---|---|---|---|"]
    why = []
    for r in rows:
        lo, hi = r["poi"][1], r["poi"][2]
        if lo > 0.5 or hi < 0.5:
            why.append(f"{r['scenario']}'s P interval excludes 0.5")
        if r["p_holm"] < 0.05:
            why.append(f"{r['scenario']}'s Holm-adjusted Mann-Whitney p is below 0.05")
        pp = f"{_p(r['p_pair'])} | {_p(r['p_pair_holm'])}" if "p_pair_holm" in r else "– | –"
        md.append(f"| {r['scenario']} | {r['n']} | {_ci(r['poi'], 2, signed=False)} | {_p(r['p'])} | "
                  f"{_p(r['p_holm'])} | {r['iqm_gap']:+.3f} | {r['paired_above']}/{r['paired_n']} | {pp} |")
    md += ["", ("**The training reading changes**: " + "; ".join(why) + ".") if why else
           "**No training reading changes**: every P interval holds 0.5 and no Holm-adjusted Mann-Whitney p is below "
           "0.05.", ""]
    return md


def _own_rows(runs: list[Run], arms: list[str], metric: str, baseline: str) -> list[dict]:
    """Per arm: its trained estimator's ``metric`` on its own runs, paired by seed against ``baseline``'s runs
    (Holm over the arms compared)."""
    own: dict[str, dict[int, list[float]]] = {}
    for m in arms:
        obs: dict[int, list[float]] = defaultdict(list)
        for r in runs:
            if r.method == m:
                key = _own_key(r, metric)
                obs[r.seed] += [float(row[key]) for row in r.metrics if _finite(row.get(key))]
        own[m] = {s: v for s, v in sorted(obs.items()) if v}
    base = own.get(baseline, {})
    rows = []
    for m in arms:
        if not own[m]:
            continue
        row = {"estimator": m, "seeds": len(own[m]), "level": hierarchical_bootstrap_ci(list(own[m].values()))}
        common = sorted(set(own[m]) & set(base))
        if m != baseline and common:
            d = [float(np.mean(own[m][s])) - float(np.mean(base[s])) for s in common]
            row.update(diff=(float(np.mean(d)), min(d), max(d)), above=sum(x > 0 for x in d), n=len(d),
                       p=sign_flip_p(d), per_seed=d)
        rows.append(row)
    tested = [r for r in rows if "p" in r]
    for r, a in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = a
    return rows


def _training_md(runs: list[Run], baseline: str, title: str) -> list[str]:
    """``training_rows`` as a table, Holm over its rows (Mann-Whitney p over runs = seeds)."""
    tr = training_rows(runs, baseline)
    for r, a in zip(tr, holm([r["p"] for r in tr])):
        r["p_holm"] = a
    md = [f"{title} (mean of the last 5 iterations per run; Holm over {len(tr)})", "",
          f"| arm | seeds | P(> {baseline}) [95% CI] | seeds above {baseline} (paired) | mean paired gap | p "
          "| Holm p |",
          "|---|---|---|---|---|---|---|"]
    for r in tr:
        md.append(f"| {r['method']} | {r['n']} | {_ci(r['poi'], 2, signed=False)} | {r['paired_above']}/"
                  f"{r['paired_n']} | {r['iqm_gap']:+.3f} | {_p(r['p'])} | {_p(r['p_holm'])} |")
    return md + [""]


def _branch_mix_md(runs: list[Run], arms: list[str], title: str) -> list[str]:
    """Per arm: its first-batch ε, the share of rows in each PACE branch and the scale of its advantages (of the
    episode term, the step term and the whole)."""
    md = [title, "",
          "PACE rows: the action-keyed formula; fallback: leave-one-out; singleton: no step term. For GiGPO and "
          "BiGPO the mix is the diagnostic one (PACE applied to the hidden-state clusters at the run's ε), not what "
          "they train with.", "",
          "| arm | half | ε (first batch) | PACE rows | fallback rows | singleton rows | std of A^ep | std of A^S | "
          "std of A |", "|---|---|---|---|---|---|---|---|---|"]
    for m in arms:
        rs = [r for r in runs if r.method == m]

        def mean(key: str, rs=rs) -> float:
            v = [row[key] for r in rs for row in r.metrics if _finite(row.get(key))]
            return float(np.mean(v)) if v else float("nan")

        def std(key: str) -> str:
            v = mean(key)
            return f"{v:.3f}" if np.isfinite(v) else "–"

        eps = [first_epsilon(r) for r in rs]
        eps_txt = f"{np.median([e for e in eps if _finite(e)]):.3g} (median)" if any(_finite(e) for e in eps) else "–"
        md.append(f"| {m} | {_HALF_OF[m]} | {eps_txt} | {mean('group/pace_frac_pace'):.2f} | "
                  f"{mean('group/pace_frac_fallback'):.2f} | {mean('group/pace_frac_singleton'):.2f} | "
                  f"{std('adv/episode_std')} | {std('adv/step_std')} | {std('adv/total_std')} |")
    return md + [""]


def _grad_clip(run: Run) -> float:
    """The run's ``trainer.grad_clip`` (its config.yaml; the default 1.0 when the file does not name it)."""
    import yaml

    text = run.read_text("config.yaml")
    v = ((yaml.safe_load(text) or {}).get("trainer") or {}).get("grad_clip") if text else None
    return float(v) if v is not None else 1.0


def _update_md(runs: list[Run], arms: list[str], title: str) -> list[str]:
    """Per arm: the advantages' scale, the gradient norm before clipping against each run's clip threshold, and how
    far each iteration's update moved the policy (``loss/approx_kl``, its mean and the mean of its absolute value)."""
    md = [title, "",
          "`std of A`: the advantages' standard deviation (`adv/total_std`). `gradient norm`: the norm of the loss's "
          "gradient before clipping (`loss/grad_norm`, the mean over an iteration's optimizer steps), median and "
          "smallest over the arm's iterations; `iterations above the clip`: those where it exceeds the run's "
          "`trainer.grad_clip`, the norm every larger gradient is scaled down to. `approx KL`: the mean of "
          "−log(π_new/π_old) over an iteration's update (`loss/approx_kl`), ×10⁻³, and the mean of its absolute "
          "value. Per seed the run's mean over its iterations; [hierarchical 95% CI over seeds, then iterations].", "",
          "| arm | std of A | gradient norm: median (smallest) | iterations above the clip | approx KL ×10⁻³ "
          "[95% CI] | mean abs approx KL ×10⁻³ [95% CI] |", "|---|---|---|---|---|---|"]
    for m in arms:
        rs = sorted((r for r in runs if r.method == m), key=lambda r: r.seed)
        std = [y for r in rs for y in series(r.metrics, "adv/total_std")[1]]
        gn, above = [], 0
        for r in rs:
            ys = series(r.metrics, "loss/grad_norm")[1]
            gn += ys
            above += sum(y > _grad_clip(r) for y in ys)
        by_seed: dict[int, list[float]] = defaultdict(list)
        for r in rs:
            by_seed[r.seed] += series(r.metrics, "loss/approx_kl")[1]
        kl = [v for v in by_seed.values() if v]
        if not gn or not kl:
            continue
        md.append(f"| {m} | {np.mean(std):.2f} | {np.median(gn):.2f} ({min(gn):.2f}) | {above}/{len(gn)} | "
                  f"{_ci(hierarchical_bootstrap_ci(kl), 2, 1e3)} | "
                  f"{_ci(hierarchical_bootstrap_ci([list(np.abs(v)) for v in kl]), 2, 1e3, signed=False)} |")
    return md + [""]


def _final_eval(run: Run, key: str) -> tuple[int, int, int] | None:
    """(wins, episodes, iteration) of ``run``'s last evaluation on the split whose success-rate key is ``key``."""
    xs, ys = series(run.evals, key)
    _, ns = series(run.evals, key.replace("success_rate", "num_episodes"))
    if not ys or not ns:
        return None
    n = int(round(ns[-1]))
    return int(round(ys[-1] * n)), n, int(xs[-1])


def heldout_rows(runs: list[Run], key: str, baseline: str = "gigpo") -> list[dict]:
    """Per arm: success at its runs' last evaluation on one split (wins / episodes pooled over seeds, and the mean of
    the per-seed rates with its Student-t interval over seeds), and against ``baseline`` the paired per-seed
    difference (the two runs of a seed play the same goals): mean [95% Student-t interval over the per-seed
    differences], seeds above 0, exact sign-flip p, Holm over the arms compared. One value per seed and few seeds:
    a percentile bootstrap over them would be too narrow (``analysis.stats.t_ci``)."""
    per: dict[str, dict[int, tuple[int, int, int]]] = defaultdict(dict)
    for r in runs:
        f = _final_eval(r, key)
        if f is not None and f[1] > 0:
            per[r.method][r.seed] = f
    rows = []
    for m in [a for a in HALVES if a in per]:
        rate = {s: w / n for s, (w, n, _) in per[m].items()}
        row = {"arm": m, "seeds": len(rate), "wins": sum(v[0] for v in per[m].values()),
               "episodes": sum(v[1] for v in per[m].values()), "iteration": max(v[2] for v in per[m].values()),
               "level": t_ci(list(rate.values()))}
        if m != baseline and baseline in per:
            b = {s: w / n for s, (w, n, _) in per[baseline].items()}
            d = [rate[s] - b[s] for s in sorted(rate) if s in b]
            if d:
                row.update(diff=t_ci(d), above=sum(x > 0 for x in d),
                           below=sum(x < 0 for x in d), n=len(d), p=sign_flip_p(d), per_seed=d)
        rows.append(row)
    tested = [r for r in rows if "p" in r]
    for r, a in zip(tested, holm([r["p"] for r in tested])):
        r["p_holm"] = a
    return rows


def halves_heldout(root: Path, baseline: str = "gigpo", split: str = "eval_depth2") -> str:
    """The halves of BiPACE on a real environment (halves-textcraft): held-out success at the last evaluation
    (primary), training success, and each arm's PACE branch mix and scale."""
    runs = [r for r in find_runs(Path(root) / "runs") if r.method in HALVES]
    if not runs:
        return "No runs yet.\n"
    seeds = sorted({r.seed for r in runs})
    arms = [m for m in HALVES if any(r.method == m for r in runs)]
    keys = sorted({k for r in runs for row in r.evals for k in row
                   if re.match(rf"^eval/[^/]+/{re.escape(split)}/success_rate$", k)})
    md = [f"{len(runs)} runs ({', '.join(f'{m}: {sum(r.method == m for r in runs)}' for m in arms)}), seeds "
          f"{seeds[0]}–{seeds[-1]} ({len(seeds)}). Primary metric: success on the held-out `{split}` goals at each "
          "run's last evaluation, in percent of the goals (differences in points). Per seed: the run's rate; paired "
          "differences against GiGPO of the same seed (same goals, same warm start). Intervals: 95% Student-t "
          "intervals over the per-seed values (mean ± t · s / √n, n − 1 degrees of freedom; a percentile bootstrap "
          "over so few values is too narrow). Exact sign-flip p over the per-seed "
          f"differences (smallest possible with {len(seeds)} seeds: {2 / 2 ** len(seeds):.3g}), Holm over the "
          "arms compared.", ""]
    for key in keys:
        rows = heldout_rows(runs, key, baseline)
        k = sum("p" in r for r in rows)
        it0 = [r.evals[0].get(key) for r in runs if r.evals and r.evals[0].get("iteration") == 0
               and _finite(r.evals[0].get(key))]
        md += [f"### 1. Held-out `{split}` success at the last evaluation (iteration "
               f"{max((r['iteration'] for r in rows), default=0)}; the warm start, iteration 0: "
               f"{100 * float(np.mean(it0)):.1f}% over the {len(it0)} runs)" if it0 else
               f"### 1. Held-out `{split}` success at the last evaluation", "",
               f"| arm | half | seeds | wins / episodes | mean of seeds (%) [95% t-interval] | − {baseline} "
               f"(points) [95% t-interval] | "
               f"seeds above / below | sign-flip p | Holm p (k = {k}) |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            head = (f"| {r['arm']} | {_HALF_OF[r['arm']]} | {r['seeds']} | {r['wins']}/{r['episodes']} | "
                    f"{_ci(r['level'], 1, 100, signed=False)} | ")
            if "p" in r:
                md.append(head + f"{_ci(r['diff'], 1, 100)} | {r['above']} / {r['below']} | {_p(r['p'])} | "
                                 f"{_p(r['p_holm'])} |")
            else:
                md.append(head + "– | – | – | – |")
        md.append("")
    md += _training_md(runs, baseline, "### 2. Training success against GiGPO")
    md += _branch_mix_md(runs, arms, "### 3. Branch mix and scale (mean over runs × iterations)")
    return "\n".join(md)


# --------------------------------------------------------------------------------------------------------------------
# Control studies: each method against the no-update control of its seed


def _by_method(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        out[r.method].append(r)
    return dict(out)


def _per_seed_series(runs: list[Run], key: str) -> dict[int, dict[int, float]]:
    return {r.seed: dict(zip(*series(r.metrics, key))) for r in runs}


def _gap_groups(a: dict[int, dict[int, float]], b: dict[int, dict[int, float]]) -> dict[int, list[float]]:
    """{seed: [a - b at every iteration both have]} over the seeds both have."""
    out = {}
    for s in sorted(set(a) & set(b)):
        its = sorted(set(a[s]) & set(b[s]))
        if its:
            out[s] = [a[s][x] - b[s][x] for x in its]
    return out


def control_gaps(by_method: dict[str, list[Run]], key: str = "rollout/success_rate", last: int = 4,
                 bar: float = 0.25) -> list[dict]:
    """Per method: success minus the control's at each iteration (points); mean over seeds [hierarchical CI over
    seeds, then iterations], per-seed means, per-seed gap over the last ``last`` iterations, seeds at or above
    ``bar`` there, and the sign-flip p of the per-seed means."""
    if CONTROL_METHOD not in by_method:
        return []
    ctrl = _per_seed_series(by_method[CONTROL_METHOD], key)
    out = []
    for m in sorted(by_method, key=method_sort_key):
        if m == CONTROL_METHOD:
            continue
        g = _gap_groups(_per_seed_series(by_method[m], key), ctrl)
        if not g:
            continue
        ends = {s: float(np.mean(v[-last:])) for s, v in g.items()}
        means = [float(np.mean(v)) for v in g.values()]
        out.append({"method": m, "seeds": list(g), "gap": hierarchical_bootstrap_ci(list(g.values())),
                    "per_seed": means, "end": ends, "at_bar": sum(v >= bar - 1e-9 for v in ends.values()),
                    "p": sign_flip_p(means), "iterations": max(len(v) for v in g.values())})
    return out


def pairwise(by_method: dict[str, list[Run]], key: str = "rollout/success_rate") -> list[dict]:
    """Every pair of non-control methods: the paired per-iteration difference of ``key`` (the same seeds draw the same
    goals), mean [hierarchical CI], seeds where the first is above, sign-flip p, Holm over all pairs."""
    ms = sorted((m for m in by_method if m != CONTROL_METHOD), key=method_sort_key)
    ser = {m: _per_seed_series(by_method[m], key) for m in ms}
    out = []
    for i, a in enumerate(ms):
        for b in ms[i + 1:]:
            g = _gap_groups(ser[b], ser[a])  # b - a: later methods in the order (BiPACE) minus earlier ones
            if not g:
                continue
            means = [float(np.mean(v)) for v in g.values()]
            out.append({"a": b, "b": a, "diff": hierarchical_bootstrap_ci(list(g.values())), "per_seed": means,
                        "above": sum(v > 0 for v in means), "n": len(means), "p": sign_flip_p(means)})
    for r, adj in zip(out, holm([r["p"] for r in out])):
        r["p_holm"] = adj
    return out


def _run_mean(run: Run, key: str, frac_last: float | None = None) -> float | None:
    _, ys = series(run.metrics, key)
    if not ys:
        return None
    if frac_last:
        ys = ys[int((1 - frac_last) * len(ys)):] or ys[-1:]
    return float(np.mean(ys))


def per_seed_metric_table(by_method: dict[str, list[Run]], keys: dict[str, str], digits: int = 3,
                          frac_last: float | None = None, scale: float = 1.0) -> list[str]:
    """Rows = methods, columns = ``keys`` ({label: metric key}): per seed the run's mean over its iterations (or its
    last ``frac_last``), then the mean over seeds with the hierarchical interval (seeds, then iterations)."""
    lines = ["| method | seeds | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for m in sorted(by_method, key=method_sort_key):
        cells, n = [], 0
        for k in keys.values():
            groups = []
            for r in sorted(by_method[m], key=lambda r: r.seed):
                _, ys = series(r.metrics, k)
                if frac_last and ys:
                    ys = ys[int((1 - frac_last) * len(ys)):] or ys[-1:]
                if ys:
                    groups.append(ys)
            n = max(n, len(groups))
            if not groups:
                cells.append("–")
                continue
            p, lo, hi = (scale * v for v in hierarchical_bootstrap_ci(groups))
            cells.append(f"{p:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]")
        if n:
            lines.append(f"| {m} | {n} | " + " | ".join(cells) + " |")
    return lines + [""]


def _control_md(by_method: dict[str, list[Run]], post_hoc: set[str], bar: float | None = None) -> list[str]:
    gaps = control_gaps(by_method, bar=bar if bar is not None else 0.25)
    seeds = sorted({r.seed for rs in by_method.values() for r in rs})
    n = len(seeds)
    floor = 2 / 2 ** n
    note = (f"With {n} seeds the exact sign-flip test cannot go below p = {floor:.3g}"
            + (", so no gap or difference here can reach p < 0.05, corrected or not; and a bootstrap over so few "
               "seeds tends to give intervals that are too narrow." if floor > 0.05 else "."))
    md = []
    if not gaps:
        md += ["No `no-update` control in these runs: no gap to a control to report. " + note, ""]
    else:
        bar_head = f" seeds ≥ {100 * bar:.0f} at the end |" if bar is not None else ""
        md += ["### Each method against the no-update control of its seed", "",
               "Training-rollout success minus the control's at the same iteration, in points. `all`: the mean over "
               "seeds of each seed's mean over iterations, 95% hierarchical bootstrap interval (seeds, then iterations "
               "within a seed). `seed means` and `end`: each seed's gap over all iterations and over its last 4. "
               + note, "",
               "| method | seeds | all [95% CI] | seed means (" + " / ".join(str(s) for s in seeds)
               + ") | end, last 4 ("
               + " / ".join(str(s) for s in seeds) + ") |" + bar_head + " sign-flip p |",
               "|---|---|---|---|---|" + ("---|" if bar is not None else "") + "---|"]
        for g in gaps:
            tag = " (post hoc)" if g["method"] in post_hoc else ""
            md.append(f"| {g['method']}{tag} | {len(g['seeds'])} | {_ci(g['gap'], 1, 100)} | "
                      + " / ".join(f"{100 * v:+.1f}" for v in g["per_seed"]) + " | "
                      + " / ".join(f"{100 * g['end'][s]:+.1f}" for s in g["seeds"]) + " |"
                      + (f" {g['at_bar']}/{len(g['seeds'])} |" if bar is not None else "") + f" {_p(g['p'])} |")
    pw = pairwise(by_method)
    if pw:
        md += ["", f"### Methods against each other (training-rollout success, paired on the same seeds' goal draws; "
               f"Holm over the {len(pw)} pairs)", "",
               "| difference (points) | all [95% CI] | seed means | seeds > 0 | sign-flip p | Holm p |",
               "|---|---|---|---|---|---|"]
        for r in pw:
            tag = " (post hoc)" if ({r["a"], r["b"]} & post_hoc) else ""
            md.append(f"| {r['a']} − {r['b']}{tag} | {_ci(r['diff'], 1, 100)} | "
                      + " / ".join(f"{100 * v:+.1f}" for v in r["per_seed"])
                      + f" | {r['above']}/{r['n']} | {_p(r['p'])} | {_p(r['p_holm'])} |")
    return md + [""]


def _heldout_md(by_method: dict[str, list[Run]], key: str, label: str) -> list[str]:
    """Success on an evaluation split at the last evaluation, pooled over seeds as counts (episodes) with Fisher's exact
    test of each method against the control, and per seed."""
    if CONTROL_METHOD not in by_method:
        return []
    def counts(runs):
        per = {}
        for r in runs:
            xs, ys = series(r.evals, key)
            ns = series(r.evals, key.replace("success_rate", "num_episodes"))[1]
            if ys:
                n = int(round(ns[-1])) if ns else 0
                per[r.seed] = (int(round(ys[-1] * n)), n, xs[-1])
        return per
    c = counts(by_method[CONTROL_METHOD])
    if not c:
        return []
    cs, cn = sum(v[0] for v in c.values()), sum(v[1] for v in c.values())
    md = [f"### Evaluation split `{label}` at the last evaluation", "",
          "Wins over episodes, summed over seeds, and Fisher's exact test against the control (two-sided). The "
          "episodes of one seed play the same goals as the control's, and the seeds repeat the goals, so the test "
          "treats as independent what is not: read its p as an upper bound on the evidence.", "",
          f"| method | wins / episodes | per seed ({' / '.join(str(s) for s in sorted(c))}) | Fisher p vs control |",
          "|---|---|---|---|",
          f"| {CONTROL_METHOD} | {cs}/{cn} | " + " / ".join(f"{c[s][0]}/{c[s][1]}" for s in sorted(c)) + " | – |"]
    for m in sorted(by_method, key=method_sort_key):
        if m == CONTROL_METHOD:
            continue
        v = counts(by_method[m])
        if not v:
            continue
        ws, wn = sum(x[0] for x in v.values()), sum(x[1] for x in v.values())
        md.append(f"| {m} | {ws}/{wn} | " + " / ".join(f"{v[s][0]}/{v[s][1]}" for s in sorted(v))
                  + f" | {_p(fisher_exact_p(ws, wn, cs, cn))} |")
    return md + [""]


def control_study(root: Path, post_hoc: tuple[str, ...] = (), extra=None, bar: float | None = None) -> str:
    """A study with a no-update control (learning, the CPU studies): gaps to the control and between methods with
    seeds as the unit; the evaluations as counts; ``extra(by_method)`` adds study-specific lines."""
    runs = find_runs(Path(root) / "runs")
    by_method = _by_method(runs)
    md = [f"{len(runs)} runs: " + ", ".join(f"{m} × {len(rs)}" for m, rs in sorted(by_method.items(),
                                                                                 key=lambda kv: method_sort_key(kv[0])))
          + ".", ""]
    if post_hoc:
        md += ["**Post hoc arms:** " + ", ".join(f"`{m}`" for m in post_hoc) + " were added after the other arms "
               "had been read; they are marked `(post hoc)` wherever they appear.", ""]
    md += _control_md(by_method, set(post_hoc), bar)
    keys = sorted({k for r in runs for row in r.evals for k in row
                   if re.match(r"^eval/[^/]+/[^/]+/success_rate$", k)})
    for k in keys:
        md += _heldout_md(by_method, k, k.split("/")[2])
    if extra:
        md += extra(by_method)
    return "\n".join(md)


def _pool_extra(by_method: dict[str, list[Run]]) -> list[str]:
    """cpu-study-pool: the update size and the PACE branch shares."""
    trained = {m: rs for m, rs in by_method.items() if m != CONTROL_METHOD}
    md = ["### Update size and the weight of the policy term", "",
          "AdamW divides each parameter's step by a running estimate of its gradient's scale, so scaling the whole "
          "loss by a constant leaves the step unchanged. What an estimator's larger advantage scale changes is the "
          "policy term's weight against the two terms it does not scale, the KL to the reference (coefficient 0.01) "
          "and the entropy bonus (0.001). `adv/total_std`: the advantages' scale; `loss/approx_kl`: the mean of "
          "−log(π_new/π_old) over each iteration's update (how far one update moved the policy); `loss/kl`: KL to "
          "the reference. Per seed: the run's mean over iterations; [hierarchical 95% CI over seeds, then "
          "iterations].", ""]
    md += per_seed_metric_table(trained, {"adv/total_std": "adv/total_std", "approx KL per update":
                                          "loss/approx_kl", "KL to the reference": "loss/kl"}, digits=2)
    md += ["### PACE's branches (share of rows)", "",
           "`action-keyed` (`group/pace_frac_pace`): rows that get PACE's action-keyed baseline; `fallback`: rows "
           "that get the leave-one-out cluster mean instead (no same-action peer in the cluster, or the cluster holds "
           "one action: `estimator.pace_fallback: either`, `docs/method.md`); `singleton`: alone in the cluster (no "
           "step term). The BiPACE runs' shares, over all iterations and over the last 20%:",
           ""]
    bip = {m: rs for m, rs in trained.items() if m.startswith("bipace")}
    keys = {"action-keyed": "group/pace_frac_pace", "fallback": "group/pace_frac_fallback",
            "singleton": "group/pace_frac_singleton"}
    md += ["All iterations:", ""] + per_seed_metric_table(bip, keys, digits=2)
    md += ["Last 20% of iterations:", ""] + per_seed_metric_table(bip, keys, digits=2, frac_last=0.2)
    return md


# --------------------------------------------------------------------------------------------------------------------
# estimator-bench: proxy hidden states against SmolLM2's


def _stratified_perm_p(x: dict[str, np.ndarray], y: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> float:
    """Two-sided permutation p of the mean over tasks of P(x > y): the labels x/y are permuted within each task."""
    rng = np.random.default_rng(seed)
    tasks = sorted(x)
    obs = np.mean([probability_of_improvement(x[t], y[t]) for t in tasks]) - 0.5
    hits = 0
    for _ in range(reps):
        vals = []
        for t in tasks:
            z = rng.permutation(np.concatenate([x[t], y[t]]))
            vals.append(probability_of_improvement(z[:len(x[t])], z[len(x[t]):]))
        hits += abs(np.mean(vals) - 0.5) >= abs(obs) - 1e-12
    return float((hits + 1) / (reps + 1))


def estimator_bench(root: Path) -> str:
    """The benchmark's headline settings with the hidden-state source named, proxy beside SmolLM2 (``bench_rows``:
    one row per seed; 95% t-interval over the 20 seeds), and the tabular learning comparisons with a permutation p
    and Holm over the table's comparisons."""
    from scipy import stats as st

    root = Path(root)
    rows = read_csv(root / "bench_rows.csv.gz")
    md = ["Each benchmark seed is one independent batch (its own MDP draw and policy), so seeds are the unit: mean "
          "over the 20 seeds with a 95% t-interval. **Proxy** hidden states are built from the true state's "
          "features plus Gaussian noise (σ = 0.2): they place equal states close by construction. **LM L-8**: "
          "SmolLM2-135M-Instruct's layer −8 at the last prompt token of the same rows' text (a sub-batch of 1 "
          "group × 4 trajectories per seed; every method recomputed on those rows).", ""]

    def cell(fam, scen, src, meth, eps, metric):
        vals = [float(r[metric]) for r in rows if r["family"] == fam and r["scenario"] == scen and r["source"] == src
                and r["method"] == meth and (eps is None or (r["epsilon"] not in ("", "nan")
                                                             and abs(float(r["epsilon"]) - eps) < 1e-9))
                and r[metric] not in ("", "nan")]
        if not vals:
            return "–"
        m = float(np.mean(vals))
        if len(vals) < 2:
            return f"{m:.2f}"
        h = st.t.ppf(0.975, len(vals) - 1) * np.std(vals, ddof=1) / math.sqrt(len(vals))
        return f"{m:.2f} [{m - h:.2f}, {m + h:.2f}]"

    def precision(fam, src, meth, eps):
        sing = cell(fam, "varied+aliased", src, meth, eps, "singleton")
        if sing.startswith("1.00"):  # every row alone: no same-group pair, precision undefined
            return "– (no pairs)"
        return cell(fam, "varied+aliased", src, meth, eps, "pair_precision")

    md += ["### Whole-advantage Pearson with A^π and pair precision, varied+aliased scenario", "",
           "| family | rows | states | method | ε | Pearson (whole advantage) | Pearson (step term) | singleton | "
           "pair precision |", "|---|---|---|---|---|---|---|---|---|"]
    for fam in ("craft", "rooms"):
        for rows_src, entries in (("full batch", [("text", "gigpo", None), ("proxy σ=0.2", "bipace_q", 0.05)]),
                                  ("LM sub-batch", [("text (LM rows)", "gigpo", None),
                                                    ("proxy σ=0.2 (LM rows)", "bipace_q", 0.05),
                                                    ("LM L-8", "bipace_q", 0.02), ("LM L-8", "bipace_q", 0.05),
                                                    ("LM L-8", "bipace_v", 0.05)])):
            for src, meth, eps in entries:
                label = ("exact text (anchors)" if src.startswith("text") else "**proxy**" if src.startswith("proxy")
                         else "SmolLM2 (real)")
                md.append(f"| {fam} | {rows_src} | {label} | {meth} | {'–' if eps is None else eps} | "
                          f"{cell(fam, 'varied+aliased', src, meth, eps, 'pearson')} | "
                          f"{cell(fam, 'varied+aliased', src, meth, eps, 'pearson_step')} | "
                          f"{cell(fam, 'varied+aliased', src, meth, eps, 'singleton')} | "
                          f"{precision(fam, src, meth, eps)} |")
    md.append("")
    # tabular learning: which grouping it used, and the comparisons with a correction
    runs = read_csv(root / "learning_runs.csv.gz")
    auc: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in runs:
        auc[r["method"]][r["task"]][int(r["seed"])].append(float(r["success"]))
    score = {m: {t: np.array([np.mean(v) for _, v in sorted(s.items())]) for t, s in ts.items()}
             for m, ts in auc.items()}
    pairs = [(x, y) for x in ("bipace_q", "bipace_v") for y in ("grpo", "rloo", "gigpo", "hgpo", "bigpo",
                                                               "bipace_v", "bipace_q") if x != y]
    res, seen = [], set()
    for x, y in pairs:
        if x in score and y in score and frozenset((x, y)) not in seen:
            seen.add(frozenset((x, y)))
            poi = float(np.mean([probability_of_improvement(score[x][t], score[y][t]) for t in sorted(score[x])]))
            res.append((x, y, poi, _stratified_perm_p(score[x], score[y])))
    adj = holm([r[3] for r in res])
    md += ["### Tabular learning (proxy states, σ = 0.2, ε = 0.05): P(X > Y) on auc, corrected", "",
           "The learning comparison groups rows by the **proxy** states too (`config.json`, `learning.proxy_noise`). "
           "auc per run: mean success over its logged iterations (`learning_runs.csv.gz`); P(X > Y): mean over the 4 "
           "tasks; p: permutation test of P = 0.5 with the labels permuted within each task (2,000 permutations); "
           f"Holm over the {len(res)} comparisons of the table.", "",
           "| comparison | P(X > Y) | permutation p | Holm p |", "|---|---|---|---|"]
    for (x, y, poi, p), a in zip(res, adj):
        md.append(f"| {x} vs {y} | {poi:.3f} | {_p(p)} | {_p(a)} |")
    return "\n".join(md + [""])


# --------------------------------------------------------------------------------------------------------------------
# epsilon: the rule scored on batches it was not chosen on


_CELL = re.compile(r"^(?:(?P<eps>[0-9.e+-]+): )?(?P<f1>-?[0-9.]+)$")


def parse_f1_table(text: str) -> tuple[list[str], dict[str, list[float]], list[float], list[float]]:
    """From ``criteria.md``: (batch labels, {rule: F1 per batch}, oracle F1 per batch, centred oracle F1 per batch).
    Reads the per-batch table (``| batch | rows | exact anchors | <rule> ... |``, cells ``eps: s / p / r / F1``)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head_i = next(i for i, ln in enumerate(lines) if ln.startswith("| batch | rows |"))
    head = [c.strip() for c in lines[head_i].strip("|").split("|")]
    batches, rules, oracle, oracle_c = [], defaultdict(list), [], []
    for ln in lines[head_i + 2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(head) or not cells[1].isdigit():
            break
        batches.append(cells[0])
        for name, c in zip(head[2:], cells[2:]):
            f1 = float(c.split("/")[-1].strip())
            if name == "best F1 (oracle)":
                oracle.append(f1)
            elif name == "best F1 (oracle) (centred)":
                oracle_c.append(f1)
            else:
                rules[name].append(f1)
    return batches, dict(rules), oracle, oracle_c


def leave_one_batch_out(gaps: dict[str, list[float]]) -> list[tuple[str, float]]:
    """For each batch i: the rule with the smallest mean gap on the other batches (ties: the first in ``gaps``' order)
    and that rule's gap on batch i. ``gaps``: {rule: gap to the oracle per batch}."""
    names = list(gaps)
    n = len(next(iter(gaps.values())))
    out = []
    for i in range(n):
        train = {r: np.mean([g for j, g in enumerate(gaps[r]) if j != i]) for r in names}
        best = min(names, key=lambda r: (train[r], names.index(r)))
        out.append((best, gaps[best][i]))
    return out


def epsilon_rules(root: Path) -> str:
    """The rule of ``epsilon: auto`` chosen on some first batches and scored on the others (leave one batch out),
    from the committed per-batch table ``criteria.md`` (F1 to 2 decimals)."""
    batches, rules, oracle, oracle_c = parse_f1_table((Path(root) / "criteria.md").read_text())
    gap = {}
    for name, f1 in rules.items():
        if name == "exact anchors":
            continue
        ref = oracle_c if name.endswith("(centred)") else oracle
        gap[name] = [o - f for o, f in zip(ref, f1)]
    un = {k: v for k, v in gap.items() if not k.endswith("(centred)")}
    md = [f"{len(batches)} first batches (`criteria.md`; F1 to 2 decimals, so gaps here differ from the report's "
          "unrounded means by up to 0.005). Gap: the oracle's F1 (best grid ε, reading the true state) minus the "
          "rule's; centred rules against the centred oracle.", "",
          "In-sample (the rule chosen and scored on the same batches), mean gap per rule:", "",
          "| rule | mean gap | batches at the oracle |", "|---|---|---|"]
    for k, v in gap.items():
        md.append(f"| {k} | {np.mean(v):+.3f} | {sum(abs(x) < 1e-9 for x in v)}/{len(v)} |")
    md += ["", "Leave one batch out: choose the rule with the smallest mean gap on the other batches, score it on the "
           "held-out one.", ""]
    for title, cand in (("among the uncentred rules (centring stays off by default)", un),
                        ("among all rules, centred included", gap)):
        lobo = leave_one_batch_out(cand)
        chosen = defaultdict(int)
        for r, _ in lobo:
            chosen[r] += 1
        md += [f"**{title}**: held-out mean gap {np.mean([g for _, g in lobo]):+.3f}; chosen rule per fold: "
               + ", ".join(f"{r} {k}/{len(lobo)}" for r, k in sorted(chosen.items(), key=lambda kv: -kv[1])) + ".", "",
               "| held-out batch | chosen on the other batches | its gap on the held-out batch |", "|---|---|---|"]
        md += [f"| {b} | {r} | {g:+.2f} |" for b, (r, g) in zip(batches, lobo)]
        md.append("")
    return "\n".join(md)


# --------------------------------------------------------------------------------------------------------------------

_WARM = ("Seeds are the independent unit: every study runs all its seeds from one warm start, so the intervals "
         "cover the RL sampling only (`docs/protocol.md`, \"Seeds and intervals\").")
_BENCH = ("Seeds are the independent unit: each benchmark seed draws its own MDP, policy and batch; no model is "
          "trained, so there is no warm start to share.")
_EPS = ("The unit is the batch: each of the 9 first batches was collected once (3 environments, 3 policies); no "
        "interval is given over 9 heterogeneous batches.")

_GATE = ("The unit is the seed: each run's held-out success at its last iteration minus the warm start's, measured "
         "once on the same goals with more episodes; the rule and thresholds were committed before the first run "
         "(`analysis/gate.py`, the study README).")
STUDIES = {
    "llm-groundtruth": ("The real trainer on finite worlds with known advantages", llm_groundtruth, _WARM),
    "learning": ("TextCraft, two repeated training goals", lambda root: control_study(
        root, post_hoc=("grpo-shuffle", "gigpo-shuffle", "bipace_q-shuffle"), bar=0.25), _WARM),
    "cpu-study-pool": ("TextCraft, four repeated training goals", lambda root: control_study(
        root, extra=_pool_extra, bar=0.25), _WARM),
    "cpu-study": ("TextCraft, fresh goals each iteration, lr 1e-4", control_study, _WARM),
    "cpu-study-lr3e-5": ("TextCraft, fresh goals each iteration, lr 3e-5", control_study, _WARM),
    "cpu-study-alfworld": ("Generated ALFWorld", control_study, _WARM),
    "cpu-hgpo-rule": ("HGPO's two rules in training, TextCraft, cpu-study's recipe", control_study, _WARM),
    "estimator-bench": ("Estimators against exact advantages on finite text MDPs", estimator_bench, _BENCH),
    "epsilon": ("The rules of `epsilon: auto`", epsilon_rules, _EPS),
    "llm-gt-halves": ("The halves of BiPACE on the over-split finite world", halves, _WARM),
    "halves-textcraft": ("The halves of BiPACE on TextCraft, held-out goals", halves_heldout, _WARM),
    "llm-gt-rescored": ("llm-groundtruth's same-batch readings against the every-cell truth", rescored, _WARM),
    "gate-textcraft": ("The learning gate on TextCraft: held-out success against the warm start", gate_report,
                       _GATE),
}


def reanalyse(study: str, results: Path = Path("results")) -> str:
    """The re-analysis of ``results/<study>`` as Markdown (``STUDIES`` names the studies)."""
    if study not in STUDIES:
        raise KeyError(f"unknown study {study!r}; known: {', '.join(STUDIES)}")
    title, fn, unit = STUDIES[study]
    body = fn(Path(results) / study)
    return (f"# Re-analysis: {title}\n\nGenerated by `python -m experiments.reanalyse {study}` "
            f"(`analysis/reanalysis.py`); do not edit by hand. {unit}\n\n" + body + "\n")
